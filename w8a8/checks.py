"""Input validation for the public ops, in one place.

Every error names the op, what was expected and what was given. The checks
read only dtypes, shapes and strides (never data), so they cost no host
synchronisation and trace cleanly under torch.compile.
"""
from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# What the CUTLASS kernels store through TMA: 16-bit outputs only.
CUTLASS_OUT_DTYPES = (torch.bfloat16, torch.float16)
# TMA moves 16-byte rows: int8 operands need K % 16 == 0, 16-bit outputs N % 8 == 0.
CUTLASS_K_MULTIPLE = 16
CUTLASS_N_MULTIPLE = 8


def _fail(op: str, what: str) -> None:
    raise ValueError(f"w8a8.{op}: {what}")


def _check(cond: bool, op: str, what) -> None:
    """``what`` is a callable building the message only on failure: formatting a symbolic
    size eagerly would make torch.compile specialize on it (one graph per M)."""
    if not cond:
        _fail(op, what())


def check_quantize_input(op: str, x: torch.Tensor) -> None:
    _check(isinstance(x, torch.Tensor), op, lambda: f"x must be a tensor, got {type(x).__name__}")
    _check(x.dtype in FLOAT_DTYPES, op, lambda: f"x must be one of {FLOAT_DTYPES}, got {x.dtype}")
    _check(x.dim() >= 1, op, lambda: f"x must have at least 1 dimension [..., K], got shape {tuple(x.shape)}")


def check_quantize_static(x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None) -> None:
    op = "quantize_static"
    check_quantize_input(op, x)
    _check(scale.dtype == torch.float32, op, lambda: f"scale must be float32, got {scale.dtype}")
    _check(scale.numel() == 1, op, lambda: f"scale must hold one value (shape [1]), got shape {tuple(scale.shape)}")
    _check(scale.device == x.device, op, lambda: f"scale must be on {x.device} like x, got {scale.device}")
    if zero_point is not None:
        _check(
            zero_point.dtype in (torch.int8, torch.int32),
            op,
            lambda: f"zero_point must be int8 or int32, got {zero_point.dtype}",
        )
        _check(zero_point.numel() == 1, op, lambda: f"zero_point must hold one value, got shape {tuple(zero_point.shape)}")
        _check(zero_point.device == x.device, op, lambda: f"zero_point must be on {x.device} like x, got {zero_point.device}")


def check_scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype,
    backend: str,
) -> None:
    op = "scaled_mm"
    for name, t in (("a", a), ("b", b), ("a_scale", a_scale), ("b_scale", b_scale)):
        _check(isinstance(t, torch.Tensor), op, lambda: f"{name} must be a tensor, got {type(t).__name__}")
    _check(a.dtype == torch.int8, op, lambda: f"a must be int8, got {a.dtype}")
    _check(b.dtype == torch.int8, op, lambda: f"b must be int8, got {b.dtype}")
    _check(a.dim() == 2, op, lambda: f"a must be 2-D [M, K], got shape {tuple(a.shape)}")
    _check(b.dim() == 2, op, lambda: f"b must be 2-D [N, K] (the nn.Linear weight layout), got shape {tuple(b.shape)}")
    m, k = a.shape
    n = b.shape[0]
    _check(b.shape[1] == k, op, lambda: f"b must be [N, K] with K = {k} (a is {tuple(a.shape)}), got {tuple(b.shape)}")
    _check(
        out_dtype in OUT_DTYPES,
        op,
        lambda: f"out_dtype must be one of {OUT_DTYPES}, got {out_dtype}",
    )
    _check(a_scale.dtype == torch.float32, op, lambda: f"a_scale must be float32, got {a_scale.dtype}")
    _check(b_scale.dtype == torch.float32, op, lambda: f"b_scale must be float32, got {b_scale.dtype}")
    _check(
        tuple(a_scale.shape) in ((m, 1), (1,), (1, 1)),
        op,
        lambda: f"a_scale must be [M, 1] = [{m}, 1] (per token) or [1] (per tensor), got {tuple(a_scale.shape)}",
    )
    _check(
        tuple(b_scale.shape) in ((n,), (n, 1), (1,), (1, 1)),
        op,
        lambda: f"b_scale must be [N] = [{n}], [N, 1] or [1], got {tuple(b_scale.shape)}",
    )
    tensors = [("b", b), ("a_scale", a_scale), ("b_scale", b_scale)]
    if bias is not None:
        _check(
            bias.dtype in (torch.float32, out_dtype),
            op,
            lambda: f"bias must be float32 or out_dtype ({out_dtype}), got {bias.dtype}",
        )
        _check(tuple(bias.shape) == (n,), op, lambda: f"bias must be [N] = [{n}], got {tuple(bias.shape)}")
        tensors.append(("bias", bias))
    for name, t in tensors:
        _check(t.device == a.device, op, lambda: f"{name} must be on {a.device} like a, got {t.device}")
    if backend == "reference":
        return
    # Kernel backends read rows with unit inner stride; outer strides are honoured.
    for name, t in (("a", a), ("b", b)):
        _check(
            t.stride(1) == 1 or t.shape[1] <= 1,
            op,
            lambda: f"backend={backend!r} needs {name} with unit stride along K, got strides {tuple(t.stride())}; "
            "call .contiguous() first",
        )
    for name, t in (("a_scale", a_scale), ("b_scale", b_scale)):
        _check(t.is_contiguous(), op, lambda: f"backend={backend!r} needs a contiguous {name}, got strides {tuple(t.stride())}")
    if bias is not None:
        _check(bias.is_contiguous(), op, lambda: f"backend={backend!r} needs a contiguous bias, got strides {tuple(bias.stride())}")
    if backend == "cutlass":
        _check(
            out_dtype in CUTLASS_OUT_DTYPES,
            op,
            lambda: f"backend='cutlass' writes {CUTLASS_OUT_DTYPES}, got out_dtype={out_dtype}",
        )
        _check(
            k % CUTLASS_K_MULTIPLE == 0,
            op,
            lambda: f"backend='cutlass' needs K % {CUTLASS_K_MULTIPLE} == 0 (16-byte TMA rows), got K = {k}",
        )
        _check(
            n % CUTLASS_N_MULTIPLE == 0,
            op,
            lambda: f"backend='cutlass' needs N % {CUTLASS_N_MULTIPLE} == 0 (16-byte TMA rows of the output), got N = {n}",
        )


def cutlass_shape_reason(k: int, n: int, out_dtype: torch.dtype) -> str | None:
    """Why the CUTLASS kernels cannot take this shape (None if they can)."""
    if out_dtype not in CUTLASS_OUT_DTYPES:
        return f"out_dtype {out_dtype} (CUTLASS writes bf16/fp16)"
    if k % CUTLASS_K_MULTIPLE:
        return f"K = {k} is not a multiple of {CUTLASS_K_MULTIPLE}"
    if n % CUTLASS_N_MULTIPLE:
        return f"N = {n} is not a multiple of {CUTLASS_N_MULTIPLE}"
    return None
