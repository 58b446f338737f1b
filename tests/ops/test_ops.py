"""The public ops: ``torch.library.opcheck`` of every public op (``w8a8::scaled_mm``,
``quantize_per_token``, ``quantize_static``, ``linear``, ``rms_norm_quant``,
``add_rms_norm_quant``, ``silu_mul_quant``) on the CPU and on CUDA, and of
every kernel op available here; ``torch.export`` of a model of W8A8Linear layers: exported
on the CPU, saved, loaded, run on the CPU and (moved) on a GPU, equal to eager bit for bit.
"""
import pytest
import torch
from torch import nn

import w8a8
from helpers import CUDA, kernel_params, mm_operands, rand_int8, rand_scale

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def _mm_args(device, m, bias_dtype, out_dtype=torch.bfloat16):
    a, b, sa, sb, bias = mm_operands(m, 64, 128, device, per_token=m != 1, bias_dtype=bias_dtype)
    return (a, b, sa, sb, bias, out_dtype)


def _quant_args(device):
    x = torch.randn(3, 5, 48, device=device, dtype=torch.bfloat16)
    return x, torch.tensor([0.02], device=device), torch.tensor([3], dtype=torch.int32, device=device)


def _fused_args(device):
    """(op name, args) of each fused op: 3-D x, a row-strided residual, gate / up as the
    halves of one [M, 2F] tensor."""
    x = torch.randn(3, 5, 48, device=device, dtype=torch.bfloat16)
    residual = torch.randn(3, 5, 96, device=device, dtype=torch.bfloat16)[..., 48:]
    weight = torch.randn(48, device=device, dtype=torch.bfloat16)
    both = torch.randn(7, 2 * 40, device=device, dtype=torch.float16)
    return [("rms_norm_quant", (x, weight, 1e-6)), ("add_rms_norm_quant", (x, residual, weight, 1e-5)),
            ("silu_mul_quant", (both[:, :40], both[:, 40:]))]


def _linear_args(device, m, static):
    x = torch.randn(m, 128, device=device, dtype=torch.bfloat16)
    w, ws = rand_int8(64, 128, device=device), rand_scale(64, device=device)
    bias = torch.randn(64, device=device).to(torch.bfloat16)
    s = torch.tensor([0.02], device=device) if static else None
    zp = torch.tensor([-3], dtype=torch.int8, device=device) if static else None
    return (x, w, ws, bias, s, zp)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_public_ops(device):
    for m, bias_dtype, out_dtype in ((17, torch.float32, torch.bfloat16), (1, None, torch.float16),
                                     (32, torch.bfloat16, torch.bfloat16), (5, None, torch.float32)):
        torch.library.opcheck(torch.ops.w8a8.scaled_mm.default, _mm_args(device, m, bias_dtype, out_dtype))
    x, scale, zp = _quant_args(device)
    torch.library.opcheck(torch.ops.w8a8.quantize_per_token.default, (x,))
    torch.library.opcheck(torch.ops.w8a8.quantize_static.default, (x, scale, None))
    torch.library.opcheck(torch.ops.w8a8.quantize_static.default, (x, scale, zp))
    for m, static in ((1, False), (16, True), (100, False), (65, True), (200, False)):  # sm90 at this N: single op <= 192
        torch.library.opcheck(torch.ops.w8a8.linear.default, _linear_args(device, m, static))
    torch.library.opcheck(torch.ops.w8a8.linear.default, (torch.randn(2, 3, 128, device=device),
                                                         *_linear_args(device, 1, False)[1:3], None, None, None))
    for op, args in _fused_args(device):
        torch.library.opcheck(getattr(torch.ops.w8a8, op).default, args)


def test_opcheck_quantize_static_permuted_input_cpu():
    x = torch.randn(3, 6, 40).transpose(0, 1)
    torch.library.opcheck(torch.ops.w8a8.quantize_static.default, (x, torch.tensor([0.02]), None))


@pytest.mark.parametrize("device,backend", kernel_params("scaled_mm"))
def test_opcheck_scaled_mm_kernels(device, backend):
    if backend == "reference":
        pytest.skip("the reference is a Python function, not an op (the public op's CPU implementation)")
    op = getattr(torch.ops.w8a8, f"scaled_mm_{backend}").default
    for m, bias_dtype in ((17, torch.float32), (1, None), (32, torch.bfloat16), (100, None)):
        torch.library.opcheck(op, _mm_args(device, m, bias_dtype))


