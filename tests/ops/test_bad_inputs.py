"""Bad inputs: the SAME bad input gives the same exception type and the same message on every
path. Each rule of ``w8a8/validate.py``, for each op, at M = 1, 16, 64, 4096 (for linear M
picks the single C++ op or the composed path on sm90; for scaled_mm the decode kernels or
the tiles), through every kernel available for the op (reference and triton here; sm90,
sm80, cuda and linear_sm90 on a GPU), the public op, the Python wrapper and W8A8Linear
(the fused rms_norm_quant, add_rms_norm_quant and silu_mul_quant through their kernels,
ops and wrappers): ``type(e) is ValueError``, the message starts with ``w8a8.<op>: `` and equals, byte for
byte, the reference kernel's message for the same input.

Edge values that are not errors (NaN rows, zero / negative scales, K = 0, M = 0):
test_edge_values.py.
"""
from __future__ import annotations

import inspect

import pytest
import torch

import w8a8
from w8a8 import dispatch, validate
from helpers import CUDA, rand_int8, rand_scale

N, K = 24, 32  # N % 8 == 0 and K % 16 == 0: every kernel takes the base shape
M_VALUES = [1, 16, 64, 4096]
BIG_K = validate.MAX_K + 1  # one past the K at which the int32 accumulator can overflow
FLOAT = torch.bfloat16


# --- the paths of each op: (name, callable taking the op's arguments) ---------------------------


def _mm_paths(device: str):
    paths = [(f"kernel:{b}", dispatch.kernel("scaled_mm", b)) for b in dispatch.BACKENDS["scaled_mm"]
             if dispatch.unavailable_reason("scaled_mm", b, torch.device(device)) is None]
    paths += [("op", torch.ops.w8a8.scaled_mm.default), ("wrapper", w8a8.ops.scaled_mm)]
    return paths


def _quant_paths(op: str, device: str):
    paths = [(f"kernel:{b}", dispatch.kernel(op, b)) for b in dispatch.BACKENDS[op]
             if dispatch.unavailable_reason(op, b, torch.device(device)) is None]
    return paths + [("op", getattr(torch.ops.w8a8, op).default), ("wrapper", getattr(w8a8.ops, op))]


def _linear_paths(device: str):
    def composed(backend):
        return lambda x, w, ws, bias, s, zp: dispatch.linear_kernel(x, w, backend)(x, w, ws, bias, s, zp)

    paths = [(f"composed:{b}", composed(b)) for b in dispatch.BACKENDS["scaled_mm"]
             if dispatch.unavailable_reason("scaled_mm", b, torch.device(device)) is None]
    if device == "cuda" and hasattr(torch.ops.w8a8, "linear_sm90"):
        paths.append(("kernel:linear_sm90", torch.ops.w8a8.linear_sm90.default))
    return paths + [("op", torch.ops.w8a8.linear.default), ("wrapper", w8a8.ops.linear)]


def _fused_paths(op: str, wrapper):
    def paths(device: str):
        kernels = [(f"kernel:{b}", dispatch.kernel(op, b)) for b in dispatch.BACKENDS[op]
                   if dispatch.unavailable_reason(op, b, torch.device(device)) is None]
        return kernels + [("op", getattr(torch.ops.w8a8, op).default), ("wrapper", wrapper)]

    return paths


_FUSED_PATHS = {
    "rms_norm_quant": _fused_paths("rms_norm_quant", w8a8.ops.rms_norm_quant),
    "add_rms_norm_quant": _fused_paths(
        "add_rms_norm_quant", lambda x, residual, weight, eps: w8a8.ops.rms_norm_quant(x, weight, eps, residual=residual)
    ),
    "silu_mul_quant": _fused_paths("silu_mul_quant", w8a8.ops.silu_mul_quant),
}


