"""Input rules of the public ops, stated once for the Python implementations.

The compiled implementations check the same rules in their torch binding
(``csrc/torch/checks.h``) with the same words, in the same order, and raise the same
exception type (``ValueError``), so a bad input gives one error whatever kernel the
dispatcher picked for it. The checks read dtypes, shapes, strides and devices, never
data: no host synchronisation, and they trace under torch.compile.

Message form: ``w8a8.<op>: <name> must <rule>, got <actual>``; dtypes print as
``torch.int8``, shapes and strides as ``[2, 3]``.
"""
from __future__ import annotations

import math

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
ZERO_POINT_DTYPES = (torch.int8, torch.int32)
# The int32 accumulator holds K products of int8 codes, each at most 128 * 128 = 2**14 in
# magnitude: K <= (2**31 - 1) // 2**14 can never overflow it.
MAX_K = (2**31 - 1) // (128 * 128)


def dims(values) -> str:
    """A shape or stride tuple as ``[2, 3]`` (the C++ side prints the same)."""
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def names(dtypes) -> str:
    return ", ".join(str(d) for d in dtypes)


def fail(op: str, what: str):
    raise ValueError(f"w8a8.{op}: {what}")


def _require(cond: bool, op: str, what) -> None:
    """``what`` builds the message only on failure: formatting a symbolic size eagerly
    would make torch.compile specialise on it."""
    if not cond:
        fail(op, what())


def _tensor(op: str, name: str, t, optional: bool = False) -> None:
    _require(
        isinstance(t, torch.Tensor) or (optional and t is None),
        op,
        lambda: f"{name} must be a tensor{' or None' if optional else ''}, got {type(t).__name__}",
    )


def _unit_k_stride(op: str, name: str, t: torch.Tensor, dim: str = "K") -> None:
    _require(
        t.shape[-1] <= 1 or t.stride(-1) == 1,
        op,
        lambda: f"{name} must have unit stride along its last dim ({dim}); call .contiguous() first, "
        f"got strides {dims(t.stride())} for shape {dims(t.shape)}",
    )


def _scale_vector(op: str, name: str, t: torch.Tensor, length, length_name: str) -> None:
    _require(t.dtype == torch.float32, op, lambda: f"{name} must be torch.float32, got {t.dtype}")
    _require(
        t.numel() == 1 or t.numel() == length,
        op,
        lambda: f"{name} must hold 1 or {length_name} = {length} values, got shape {dims(t.shape)}",
    )
    _require(
        t.numel() == 1 or t.is_contiguous(),
        op,
        lambda: f"{name} must be contiguous, got strides {dims(t.stride())} for shape {dims(t.shape)}",
    )


def _bias(op: str, bias: torch.Tensor, n, out_dtype: torch.dtype) -> None:
    _require(
        bias.dtype == torch.float32 or bias.dtype == out_dtype,
        op,
        lambda: f"bias must be torch.float32 or the output dtype {out_dtype}, got {bias.dtype}",
    )
    _require(bias.dim() == 1 and bias.shape[0] == n, op, lambda: f"bias must be [N] = [{n}], got shape {dims(bias.shape)}")
    _require(bias.numel() <= 1 or bias.stride(0) == 1, op, lambda: f"bias must be contiguous, got strides {dims(bias.stride())}")


def _k_fits_int32(op: str, k) -> None:
    _require(
        k <= MAX_K, op, lambda: f"K must be at most {MAX_K} (K products of 128 x 128 must fit the int32 accumulator), got K = {k}"
    )


def _same_device(op: str, device: torch.device, anchor: str, tensors) -> None:
    for name, t in tensors:
        if t is not None:
            _require(t.device == device, op, lambda: f"{name} must be on {device} like {anchor}, got {t.device}")


def _float_input(op: str, x, name: str = "x", dim: str = "K") -> None:
    _tensor(op, name, x)
    _require(x.dtype in FLOAT_DTYPES, op, lambda: f"{name} must be one of {names(FLOAT_DTYPES)}, got {x.dtype}")
    _require(x.dim() >= 1, op, lambda: f"{name} must have at least 1 dimension [..., {dim}], got shape {dims(x.shape)}")


def _rows_input(op: str, x, name: str = "x", dim: str = "K") -> None:
    """A float [..., K] input of a row-wise fused op: 1 <= K <= MAX_K, unit stride along K."""
    _float_input(op, x, name, dim)
    k = x.shape[-1]
    _require(k >= 1, op, lambda: f"{name}'s last dim ({dim}) must be >= 1, got shape {dims(x.shape)}")
    _require(
        k <= MAX_K, op, lambda: f"{dim} must be at most {MAX_K} (the codes feed a GEMM whose int32 accumulator "
        f"holds {dim} products of 128 x 128), got {dim} = {k}"
    )
    _unit_k_stride(op, name, x, dim)