@pytest.mark.parametrize("device,backend", kernel_params("quantize_per_token"))
def test_opcheck_quantize_kernels(device, backend):
    if backend == "reference":
        pytest.skip("the reference is a Python function, not an op (the public op's CPU implementation)")
    x, scale, zp = _quant_args(device)
    torch.library.opcheck(getattr(torch.ops.w8a8, f"quantize_per_token_{backend}").default, (x,))
    op = getattr(torch.ops.w8a8, f"quantize_static_{backend}").default
    torch.library.opcheck(op, (x, scale, None))
    torch.library.opcheck(op, (x, scale, zp))


@pytest.mark.parametrize("device,backend", kernel_params("rms_norm_quant"))
def test_opcheck_fused_quant_kernels(device, backend):
    if backend == "reference":
        pytest.skip("the reference is a Python function, not an op (the public op's CPU implementation)")
    for op, args in _fused_args(device):
        torch.library.opcheck(getattr(torch.ops.w8a8, f"{op}_{backend}").default, args)


@pytest.mark.sm90
def test_opcheck_linear_sm90():
    from helpers import SM90

    if not SM90:
        pytest.skip("needs w8a8._C on an sm_90 GPU")
    for m, static in ((1, False), (16, True), (64, False)):
        torch.library.opcheck(torch.ops.w8a8.linear_sm90.default, _linear_args("cuda", m, static))
    for m, rows, static in ((100, 128, False), (129, 192, True)):  # codes row-padded (w8a8.padding)
        torch.library.opcheck(torch.ops.w8a8.linear_sm90.default, _linear_args("cuda", m, static), {"rows": rows})


# --- torch.export --------------------------------------------------------------------------------


class _Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(64, 128)
        self.down = nn.Linear(128, 32, bias=False)

    def forward(self, x):
        return self.down(torch.nn.functional.silu(self.up(x)))


def _quantized_model():
    model = _Model()
    model.up = w8a8.W8A8Linear.from_linear(model.up)
    model.down = w8a8.W8A8Linear.from_linear(model.down, act_quant="static", input_scale=0.02)
    return model.eval()


def _move(ep, device):
    """What docs/INFERENCE.md shows: the exported program's module moved to the device."""
    return ep.module().to(device)


def test_export_save_load_run(tmp_path):
    model = _quantized_model()
    x = torch.randn(2, 7, 64)
    ep = torch.export.export(model, (x,))
    assert "w8a8.linear" in str(ep.graph_module.code), ep.graph_module.code
    path = tmp_path / "model.pt2"
    torch.export.save(ep, str(path))
    loaded = torch.export.load(str(path))
    with torch.no_grad():
        assert torch.equal(loaded.module()(x), model(x))
        x2 = torch.randn(2, 7, 64)
        assert torch.equal(loaded.module()(x2), model(x2)), "the program is not specialised to the example's values"
    if CUDA:  # the same file's program on a GPU runs the CUDA kernels: the eager CUDA output, bit for bit
        gpu = _move(torch.export.load(str(path)), "cuda")
        model_gpu = _quantized_model()
        model_gpu.load_state_dict(model.state_dict())
        model_gpu = model_gpu.to("cuda")
        with torch.no_grad():
            assert torch.equal(gpu(x.cuda()), model_gpu(x.cuda()))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op, grad_input", [
    ("rms_norm_quant", "x"), ("rms_norm_quant", "weight"), ("add_rms_norm_quant", "x"),
    ("add_rms_norm_quant", "residual"), ("add_rms_norm_quant", "weight"), ("silu_mul_quant", "x"),
    ("silu_mul_quant", "up")])
def test_a_backward_through_a_fused_producer_raises(op, grad_input, device):
    """The fused producers are inference only, as scaled_mm and linear are: a backward into any
    of their float inputs raises with the op's name instead of leaving it without a gradient
    (on a GPU too, where the eager wrappers skip the dispatcher otherwise)."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    x, other = (torch.randn(3, 32, device=device, dtype=dtype) for _ in range(2))
    weight = torch.randn(32, device=device, dtype=dtype)
    {"x": x, "weight": weight, "residual": other, "up": other}[grad_input].requires_grad_(True)
    if op == "silu_mul_quant":
        out = w8a8.ops.silu_mul_quant(x, other)
    elif op == "rms_norm_quant":
        out = w8a8.ops.rms_norm_quant(x, weight, 1e-6)
    else:
        out = w8a8.ops.rms_norm_quant(x, weight, 1e-6, residual=other)
    grad_out = out[1] if op == "silu_mul_quant" else out[2]  # scales / normed: float outputs
    with pytest.raises(RuntimeError, match=rf"w8a8\.{op} is inference only"):
        grad_out.sum().backward()