REFERENCE = {
    "scaled_mm": dispatch.kernel("scaled_mm", "reference"),
    "quantize_per_token": dispatch.kernel("quantize_per_token", "reference"),
    "quantize_static": dispatch.kernel("quantize_static", "reference"),
    "linear": lambda *args: dispatch.linear_kernel(args[0], args[1], "reference")(*args),
    "rms_norm_quant": dispatch.kernel("rms_norm_quant", "reference"),
    "add_rms_norm_quant": dispatch.kernel("add_rms_norm_quant", "reference"),
    "silu_mul_quant": dispatch.kernel("silu_mul_quant", "reference"),
}


def _message(fn, args) -> tuple[type, str]:
    with pytest.raises(Exception) as info:
        fn(*args)
    return type(info.value), str(info.value)


def _assert_same_error(op: str, paths, args, not_a_tensor: bool = False) -> str:
    ref_type, expected = _message(REFERENCE[op], args)
    assert ref_type is ValueError, (ref_type, expected)
    assert expected.startswith(f"w8a8.{op}: "), expected
    for name, fn in paths:
        got_type, got = _message(fn, args)
        if not_a_tensor and got_type is not ValueError:
            # A non-tensor where a torch op's schema wants a Tensor (or a string for a
            # float): torch's own argument parser refuses it before any w8a8 code runs (it
            # names the op's schema).
            assert got_type in (TypeError, RuntimeError) and "w8a8::" in got, f"{name}: {got_type.__name__}: {got}"
            continue
        assert got_type is ValueError, f"{name}: {got_type.__name__}: {got}"
        assert got == expected, f"{name}:\n  got      {got!r}\n  expected {expected!r}"
    return expected


# --- cases: name -> builder(device, m, other_device) returning the op's arguments -----------------


def _mm(d, m, **change):
    kw = dict(a=rand_int8(m, K, device=d), b=rand_int8(N, K, device=d), a_scale=rand_scale(m, 1, device=d),
              b_scale=rand_scale(N, device=d), bias=torch.randn(N, device=d), out_dtype=FLOAT)
    kw.update({k: (v(kw) if callable(v) else v) for k, v in change.items()})
    return tuple(kw.values())


SCALED_MM = {
    "a_not_a_tensor": lambda d, m: _mm(d, m, a=None),
    "b_not_a_tensor": lambda d, m: _mm(d, m, b=[[1]]),
    "a_scale_not_a_tensor": lambda d, m: _mm(d, m, a_scale=1.0),
    "b_scale_not_a_tensor": lambda d, m: _mm(d, m, b_scale=None),
    "bias_not_a_tensor": lambda d, m: _mm(d, m, bias=0.5),
    "a_dtype": lambda d, m: _mm(d, m, a=lambda kw: kw["a"].view(torch.uint8)),
    "b_dtype": lambda d, m: _mm(d, m, b=lambda kw: kw["b"].half()),
    "a_1d": lambda d, m: _mm(d, m, a=lambda kw: kw["a"][0]),
    "a_3d": lambda d, m: _mm(d, m, a=lambda kw: kw["a"][None]),
    "b_3d": lambda d, m: _mm(d, m, b=lambda kw: kw["b"][None]),
    "k_mismatch": lambda d, m: _mm(d, m, b=lambda kw: rand_int8(N, K - 1, device=d)),
    "out_dtype_int": lambda d, m: _mm(d, m, out_dtype=torch.int32),
    "a_scale_dtype": lambda d, m: _mm(d, m, a_scale=lambda kw: kw["a_scale"].double()),
    "a_scale_numel": lambda d, m: _mm(d, m, a_scale=lambda kw: rand_scale(m + 1, 1, device=d)),
    "a_scale_strided": lambda d, m: _mm(d, m, a_scale=lambda kw: rand_scale(m, 2, device=d)[:, :1]) if m > 1 else None,
    "b_scale_dtype": lambda d, m: _mm(d, m, b_scale=lambda kw: kw["b_scale"].half()),
    "b_scale_numel": lambda d, m: _mm(d, m, b_scale=lambda kw: rand_scale(N - 1, device=d)),
    "b_scale_strided": lambda d, m: _mm(d, m, b_scale=lambda kw: rand_scale(2 * N, device=d)[::2]),
    "bias_dtype": lambda d, m: _mm(d, m, bias=lambda kw: kw["bias"].int()),
    "bias_other_float": lambda d, m: _mm(d, m, bias=lambda kw: kw["bias"].half()),
    "bias_shape": lambda d, m: _mm(d, m, bias=lambda kw: kw["bias"][None]),
    "bias_numel": lambda d, m: _mm(d, m, bias=lambda kw: torch.randn(N - 1, device=d)),
    "bias_strided": lambda d, m: _mm(d, m, bias=lambda kw: torch.randn(2 * N, device=d)[::2]),
    "a_k_stride": lambda d, m: _mm(d, m, a=lambda kw: rand_int8(m, 2 * K, device=d)[:, ::2]),
    "b_transposed": lambda d, m: _mm(d, m, b=lambda kw: rand_int8(K, N, device=d).t()),
    # Rows broadcast from one (stride 0): the K bound is checked before any stride rule.
    "k_over_int32_bound": lambda d, m: _mm(d, m, a=rand_int8(1, BIG_K, device=d).expand(m, -1),
                                           b=rand_int8(1, BIG_K, device=d).expand(N, -1)),
}
SCALED_MM_DEVICES = {  # a CPU tensor among CUDA ones (on a GPU)
    "b_on_cpu": lambda d, m: _mm(d, m, b=lambda kw: kw["b"].cpu()),
    "a_on_cpu": lambda d, m: _mm(d, m, a=lambda kw: kw["a"].cpu()),
    "a_scale_on_cpu": lambda d, m: _mm(d, m, a_scale=lambda kw: kw["a_scale"].cpu()),
    "b_scale_on_cpu": lambda d, m: _mm(d, m, b_scale=lambda kw: kw["b_scale"].cpu()),
    "bias_on_cpu": lambda d, m: _mm(d, m, bias=lambda kw: kw["bias"].cpu()),
}