def _like(op: str, name: str, t, anchor: str, x: torch.Tensor, dim: str) -> None:
    """t has x's shape and dtype and unit stride along the last dim (leading strides free)."""
    _tensor(op, name, t)
    _require(t.dtype == x.dtype, op, lambda: f"{name} must be {anchor}'s dtype {x.dtype}, got {t.dtype}")
    _require(
        t.shape == x.shape, op, lambda: f"{name} must have {anchor}'s shape {dims(x.shape)}, got shape {dims(t.shape)}"
    )
    _unit_k_stride(op, name, t, dim)


def quantize_per_token(x: torch.Tensor) -> None:
    """x [..., K] float, K >= 1, unit stride along K."""
    op = "quantize_per_token"
    _float_input(op, x)
    _require(x.shape[-1] >= 1, op, lambda: f"x's last dim (K) must be >= 1, got shape {dims(x.shape)}")
    _unit_k_stride(op, "x", x)


def quantize_static(x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None) -> None:
    """x [..., K] float (K = 0 allowed), unit stride along K; scale one float32 value and
    zero_point one int8 / int32 value (or None), both on x's device."""
    op = "quantize_static"
    _float_input(op, x)
    _unit_k_stride(op, "x", x)
    _tensor(op, "scale", scale)
    _tensor(op, "zero_point", zero_point, optional=True)
    _require(scale.dtype == torch.float32, op, lambda: f"scale must be torch.float32, got {scale.dtype}")
    _require(scale.numel() == 1, op, lambda: f"scale must hold one value, got shape {dims(scale.shape)}")
    if zero_point is not None:
        _require(
            zero_point.dtype in ZERO_POINT_DTYPES,
            op,
            lambda: f"zero_point must be one of {names(ZERO_POINT_DTYPES)}, got {zero_point.dtype}",
        )
        _require(zero_point.numel() == 1, op, lambda: f"zero_point must hold one value, got shape {dims(zero_point.shape)}")
    _same_device(op, x.device, "x", (("scale", scale), ("zero_point", zero_point)))


def scaled_mm(a, b, a_scale, b_scale, bias, out_dtype) -> None:
    """a int8 [M, K], b int8 [N, K], unit stride along K; a_scale float32 with 1 or M
    values, b_scale float32 with 1 or N values, both contiguous; bias None or [N] in
    float32 or out_dtype, contiguous; everything on a's device."""
    op = "scaled_mm"
    for name, t in (("a", a), ("b", b), ("a_scale", a_scale), ("b_scale", b_scale)):
        _tensor(op, name, t)
    _tensor(op, "bias", bias, optional=True)
    _require(a.dtype == torch.int8, op, lambda: f"a must be torch.int8, got {a.dtype}")
    _require(b.dtype == torch.int8, op, lambda: f"b must be torch.int8, got {b.dtype}")
    _require(a.dim() == 2, op, lambda: f"a must be 2-D [M, K], got shape {dims(a.shape)}")
    _require(b.dim() == 2, op, lambda: f"b must be 2-D [N, K] (the nn.Linear weight layout), got shape {dims(b.shape)}")
    m, k = a.shape
    n = b.shape[0]
    _require(b.shape[1] == k, op, lambda: f"b must be [N, K] with K = {k} (a's K), got shape {dims(b.shape)}")
    _k_fits_int32(op, k)
    _require(out_dtype in OUT_DTYPES, op, lambda: f"out_dtype must be one of {names(OUT_DTYPES)}, got {out_dtype}")
    _scale_vector(op, "a_scale", a_scale, m, "M")
    _scale_vector(op, "b_scale", b_scale, n, "N")
    if bias is not None:
        _bias(op, bias, n, out_dtype)
    _same_device(op, a.device, "a", (("b", b), ("a_scale", a_scale), ("b_scale", b_scale), ("bias", bias)))
    _unit_k_stride(op, "a", a)
    _unit_k_stride(op, "b", b)


def linear(x, weight, weight_scale, bias, input_scale, input_zero_point) -> None:
    """x [..., K] float (any strides); weight int8 [N, K] with unit stride along K;
    weight_scale float32 with 1 or N values; bias None or [N] in float32 or x's dtype;
    input_scale None (dynamic) or one float32 value (static); input_zero_point None or
    one int8 / int32 value, only with input_scale; everything on x's device."""
    op = "linear"
    _float_input(op, x)
    _tensor(op, "weight", weight)
    _tensor(op, "weight_scale", weight_scale)
    _tensor(op, "bias", bias, optional=True)
    _tensor(op, "input_scale", input_scale, optional=True)
    _tensor(op, "input_zero_point", input_zero_point, optional=True)
    _require(weight.dtype == torch.int8, op, lambda: f"weight must be torch.int8, got {weight.dtype}")
    _require(weight.dim() == 2, op, lambda: f"weight must be 2-D [N, K], got shape {dims(weight.shape)}")
    n, k = weight.shape
    _require(
        x.shape[-1] == k, op, lambda: f"x must be [..., K] with K = {k} (weight's K), got shape {dims(x.shape)}"
    )
    _k_fits_int32(op, k)
    _scale_vector(op, "weight_scale", weight_scale, n, "N")
    if bias is not None:
        _bias(op, bias, n, x.dtype)
    if input_scale is not None:
        _require(
            input_scale.dtype == torch.float32, op, lambda: f"input_scale must be torch.float32, got {input_scale.dtype}"
        )
        _require(input_scale.numel() == 1, op, lambda: f"input_scale must hold one value, got shape {dims(input_scale.shape)}")
    if input_zero_point is not None:
        _require(input_scale is not None, op, lambda: "input_zero_point needs input_scale (static activations), got None")
        _require(
            input_zero_point.dtype in ZERO_POINT_DTYPES,
            op,
            lambda: f"input_zero_point must be one of {names(ZERO_POINT_DTYPES)}, got {input_zero_point.dtype}",
        )
        _require(
            input_zero_point.numel() == 1,
            op,
            lambda: f"input_zero_point must hold one value, got shape {dims(input_zero_point.shape)}",
        )
    _same_device(
        op,
        x.device,
        "x",
        (("weight", weight), ("weight_scale", weight_scale), ("bias", bias), ("input_scale", input_scale),
         ("input_zero_point", input_zero_point)),
    )
    _unit_k_stride(op, "weight", weight)


