"""W8A8Linear: against the float nn.Linear (LINEAR_REL_TOL), against its definition on
every GEMM kernel (bit for bit), static / dynamic / zero point, any leading dims, bias,
use_compile, CUDA-graph replay on a GPU, and its module contract (state dict, meta device,
repr). Its bad inputs: test_bad_inputs.py."""
import io

import pytest
import torch
from torch import nn

import w8a8
from w8a8 import reference
from helpers import (DEVICES, LINEAR_REL_TOL, assert_ulp_close, capture_graph, kernel_params, max_ulp, ref_linear,
                     rel_err)

_rel_err = rel_err


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bias", [True, False])
def test_dynamic_forward_close_to_float(device, dtype, bias):
    if device == "cpu" and dtype == torch.float16:
        pytest.skip("fp16 nn.Linear is not a CPU reference")
    lin = nn.Linear(256, 96, bias=bias).to(device, dtype)
    layer = w8a8.W8A8Linear.from_linear(lin)
    x = torch.randn(2, 7, 256, device=device, dtype=dtype)
    out = layer(x)
    assert out.shape == (2, 7, 96) and out.dtype == dtype
    with torch.no_grad():
        ref = lin(x)
    assert _rel_err(out, ref) < LINEAR_REL_TOL[dtype]


def test_forward_equals_the_exact_composition():
    lin = nn.Linear(64, 48)
    layer = w8a8.W8A8Linear.from_linear(lin)
    x = torch.randn(5, 64)
    q, s = reference.quantize_per_token(x)
    expected = reference.scaled_mm(q, layer.weight, s, layer.weight_scale, layer.bias, torch.float32)
    assert torch.equal(layer(x), expected)


def test_forward_reads_the_tensors_whatever_holds_them():
    """forward reads the tensors from _parameters; a layer without a name there (pickled before every
    name was registered: bias a plain attribute) reads its attributes instead, and a deleted name is
    an error, not a layer without it."""
    layer = w8a8.W8A8Linear.from_linear(nn.Linear(64, 48, bias=False))
    assert set(layer._parameters) == {"weight", "weight_scale", "bias", "input_scale", "input_zero_point"}
    assert layer.bias is None and [n for n, _ in layer.named_parameters()] == ["weight", "weight_scale"]
    x = torch.randn(3, 64)
    expected = layer(x)
    del layer._parameters["bias"]
    layer.__dict__["bias"] = None
    assert torch.equal(layer(x), expected)
    del layer.bias
    with pytest.raises(AttributeError, match="bias"):
        layer(x)


def test_static_forward():
    lin = nn.Linear(128, 64)
    x = torch.randn(9, 128)
    input_scale = x.abs().max().item() / 127
    layer = w8a8.W8A8Linear.from_linear(lin, act_quant="static", input_scale=input_scale)
    assert layer.input_scale.shape == (1,) and layer.input_scale.item() == pytest.approx(input_scale)
    q = reference.quantize_static(x, layer.input_scale)
    expected = reference.scaled_mm(q, layer.weight, layer.input_scale, layer.weight_scale, layer.bias, torch.float32)
    assert torch.equal(layer(x), expected)
    with torch.no_grad():
        assert _rel_err(layer(x), lin(x)) < LINEAR_REL_TOL[torch.float32]


def test_weight_quantization_is_per_channel_half_even():
    lin = nn.Linear(32, 8)
    layer = w8a8.W8A8Linear.from_linear(lin)
    w = lin.weight.detach()
    scale = w.abs().amax(1) / 127
    assert torch.equal(layer.weight_scale, scale)
    assert torch.equal(layer.weight, torch.round(w / scale[:, None]).to(torch.int8))


def test_from_linear_argument_errors():
    lin = nn.Linear(16, 8)
    with pytest.raises(ValueError, match="act_quant='static' needs input_scale"):
        w8a8.W8A8Linear.from_linear(lin, act_quant="static")
    with pytest.raises(ValueError, match="input_scale is only used with act_quant='static'"):
        w8a8.W8A8Linear.from_linear(lin, input_scale=0.1)
    with pytest.raises(ValueError, match=r"input_scale must be finite and > 0, got -1.0"):
        w8a8.W8A8Linear.from_linear(lin, act_quant="static", input_scale=-1.0)
    with pytest.raises(ValueError, match=r"act_quant must be one of \('dynamic', 'static'\), got 'int4'"):
        w8a8.W8A8Linear(16, 8, act_quant="int4")


def test_forward_shape_error():
    layer = w8a8.W8A8Linear(16, 8)
    with pytest.raises(ValueError, match=r"^w8a8\.linear: x must be \[\.\.\., K\] with K = 16 \(weight's K\), got shape \[3, 15\]$"):
        layer(torch.randn(3, 15))


@pytest.mark.parametrize("act_quant", ["dynamic", "static"])
def test_state_dict_round_trip(act_quant):
    lin = nn.Linear(64, 32)
    kw = {"input_scale": 0.05} if act_quant == "static" else {}
    layer = w8a8.W8A8Linear.from_linear(lin, act_quant=act_quant, **kw)
    buf = io.BytesIO()
    torch.save(layer.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, weights_only=True)
    expected_keys = {"weight", "weight_scale", "bias"} | ({"input_scale"} if act_quant == "static" else set())
    assert set(sd) == expected_keys
    fresh = w8a8.W8A8Linear(64, 32, act_quant=act_quant)
    fresh.load_state_dict(sd)
    x = torch.randn(3, 64)
    assert torch.equal(fresh(x), layer(x))