def _x(d, m, k=K, dtype=FLOAT):
    return torch.randn(m, k, device=d).to(dtype)


PER_TOKEN = {
    "x_not_a_tensor": lambda d, m: ([[1.0, 2.0]],),
    "x_fp64": lambda d, m: (_x(d, m, dtype=torch.float64),),
    "x_int8": lambda d, m: (rand_int8(m, K, device=d),),
    "x_0d": lambda d, m: (torch.tensor(1.0, device=d),),
    "k_0": lambda d, m: (_x(d, m, 0),),
    "x_k_stride": lambda d, m: (_x(d, m, 2 * K)[:, ::2],),
    "x_transposed": lambda d, m: (_x(d, K, m).t(),) if m > 1 else (_x(d, 3, 2 * K)[:, ::2],),
}


def _st(d, m, scale=None, zp="none", x=None):
    x = _x(d, m) if x is None else x
    scale = torch.tensor([0.05], device=d) if scale is None else scale
    zp = torch.tensor([3], dtype=torch.int8, device=d) if zp == "none" else zp
    return x, scale, zp


STATIC = {
    "x_fp64": lambda d, m: _st(d, m, x=_x(d, m, dtype=torch.float64)),
    "x_0d": lambda d, m: _st(d, m, x=torch.tensor(1.0, device=d)),
    "x_k_stride": lambda d, m: _st(d, m, x=_x(d, m, 2 * K)[:, ::2]),
    "scale_not_a_tensor": lambda d, m: _st(d, m, scale=0.05),
    "zero_point_not_a_tensor": lambda d, m: _st(d, m, zp=3),
    "scale_dtype": lambda d, m: _st(d, m, scale=torch.tensor([0.05], dtype=torch.float16, device=d)),
    "scale_numel": lambda d, m: _st(d, m, scale=torch.tensor([0.05, 0.1], device=d)),
    "zero_point_dtype": lambda d, m: _st(d, m, zp=torch.tensor([1.0], device=d)),
    "zero_point_numel": lambda d, m: _st(d, m, zp=torch.tensor([1, 2], dtype=torch.int32, device=d)),
}
STATIC_DEVICES = {
    "scale_on_cpu": lambda d, m: _st(d, m, scale=torch.tensor([0.05])),
    "zero_point_on_cpu": lambda d, m: _st(d, m, zp=torch.tensor([3], dtype=torch.int8)),
}