def _norm_operands(op: str, x, weight, eps) -> None:
    _rows_input(op, x)
    k = x.shape[-1]
    _tensor(op, "weight", weight)
    _require(weight.dtype == x.dtype, op, lambda: f"weight must be x's dtype {x.dtype}, got {weight.dtype}")
    _require(
        weight.dim() == 1 and weight.shape[0] == k,
        op,
        lambda: f"weight must be [K] = [{k}] (x's last dim), got shape {dims(weight.shape)}",
    )
    _require(
        weight.numel() <= 1 or weight.stride(0) == 1, op,
        lambda: f"weight must be contiguous, got strides {dims(weight.stride())}"
    )
    _require(
        isinstance(eps, (int, float)) and not isinstance(eps, bool), op,
        lambda: f"eps must be a float, got {type(eps).__name__}"
    )
    _require(math.isfinite(eps) and eps >= 0, op, lambda: f"eps must be a finite float >= 0, got {eps}")


def rms_norm_quant(x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """x [..., K] float, 1 <= K <= MAX_K, unit stride along K (leading strides free); weight
    [K] of x's dtype, contiguous, on x's device; eps a finite float >= 0."""
    if _plain_norm(x, weight, eps):
        return
    op = "rms_norm_quant"
    _norm_operands(op, x, weight, eps)
    _same_device(op, x.device, "x", (("weight", weight),))


def add_rms_norm_quant(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """As ``rms_norm_quant``, and residual of x's shape and dtype, unit stride along K, on x's device."""
    if _plain_norm(x, weight, eps) and _plain_like(residual, x):
        return
    op = "add_rms_norm_quant"
    _norm_operands(op, x, weight, eps)
    _like(op, "residual", residual, "x", x, "K")
    _same_device(op, x.device, "x", (("residual", residual), ("weight", weight)))


def silu_mul_quant(gate: torch.Tensor, up: torch.Tensor) -> None:
    """gate [..., F] float, 1 <= F <= MAX_K, unit stride along F (leading strides free: often
    the halves of one [M, 2F] GEMM output); up of gate's shape and dtype, likewise, on gate's device."""
    if _plain_rows(gate) and _plain_like(up, gate):
        return
    op = "silu_mul_quant"
    _rows_input(op, gate, "gate", "F")
    _like(op, "up", up, "gate", gate, "F")
    _same_device(op, gate.device, "gate", (("up", up),))


# The fused producers' kernels run these checks on every call, where the rules above cost about as
# much host time as the launch. The common case passes one expression first; each of its terms
# implies one of the rules (some are stricter), so whatever it accepts the rules accept. Anything
# else runs the rules, which raise with their message or accept what the expression was stricter about.


def _plain_rows(x) -> bool:
    """x passes ``_rows_input`` (stricter: unit stride along K even where K = 1)."""
    return (isinstance(x, torch.Tensor) and x.dtype in FLOAT_DTYPES and x.dim() >= 1 and 1 <= x.shape[-1] <= MAX_K
            and x.stride(-1) == 1)


def _plain_like(t, x: torch.Tensor) -> bool:
    """t passes ``_like(t, x)`` and is on x's device (stricter: unit stride along K even where K = 1)."""
    return (isinstance(t, torch.Tensor) and t.dtype == x.dtype and t.shape == x.shape and t.stride(-1) == 1
            and t.device == x.device)


def _plain_norm(x, weight, eps) -> bool:
    """The operands pass ``_norm_operands`` and weight is on x's device (stricter: eps a float, weight
    with unit stride even where K = 1)."""
    return (_plain_rows(x) and isinstance(weight, torch.Tensor) and weight.dtype == x.dtype and weight.dim() == 1
            and weight.shape[0] == x.shape[-1] and weight.stride(0) == 1 and type(eps) is float
            and 0 <= eps < math.inf and weight.device == x.device)
