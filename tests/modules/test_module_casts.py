"""W8A8Linear through module casts, device moves, load_state_dict and backward."""
import pytest
import torch
from torch import nn

import w8a8
from w8a8 import reference


def _layer(act_quant="dynamic", **kw):
    lin = nn.Linear(32, 24)
    scale = 0.03 if act_quant == "static" else None
    return w8a8.W8A8Linear.from_linear(lin, act_quant=act_quant, input_scale=scale, **kw)


CASTS = {
    "half": (lambda m: m.half(), torch.float16),
    "bfloat16": (lambda m: m.bfloat16(), torch.bfloat16),
    "to(bf16)": (lambda m: m.to(torch.bfloat16), torch.bfloat16),
    "to(cpu, fp16)": (lambda m: m.to("cpu", torch.float16), torch.float16),
    "type(fp16)": (lambda m: m.type(torch.float16), torch.float16),
    "double": (lambda m: m.double(), torch.float64),
}


@pytest.mark.parametrize("act_quant", ["dynamic", "static"])
@pytest.mark.parametrize("cast", list(CASTS))
def test_casts_keep_int8_weights_and_fp32_scales(cast, act_quant):
    layer = _layer(act_quant)
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    fn, dtype = CASTS[cast]
    assert fn(layer) is layer
    assert layer.weight.dtype == torch.int8 and torch.equal(layer.weight, before["weight"])
    assert layer.weight_scale.dtype == torch.float32 and torch.equal(layer.weight_scale, before["weight_scale"])
    if act_quant == "static":
        assert layer.input_scale.dtype == torch.float32 and torch.equal(layer.input_scale, before["input_scale"])
    assert layer.bias.dtype == dtype  # the bias follows the cast
    if dtype == torch.float64:
        return  # the op takes fp32 / fp16 / bf16 activations
    x = torch.randn(5, 32, dtype=dtype)
    y = layer(x)
    assert y.dtype == dtype
    if act_quant == "static":
        q, s = reference.quantize_static(x, layer.input_scale), layer.input_scale
    else:
        q, s = reference.quantize_per_token(x)
    assert torch.equal(y, reference.scaled_mm(q, layer.weight, s, layer.weight_scale, layer.bias, dtype))


def test_cast_back_to_float_is_exact_and_zero_point_stays_int8():
    layer = w8a8.W8A8Linear(32, 24, act_quant="static", input_zero_point=True)
    layer.input_zero_point.fill_(-7)
    layer.weight_scale.uniform_(0.001, 0.01)
    scale = layer.weight_scale.clone()
    layer.bfloat16().float()
    assert torch.equal(layer.weight_scale, scale)  # never rounded through bf16
    assert layer.input_zero_point.dtype == torch.int8 and layer.input_zero_point.item() == -7
    assert layer.bias.dtype == torch.float32


def test_quantized_model_half_runs_and_device_moves_move_everything():
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    w8a8.quantize_model(model, skip=(), progress=False)
    model.half()
    assert model(torch.randn(3, 16, dtype=torch.float16)).dtype == torch.float16
    model.to("meta")
    assert all(t.is_meta for t in model.state_dict().values())
    assert model[0].weight.dtype == torch.int8 and model[0].weight_scale.dtype == torch.float32
    model.to_empty(device="cpu")
    assert not any(t.is_meta for t in model.state_dict().values()) and model[0].weight.dtype == torch.int8


BAD_STATES = {
    "float weight": ("weight", lambda t: t.float() * 0.01, r"weight: expected dtype torch.int8, got torch.float32"),
    "int32 weight": ("weight", lambda t: t.int() + 300, r"weight: expected dtype torch.int8, got torch.int32"),
    "int scale": ("weight_scale", lambda t: t.int(), r"weight_scale: expected dtype torch.float32 .*got torch.int32"),
    "float64 scale": ("weight_scale", lambda t: t.double(), r"weight_scale: expected dtype torch.float32 .*got torch.float64"),
    "int bias": ("bias", lambda t: t.int(), r"bias: expected a float dtype, got torch.int32"),
}


@pytest.mark.parametrize("assign", [False, True])
@pytest.mark.parametrize("case", list(BAD_STATES))
def test_load_state_dict_refuses_wrong_dtypes_naming_the_key(case, assign):
    layer = _layer()
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    key, edit, match = BAD_STATES[case]
    sd = {**layer.state_dict(), key: edit(layer.state_dict()[key])}
    with pytest.raises(RuntimeError, match=match):
        layer.load_state_dict(sd, assign=assign)
    after = layer.state_dict()
    assert all(torch.equal(after[k], v) and after[k].dtype == v.dtype for k, v in before.items())


def test_load_state_dict_upcasts_half_scales_exactly():
    layer, src = _layer(), _layer()
    sd = {**src.state_dict(), "weight_scale": src.weight_scale.bfloat16().reshape(-1, 1)}
    layer.load_state_dict(sd, assign=True)
    assert layer.weight_scale.dtype == torch.float32 and layer.weight_scale.shape == (24,)
    assert torch.equal(layer.weight_scale, src.weight_scale.bfloat16().float())


def test_backward_raises_inference_only():
    layer = _layer()
    x = torch.randn(2, 32, requires_grad=True)
    y = layer(x).sum()
    with pytest.raises(RuntimeError, match=r"inference only"):
        y.backward()