def _lin(d, m, **change):
    kw = dict(x=_x(d, m), weight=rand_int8(N, K, device=d), weight_scale=rand_scale(N, device=d),
              bias=torch.randn(N, device=d).to(FLOAT), input_scale=None, input_zero_point=None)
    kw.update({k: (v(kw) if callable(v) else v) for k, v in change.items()})
    return tuple(kw.values())


def _static_lin(d, m, **change):
    return _lin(d, m, input_scale=torch.tensor([0.05], device=d), **change)


LINEAR = {
    "x_not_a_tensor": lambda d, m: _lin(d, m, x=None),
    "x_fp64": lambda d, m: _lin(d, m, x=lambda kw: kw["x"].double()),
    "x_int64": lambda d, m: _lin(d, m, x=torch.ones(m, K, dtype=torch.int64, device=d)),
    "x_0d": lambda d, m: _lin(d, m, x=torch.tensor(1.0, device=d, dtype=FLOAT)),
    "weight_not_a_tensor": lambda d, m: _lin(d, m, weight=None),
    "weight_dtype": lambda d, m: _lin(d, m, weight=lambda kw: kw["weight"].float()),
    "weight_3d": lambda d, m: _lin(d, m, weight=lambda kw: kw["weight"][None]),
    "k_mismatch": lambda d, m: _lin(d, m, x=lambda kw: _x(d, m, K + 1)),
    "k_over_int32_bound": lambda d, m: _lin(d, m, x=torch.zeros(1, BIG_K, device=d, dtype=FLOAT).expand(m, -1),
                                            weight=rand_int8(1, BIG_K, device=d).expand(N, -1)),
    "weight_scale_dtype": lambda d, m: _lin(d, m, weight_scale=lambda kw: kw["weight_scale"].half()),
    "weight_scale_numel": lambda d, m: _lin(d, m, weight_scale=lambda kw: rand_scale(N + 1, device=d)),
    "weight_scale_strided": lambda d, m: _lin(d, m, weight_scale=lambda kw: rand_scale(2 * N, device=d)[::2]),
    "bias_dtype": lambda d, m: _lin(d, m, bias=lambda kw: kw["bias"].half()),  # neither fp32 nor x's dtype
    "bias_shape": lambda d, m: _lin(d, m, bias=lambda kw: kw["bias"][None]),
    "bias_strided": lambda d, m: _lin(d, m, bias=lambda kw: torch.randn(2 * N, device=d).to(FLOAT)[::2]),
    "weight_k_stride": lambda d, m: _lin(d, m, weight=lambda kw: rand_int8(N, 2 * K, device=d)[:, ::2]),
    "input_scale_dtype": lambda d, m: _lin(d, m, input_scale=torch.tensor([0.05], dtype=torch.float64, device=d)),
    "input_scale_numel": lambda d, m: _lin(d, m, input_scale=torch.tensor([0.05, 0.1], device=d)),
    "zero_point_without_scale": lambda d, m: _lin(d, m, input_zero_point=torch.tensor([1], dtype=torch.int8, device=d)),
    "zero_point_dtype": lambda d, m: _static_lin(d, m, input_zero_point=torch.tensor([1.0], device=d)),
    "zero_point_numel": lambda d, m: _static_lin(d, m, input_zero_point=torch.tensor([1, 2], dtype=torch.int8, device=d)),
}
LINEAR_DEVICES = {
    "x_on_cpu": lambda d, m: _lin(d, m, x=lambda kw: kw["x"].cpu()),
    "weight_on_cpu": lambda d, m: _lin(d, m, weight=lambda kw: kw["weight"].cpu()),
    "weight_scale_on_cpu": lambda d, m: _lin(d, m, weight_scale=lambda kw: kw["weight_scale"].cpu()),
    "bias_on_cpu": lambda d, m: _lin(d, m, bias=lambda kw: kw["bias"].cpu()),
    "input_scale_on_cpu": lambda d, m: _lin(d, m, input_scale=torch.tensor([0.05])),
}