def test_meta_device_construction_and_assign_load():
    lin = nn.Linear(64, 32, bias=False)
    real = w8a8.W8A8Linear.from_linear(lin)
    with torch.device("meta"):
        layer = w8a8.W8A8Linear(64, 32, bias=False)
    assert layer.weight.is_meta and layer.weight.dtype == torch.int8
    layer.load_state_dict(real.state_dict(), assign=True)
    assert not layer.weight.is_meta
    x = torch.randn(4, 64)
    assert torch.equal(layer(x), real(x))


def test_extra_repr_names_the_configuration():
    layer = w8a8.W8A8Linear(16, 8, bias=False, act_quant="static")
    assert repr(layer) == (
        "W8A8Linear(in_features=16, out_features=8, bias=False, act_quant='static', backend=None)"
    )


def test_any_leading_dims_and_single_token():
    lin = nn.Linear(32, 16)
    layer = w8a8.W8A8Linear.from_linear(lin)
    for shape in [(32,), (1, 32), (2, 3, 4, 32)]:
        x = torch.randn(shape)
        out = layer(x)
        assert out.shape == (*shape[:-1], 16)
        assert torch.equal(out.reshape(-1, 16), layer(x.reshape(-1, 32)))


# --- every kernel, zero points, graphs, compile -----------------------------------------------------


@pytest.mark.parametrize("device,backend", kernel_params("linear"))
@pytest.mark.parametrize("act_quant,zero_point,shape,use_compile", [
    ("dynamic", False, (1, 64), False), ("dynamic", False, (3, 5, 64), True), ("static", False, (17, 64), False),
    ("static", True, (3, 5, 64), False), ("static", True, (17, 64), True)], ids=str)
def test_forced_kernels_equal_the_composition(device, backend, act_quant, zero_point, shape, use_compile):
    """W8A8Linear on each GEMM kernel (forced) is its definition (quantize, then scaled_mm with
    the folded bias), any leading dims, with and without torch.compile(fullgraph=True)."""
    if use_compile and backend == "triton" and device == "cpu":
        pytest.skip("Triton's interpreter does not trace")
    if use_compile and backend == "reference":
        pytest.skip("the reference is torch code: compiled, Inductor regenerates it with its own rounding (the "
                    "public op, compiled in test_compile / test_ops, is opaque and keeps its kernel)")
    if use_compile:
        torch._dynamo.reset()  # one code object (W8A8Linear.forward) across the parametrization: no recompile limit
    layer = w8a8.W8A8Linear(64, 48, act_quant=act_quant, backend=backend, device=device, dtype=torch.bfloat16,
                            input_zero_point=zero_point)
    layer.load_state_dict(w8a8.W8A8Linear.from_linear(
        nn.Linear(64, 48, device=device, dtype=torch.bfloat16), act_quant=act_quant,
        **({"input_scale": 0.03} if act_quant == "static" else {})).state_dict(), strict=False)
    if zero_point:
        layer.input_zero_point.fill_(-7)
    x = torch.randn(shape, device=device, dtype=torch.bfloat16)
    fn = torch.compile(layer, fullgraph=True) if use_compile else layer
    out = fn(x)
    assert out.shape == (*shape[:-1], 48) and out.dtype == torch.bfloat16
    assert_ulp_close(out, ref_linear(layer, x), max_ulp(backend, device, out.dtype))
    if use_compile:
        assert torch.equal(out, layer(x))


def test_zero_point_folds_exactly():
    """With an input zero point the layer equals s * w_scale * ((q - zp) @ W^T) + bias in fp32."""
    layer = w8a8.W8A8Linear(32, 16, act_quant="static", input_zero_point=True)
    layer.load_state_dict(w8a8.W8A8Linear.from_linear(nn.Linear(32, 16), act_quant="static", input_scale=0.02)
                          .state_dict(), strict=False)
    layer.input_zero_point.fill_(5)
    x = torch.randn(6, 32)
    q = reference.quantize_static(x, layer.input_scale, layer.input_zero_point)
    acc = ((q.double() - 5) @ layer.weight.double().t()).float()  # exact: integers below 2^53
    expected = layer.input_scale * (layer.weight_scale * acc) + layer.bias
    assert rel_err(layer(x), expected) < 1e-6
    assert "input_zero_point=True" in repr(layer)


@pytest.mark.cuda
@pytest.mark.parametrize("device,backend", kernel_params("linear", devices=("cuda",)))
@pytest.mark.parametrize("m", [1, 16, 64, 100, 128, 129, 192, 193])  # sm90 at this N: the single C++ op up to 192 tokens
def test_cuda_graph_replay(device, backend, m):
    """Captured in a CUDA graph and replayed with new inputs: each replay is the reference's bits."""
    lin = torch.nn.Linear(4096, 1024, bias=True, device="cuda", dtype=torch.bfloat16)
    layer = w8a8.W8A8Linear.from_linear(lin, backend=None if backend == "reference" else backend)
    x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
    graph, y = capture_graph(lambda: layer(x))
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        assert_ulp_close(y, ref_linear(layer, x))