def _norm(d, m, add=False, **change):
    """(x, weight, eps), or with ``add`` (x, residual, weight, eps)."""
    kw = dict(x=_x(d, m), residual=_x(d, m), weight=torch.randn(K, device=d).to(FLOAT), eps=1e-6)
    if not add:
        del kw["residual"]
    kw.update({k: (v(kw) if callable(v) else v) for k, v in change.items()})
    return tuple(kw.values())


_NORM_RULES = {  # the rules shared by rms_norm_quant and add_rms_norm_quant
    "x_not_a_tensor": dict(x=[[1.0, 2.0]]),
    "x_fp64": dict(x=lambda kw: kw["x"].double()),
    "x_int8": dict(x=lambda kw: rand_int8(*kw["x"].shape, device=kw["x"].device)),
    "x_0d": dict(x=lambda kw: torch.tensor(1.0, device=kw["x"].device, dtype=FLOAT)),
    "k_0": dict(x=lambda kw: kw["x"][:, :0]),
    "k_over_int32_bound": dict(x=lambda kw: torch.zeros(1, BIG_K, device=kw["x"].device, dtype=FLOAT).expand(
        kw["x"].shape[0], -1)),
    "x_k_stride": dict(x=lambda kw: _x(kw["x"].device, kw["x"].shape[0], 2 * K)[:, ::2]),
    "weight_not_a_tensor": dict(weight=None),
    "weight_dtype": dict(weight=lambda kw: kw["weight"].float()),
    "weight_2d": dict(weight=lambda kw: kw["weight"][None]),
    "weight_numel": dict(weight=lambda kw: kw["weight"][:-1]),
    "weight_strided": dict(weight=lambda kw: torch.randn(2 * K, device=kw["weight"].device).to(FLOAT)[::2]),
    "eps_not_a_float": dict(eps="1e-6"),
    "eps_nan": dict(eps=float("nan")),
    "eps_inf": dict(eps=float("inf")),
    "eps_negative": dict(eps=-1e-6),
}
RMS_NORM = {name: (lambda d, m, rule=rule: _norm(d, m, **rule)) for name, rule in _NORM_RULES.items()}
RMS_NORM_DEVICES = {"weight_on_cpu": lambda d, m: _norm(d, m, weight=lambda kw: kw["weight"].cpu())}
ADD_RMS_NORM = {
    **{name: (lambda d, m, rule=rule: _norm(d, m, add=True, **rule)) for name, rule in _NORM_RULES.items()},
    "residual_not_a_tensor": lambda d, m: _norm(d, m, add=True, residual=[[1.0]]),
    "residual_dtype": lambda d, m: _norm(d, m, add=True, residual=lambda kw: kw["residual"].half()),
    "residual_shape": lambda d, m: _norm(d, m, add=True, residual=lambda kw: kw["residual"][None]),
    "residual_k_stride": lambda d, m: _norm(d, m, add=True, residual=lambda kw: _x(d, m, 2 * K)[:, ::2]),
}
ADD_RMS_NORM_DEVICES = {
    "residual_on_cpu": lambda d, m: _norm(d, m, add=True, residual=lambda kw: kw["residual"].cpu()),
    "weight_on_cpu": lambda d, m: _norm(d, m, add=True, weight=lambda kw: kw["weight"].cpu()),
}


def _silu(d, m, **change):
    kw = dict(gate=_x(d, m), up=_x(d, m))
    kw.update({k: (v(kw) if callable(v) else v) for k, v in change.items()})
    return tuple(kw.values())


SILU_MUL = {
    "gate_not_a_tensor": lambda d, m: _silu(d, m, gate=None),
    "up_not_a_tensor": lambda d, m: _silu(d, m, up=[[1.0]]),
    "gate_fp64": lambda d, m: _silu(d, m, gate=lambda kw: kw["gate"].double()),
    "gate_int8": lambda d, m: _silu(d, m, gate=rand_int8(m, K, device=d)),
    "gate_0d": lambda d, m: _silu(d, m, gate=torch.tensor(1.0, device=d, dtype=FLOAT)),
    "f_0": lambda d, m: _silu(d, m, gate=lambda kw: kw["gate"][:, :0], up=lambda kw: kw["up"][:, :0]),
    "f_over_int32_bound": lambda d, m: _silu(d, m, gate=torch.zeros(1, BIG_K, device=d, dtype=FLOAT).expand(m, -1)),
    "gate_f_stride": lambda d, m: _silu(d, m, gate=_x(d, m, 2 * K)[:, ::2]),
    "up_f_stride": lambda d, m: _silu(d, m, up=_x(d, m, 2 * K)[:, ::2]),
    "up_dtype": lambda d, m: _silu(d, m, up=lambda kw: kw["up"].float()),
    "up_shape": lambda d, m: _silu(d, m, up=lambda kw: kw["up"][:, :-1]),
}
SILU_MUL_DEVICES = {"up_on_cpu": lambda d, m: _silu(d, m, up=lambda kw: kw["up"].cpu())}

GPU = ["cuda"]
DEVICES_ALL = ["cpu", "cuda"]


def _params(cases, devices):
    """(device, case) params; the CUDA ones are marked (collected and skipped without a GPU)."""
    return [pytest.param(d, name, id=f"{d}-{name}", marks=[pytest.mark.cuda] if d == "cuda" else [])
            for d in devices for name in cases]


def _run(op, cases, device, name, m, paths):
    args = cases[name](device, m)
    if args is None:
        pytest.skip("the rule cannot be broken at this M")
    _assert_same_error(op, paths(device), args, not_a_tensor="_not_a_" in name)


@pytest.mark.parametrize("m", M_VALUES)
@pytest.mark.parametrize("device,case", _params(SCALED_MM, DEVICES_ALL) + _params(SCALED_MM_DEVICES, GPU))
def test_scaled_mm(device, case, m):
    _run("scaled_mm", {**SCALED_MM, **SCALED_MM_DEVICES}, device, case, m, _mm_paths)


@pytest.mark.parametrize("m", M_VALUES)
@pytest.mark.parametrize("device,case", _params(PER_TOKEN, DEVICES_ALL))
def test_quantize_per_token(device, case, m):
    _run("quantize_per_token", PER_TOKEN, device, case, m, lambda d: _quant_paths("quantize_per_token", d))


@pytest.mark.parametrize("m", M_VALUES)
@pytest.mark.parametrize("device,case", _params(STATIC, DEVICES_ALL) + _params(STATIC_DEVICES, GPU))
def test_quantize_static(device, case, m):
    _run("quantize_static", {**STATIC, **STATIC_DEVICES}, device, case, m, lambda d: _quant_paths("quantize_static", d))


@pytest.mark.parametrize("m", M_VALUES)
@pytest.mark.parametrize("device,case", _params(LINEAR, DEVICES_ALL) + _params(LINEAR_DEVICES, GPU))
def test_linear(device, case, m):
    _run("linear", {**LINEAR, **LINEAR_DEVICES}, device, case, m, _linear_paths)


@pytest.mark.parametrize("m", M_VALUES)
@pytest.mark.parametrize("device,case", _params(RMS_NORM, DEVICES_ALL) + _params(RMS_NORM_DEVICES, GPU))
def test_rms_norm_quant(device, case, m):
    _run("rms_norm_quant", {**RMS_NORM, **RMS_NORM_DEVICES}, device, case, m, _FUSED_PATHS["rms_norm_quant"])


@pytest.mark.parametrize("m", M_VALUES)
@pytest.mark.parametrize("device,case", _params(ADD_RMS_NORM, DEVICES_ALL) + _params(ADD_RMS_NORM_DEVICES, GPU))
def test_add_rms_norm_quant(device, case, m):
    _run("add_rms_norm_quant", {**ADD_RMS_NORM, **ADD_RMS_NORM_DEVICES}, device, case, m,
         _FUSED_PATHS["add_rms_norm_quant"])


@pytest.mark.parametrize("m", M_VALUES)
@pytest.mark.parametrize("device,case", _params(SILU_MUL, DEVICES_ALL) + _params(SILU_MUL_DEVICES, GPU))
def test_silu_mul_quant(device, case, m):
    _run("silu_mul_quant", {**SILU_MUL, **SILU_MUL_DEVICES}, device, case, m, _FUSED_PATHS["silu_mul_quant"])


# --- through W8A8Linear ----------------------------------------------------------------------------


def _layer(device, act_quant="dynamic", backend=None, dtype=FLOAT):
    lin = torch.nn.Linear(K, N, device=device, dtype=dtype)
    kw = {"input_scale": 0.05} if act_quant == "static" else {}
    return w8a8.W8A8Linear.from_linear(lin, act_quant=act_quant, backend=backend, **kw)


LAYER_INPUTS = {
    "x_fp64": lambda d, m: _x(d, m, dtype=torch.float64),
    "x_int64": lambda d, m: torch.ones(m, K, dtype=torch.int64, device=d),
    "x_0d": lambda d, m: torch.tensor(1.0, device=d, dtype=FLOAT),
    "k_mismatch": lambda d, m: _x(d, m, K - 1),
    "x_fp16_into_a_bf16_layer": lambda d, m: _x(d, m, dtype=torch.float16),  # the bf16 bias: neither fp32 nor fp16
}


@pytest.mark.parametrize("m", M_VALUES)
@pytest.mark.parametrize("act_quant", ["dynamic", "static"])
@pytest.mark.parametrize("device,case", _params(LAYER_INPUTS, DEVICES_ALL) + _params({"x_on_cpu": None}, GPU))
def test_w8a8linear_forward(device, case, m, act_quant):
    """The layer's forward on every kernel it can be forced to: the op's message, byte for byte."""
    layer = _layer(device, act_quant)
    x = _x("cpu", m) if case == "x_on_cpu" else LAYER_INPUTS[case](device, m)
    args = (x, layer.weight, layer.weight_scale, layer.folded_bias(), layer.input_scale, layer.input_zero_point)
    ref_type, expected = _message(REFERENCE["linear"], args)
    assert ref_type is ValueError and expected.startswith("w8a8.linear: "), expected
    for backend in [None, *dispatch.BACKENDS["scaled_mm"]]:
        if backend and dispatch.unavailable_reason("scaled_mm", backend, torch.device(device)) is not None:
            continue
        layer.backend = backend
        got_type, got = _message(layer, (x,))
        assert got_type is ValueError and got == expected, (backend, got_type, got, expected)


@pytest.mark.skipif(CUDA, reason="checks the CPU-only refusal of a CUDA kernel")
def test_w8a8linear_named_cuda_kernel_on_the_cpu():
    layer = _layer("cpu", backend="sm90")
    with pytest.raises(RuntimeError, match=r"^w8a8\.scaled_mm: backend='sm90' is not available on cpu: "):
        layer(_x("cpu", 3))


def test_w8a8linear_constructor_refusals():
    with pytest.raises(ValueError, match=r"^W8A8Linear: backend must be None or one of .*, got 'cutlass'"):
        w8a8.W8A8Linear(K, N, backend="cutlass")
    with pytest.raises(ValueError, match=r"^W8A8Linear: input_zero_point needs act_quant='static', got 'dynamic'"):
        w8a8.W8A8Linear(K, N, input_zero_point=True)


def test_no_public_out_variant():
    """Overlapping ``out`` needs an out= variant: none of the public ops has one. Add the
    overlap cases here with the first one that does."""
    for fn in (w8a8.ops.scaled_mm, w8a8.ops.quantize_per_token, w8a8.ops.quantize_static, w8a8.ops.linear, w8a8.ops.rms_norm_quant,
               w8a8.ops.silu_mul_quant, w8a8.W8A8Linear.forward):
        assert not {"out", "output"} & set(inspect.signature(fn).parameters), fn.__qualname__
