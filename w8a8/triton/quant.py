"""Triton int8 quantization kernels: per-token (dynamic) and per-tensor (static).

The math is ``w8a8.reference`` and these kernels are bit-identical to it:

    scale[r] = amax(|x[r, :]|) / 127                 fp32, IEEE division (tl.math.div_rn)
    q[r, k]  = clamp(rint(x[r, k] / scale[r]), -128, 127)   rint: half to even

    * all-zero row                   -> q = 0, scale = 0
    * row holding any Inf or NaN     -> q = 0, scale = NaN

    static: q = clamp(rint(x / scale) + zero_point, -128, 127)
            (+Inf -> 508 + zp, -Inf -> -512 + zp before the clamp; NaN -> zero_point)

Exactness notes, shared by both kernels:

* Division is ``tl.math.div_rn`` (IEEE round to nearest). Triton's ``/`` on fp32
  lowers to an approximate division on NVIDIA GPUs and would not be bit-identical.
* The per-token kernel on 16-bit rows divides only once per row: its codes are rint(Q),
  Q = RN(p + RN(x - p d) inv), p = RN(x inv), d the scale, inv = RN(1 / d) (two FMAs per
  element), which equals RN(x / d) for every 16-bit x under every 16-bit row max; rows whose
  d is under 2^-100 are scaled by 2^64 first (exact), where that holds too
  (``_quantize_rows_16bit``; the same arithmetic as the CUDA kernel; tests/ops/test_quantize.py
  checks every pair). The fused producers' 16-bit rows (normed and gated values are rounded to
  the model dtype) use the same arithmetic; fp32 rows divide per element (``silu_quant.py``: two
  corrections instead). [evidence quant.corrected-quotient]
* ``rint`` is the classic magic-number rounding ``(y + 1.5 * 2**23) - 1.5 * 2**23``:
  for |y| <= 2**22 the sum lands in [2**23, 2**24), where the fp32 spacing is 1, so
  the IEEE addition itself rounds y half to even and the subtraction is exact.
  LLVM/ptxas never reassociate fp adds without fast-math flags, which Triton does
  not set. It is used instead of ``libdevice.rint`` because it runs unchanged in
  Triton's interpreter (which has no libdevice), so the CPU tests cover the same
  expression the GPU runs. Callers clamp y to +-2**22 first where it can be larger.
  The per-token kernel clamps y to [-128, 127] first and keeps only the sum: its low
  byte is the int8 code (bits of n + 1.5 * 2**23 are 0x4B400000 + n).
* Non-finite values are detected with ``|x| <= FLT_MAX`` (false for Inf and NaN),
  never through ``tl.max``, whose NaN propagation is unspecified.
* The device helpers below (``_rint``, ``_row_stats``, ``_accumulate_stats``,
  ``_row_scales``, ``_quantize_rows``) are also the quantizer of ``norm_quant.py`` and
  ``silu_quant.py``.
* Compiled offline for sm_90 with Triton 3.6 and 3.9, ``div_rn`` is ``div.rn.f32``
  (no ``.ftz``: subnormals are kept, as in the reference) and the rint constant
  survives as an ``add.f32`` (two in the static kernel); tests/kernels/test_triton_kernels.py
  checks both in the PTX.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from w8a8 import padding
from w8a8.triton._launch import cdiv, launch
from w8a8.triton.quant_configs import PerTokenConfig, StaticConfig, per_token_config, static_config

# --- constants shared by the kernels (module globals must be tl.constexpr) ---------------
_QMIN = tl.constexpr(-128.0)
_QMAX = tl.constexpr(127.0)
_SYMMETRIC_QMAX = tl.constexpr(127.0)
_FLT_MAX = tl.constexpr(3.4028234663852886e38)
_INF = tl.constexpr(float("inf"))
# 1.5 * 2**23: adding it rounds any |y| <= 2**22 to an integer, half to even.
_RINT_MAGIC = tl.constexpr(12582912.0)
_RINT_LIMIT = tl.constexpr(4194304.0)  # 2**22
# The corrected quotient's exact range (module docstring): scales from 2**-100 up, smaller
# ones multiplied by 2**64 with their row.
_MIN_CORRECTED_DIVISOR = tl.constexpr(2.0**-100)
_TINY_ROW_FACTOR = tl.constexpr(2.0**64)
# Where the reference sends +-Inf before adding zero_point (nan_to_num(posinf=4*QMAX, neginf=4*QMIN)).
_POS_INF_CODE = tl.constexpr(508.0)
_NEG_INF_CODE = tl.constexpr(-512.0)

_IN_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


# --- device helpers --------------------------------------------------------------------------


@triton.jit
def _rint(y):
    """Round half to even, exact for |y| <= 2**22 (see the module docstring)."""
    return (y + _RINT_MAGIC) - _RINT_MAGIC


@triton.jit
def _row_stats(xf):
    """Per row of a [ROWS, BLOCK] fp32 tile: (amax over finite values, 1 if any Inf/NaN)."""
    ax = tl.abs(xf)
    finite = ax <= _FLT_MAX  # False for Inf and NaN
    amax = tl.max(tl.where(finite, ax, 0.0), axis=1)
    bad = tl.max((~finite).to(tl.int32), axis=1)
    return amax, bad


@triton.jit
def _accumulate_stats(amax, bad, xf):
    """``_row_stats`` kept per element across tiles: the running max of finite |x| and
    whether any Inf/NaN was seen (int1), reduced over the row once at the end."""
    ax = tl.abs(xf)
    finite = ax <= _FLT_MAX  # False for Inf and NaN
    return tl.maximum(amax, tl.where(finite, ax, 0.0)), bad | ~finite


@triton.jit
def _row_scales(amax, bad):
    """From a row's (amax, bad): (the scale to store: NaN for a row holding Inf/NaN,
    the divisor to quantize with: 1 where the row is not quantizable, quantizable)."""
    scale = tl.math.div_rn(amax, _SYMMETRIC_QMAX)
    quantizable = (bad == 0) & (amax > 0.0)
    safe_scale = tl.where(quantizable, scale, 1.0)
    # inf - inf is NaN. (A NaN global constexpr breaks Triton 3.6's check that globals are
    # unchanged since compilation: NaN != NaN.)
    return tl.where(bad != 0, _INF - _INF, scale), safe_scale, quantizable


@triton.jit
def _quantize_rows(xf, safe_scale, quantizable):
    """int8 codes of a [ROWS, BLOCK] tile; rows that are not quantizable give 0."""
    y = tl.math.div_rn(xf, safe_scale[:, None])  # |y| <= 127 (+ rounding) on quantizable rows
    # Clamping before rounding gives the same integer (the bounds are integers). The
    # magic addition rounds half to even and leaves the integer in the low mantissa
    # bits: bits(n + 1.5 * 2**23) = 0x4B400000 + n, whose low byte is n as int8. This
    # skips the subtraction, the float-to-int conversion and its mask per element.
    y = tl.minimum(tl.maximum(y, _QMIN), _QMAX)
    y = tl.where(quantizable[:, None], y, 0.0)  # also drops Inf/NaN
    return (y + _RINT_MAGIC).to(tl.int32, bitcast=True).to(tl.int8)


@triton.jit
def _corrected_row_factors(safe_scale):
    """Per row, for ``_quantize_rows_16bit``: the factor its values are scaled by (2**64 where
    the scale is under 2**-100, else 1), the scaled divisor and its reciprocal."""
    up = tl.where(safe_scale < _MIN_CORRECTED_DIVISOR, _TINY_ROW_FACTOR, 1.0)
    divisor = safe_scale * up  # exact: a power of two, and the product stays in range
    return up, divisor, tl.math.div_rn(1.0, divisor)


@triton.jit
def _corrected(q, x, neg_divisor, inv):
    """One correction of q, an approximation of x / d: q + RN(x - q d) inv, each step one FMA
    (one rounding on the GPU and in the interpreter), with neg_divisor = -d and inv = RN(1 / d)
    broadcast to x's shape. From q = RN(x inv) it is RN(x / d) for every 16-bit x under every
    16-bit row max (module docstring); ``silu_quant._codes`` applies it twice to fp32 values."""
    return tl.fma(tl.fma(q, neg_divisor, x), inv, q)


@triton.jit
def _quantize_rows_16bit(xf, up, divisor, inv, quantizable):
    """``_quantize_rows`` for values of a 16-bit type, without a division per element: the
    quotient corrected once (module docstring); no clamp (|Q| < 127.5 rounds into [-127, 127])."""
    x = xf * up[:, None]
    y = _corrected(x * inv[:, None], x, -divisor[:, None], inv[:, None])  # (-divisor: negated once a row)
    y = tl.where(quantizable[:, None], y, 0.0)  # also drops Inf/NaN
    return (y + _RINT_MAGIC).to(tl.int32, bitcast=True).to(tl.int8)


@triton.jit
def _per_token_codes(xf, safe_scale, up, divisor, inv, quantizable, SIXTEEN_BIT: tl.constexpr):
    """The per-token kernel's codes of a tile: the corrected quotient on 16-bit rows (``up``,
    ``divisor``, ``inv`` from ``_corrected_row_factors``), the division on fp32 ones."""
    if SIXTEEN_BIT:
        codes = _quantize_rows_16bit(xf, up, divisor, inv, quantizable)
    else:
        codes = _quantize_rows(xf, safe_scale, quantizable)
    return codes


# --- kernels -----------------------------------------------------------------------------------


@triton.jit
def _stream_row_stats(x_rows, row_in, cols, K, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """(amax, bad) of whole rows, read BLOCK_K columns at a time.

    Each thread keeps the running max of its own columns and the row reduction runs
    once after the loop: reducing every tile cost four block barriers per tile (seen in
    the sm_90 SASS), which made this loop instruction-bound at K = 14336.
    """
    amax = tl.zeros([ROWS, BLOCK_K], dtype=tl.float32)
    bad = tl.zeros([ROWS, BLOCK_K], dtype=tl.int1)
    for k0 in range(0, K, BLOCK_K):
        mask = row_in[:, None] & (cols + k0 < K)
        amax, bad = _accumulate_stats(amax, bad, tl.load(x_rows + k0 + cols, mask=mask, other=0.0).to(tl.float32))
    return tl.max(amax, axis=1), tl.max(bad.to(tl.int32), axis=1)


@triton.jit
def _per_token_row_stats_kernel(
    x_ptr,  # [R, K] fp16/bf16/fp32, row stride stride_xr, unit column stride
    stats_ptr,  # [R] fp32: amax, or +Inf for a row holding Inf/NaN (reference.per_token_row_stats)
    R,
    K,
    stride_xr,
    ROWS: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_in = rows < R
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_xr
    amax, bad = _stream_row_stats(x_rows, row_in, tl.arange(0, BLOCK_K)[None, :], K, ROWS, BLOCK_K)
    tl.store(stats_ptr + rows, tl.where(bad != 0, _INF, amax), mask=row_in)


@triton.jit
def _quantize_per_token_kernel(
    x_ptr,  # [R, K] fp16/bf16/fp32, row stride stride_xr, unit column stride
    q_ptr,  # [R, K] int8, contiguous
    scale_ptr,  # [R] fp32
    stats_ptr,  # [R] fp32 row stats given by the caller (read only with STATS_IN)
    R,
    K,
    stride_xr,
    ROWS: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
    STATS_IN: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_in = rows < R
    rows64 = rows.to(tl.int64)
    x_rows = x_ptr + rows64[:, None] * stride_xr
    q_rows = q_ptr + rows64[:, None] * K
    cols = tl.arange(0, BLOCK_K)[None, :]

    if SINGLE_PASS:
        mask = row_in[:, None] & (cols < K)
        xf = tl.load(x_rows + cols, mask=mask, other=0.0).to(tl.float32)
    if STATS_IN:  # the stats of whole rows of which x holds a slice (tensor parallelism)
        stats = tl.load(stats_ptr + rows, mask=row_in, other=0.0)
        bad = (stats == _INF).to(tl.int32)
        amax = tl.where(bad != 0, 0.0, stats)
    elif SINGLE_PASS:
        amax, bad = _row_stats(xf)
    else:
        amax, bad = _stream_row_stats(x_rows, row_in, cols, K, ROWS, BLOCK_K)

    scale, safe_scale, quantizable = _row_scales(amax, bad)
    tl.store(scale_ptr + rows, scale, mask=row_in)
    SIXTEEN_BIT: tl.constexpr = x_ptr.dtype.element_ty != tl.float32
    up, divisor, inv = _corrected_row_factors(safe_scale)  # per row; unused (dropped) on fp32 rows

    if SINGLE_PASS:
        codes = _per_token_codes(xf, safe_scale, up, divisor, inv, quantizable, SIXTEEN_BIT)
        tl.store(q_rows + cols, codes, mask=mask)
    else:
        for k0 in range(0, K, BLOCK_K):
            mask = row_in[:, None] & (cols + k0 < K)
            xf = tl.load(x_rows + k0 + cols, mask=mask, other=0.0).to(tl.float32)
            codes = _per_token_codes(xf, safe_scale, up, divisor, inv, quantizable, SIXTEEN_BIT)
            tl.store(q_rows + k0 + cols, codes, mask=mask)


@triton.jit
def _quantize_static_kernel(
    x_ptr,  # [R, K] fp16/bf16/fp32, row stride stride_xr, unit column stride
    q_ptr,  # [R, K] int8, contiguous
    scale_ptr,  # one fp32 element
    zp_ptr,  # one int8/int32 element (unused unless HAS_ZP)
    R,
    K,
    stride_xr,
    HAS_ZP: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    rows64 = rows.to(tl.int64)
    mask = (rows[:, None] < R) & (cols[None, :] < K)
    xf = tl.load(x_ptr + rows64[:, None] * stride_xr + cols[None, :], mask=mask, other=0.0).to(tl.float32)

    y = tl.math.div_rn(xf, tl.load(scale_ptr).to(tl.float32))
    y_nan = y != y
    y_pos_inf = y == _INF
    y_neg_inf = y == -_INF
    # Finite values beyond 2**22 saturate anyway; clamping keeps _rint exact.
    r = _rint(tl.minimum(tl.maximum(tl.where(y_nan, 0.0, y), -_RINT_LIMIT), _RINT_LIMIT))
    r = tl.where(y_pos_inf, _POS_INF_CODE, tl.where(y_neg_inf, _NEG_INF_CODE, r))
    if HAS_ZP:
        r = r + tl.load(zp_ptr).to(tl.float32)
    r = tl.minimum(tl.maximum(r, _QMIN), _QMAX)
    tl.store(q_ptr + rows64[:, None] * K + cols[None, :], r.to(tl.int8), mask=mask)


# --- host wrappers -----------------------------------------------------------------------------


def _as_rows(x: torch.Tensor) -> torch.Tensor:
    """x [..., K] as [R, K] with unit column stride; a view whenever the leading dims merge."""
    k = x.shape[-1]
    assert x.dtype in _IN_DTYPES, f"w8a8 triton quantize: x must be fp16/bf16/fp32, got {x.dtype}"
    assert k == 1 or x.stride(-1) == 1, f"w8a8 triton quantize: x's last dim must be contiguous: {x.stride()}"
    return x.reshape(-1, k)  # copies only when the leading dims cannot be merged into one stride


def quantize_per_token_out(
    x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, config: PerTokenConfig | None = None,
    row_stats: torch.Tensor | None = None,
) -> None:
    """Per-token quantization into preallocated outputs (see ``quantize_per_token``).

    Parameters
    ----------
    x : [..., K] fp16 / bf16 / fp32, last dim contiguous, any other strides, K >= 1.
    q : [..., K] int8, contiguous; written whole.
    scale : [..., 1] fp32, contiguous; written whole.
    config : launch config; ``per_token_config(K)`` when None (tests force the others).
    row_stats : None, or fp32 [R] stats of the whole rows (``per_token_row_stats``, reduced
        over the ranks that hold K-slices of them) to derive the scales from instead of x's.
    """
    k = x.shape[-1]
    assert k >= 1, "w8a8 triton quantize_per_token: K must be >= 1"
    assert q.dtype == torch.int8 and q.shape == x.shape and q.is_contiguous()
    assert scale.dtype == torch.float32 and scale.numel() * k == x.numel() and scale.is_contiguous()
    if x.numel() == 0:
        return
    x2 = _as_rows(x)
    r = x2.shape[0]
    cfg = config or per_token_config(k)
    grid = (cdiv(r, cfg.rows),)
    launch(x2, _quantize_per_token_kernel, grid,
           x2, q, scale, scale if row_stats is None else row_stats, r, k, x2.stride(0),
           ROWS=cfg.rows, BLOCK_K=cfg.block_k, SINGLE_PASS=cfg.single_pass, STATS_IN=row_stats is not None,
           num_warps=cfg.num_warps)


def per_token_row_stats(x: torch.Tensor) -> torch.Tensor:
    """``reference.per_token_row_stats`` of x [..., K] (CUDA): fp32 [..., 1]."""
    k = x.shape[-1]
    assert k >= 1, "w8a8 triton per_token_row_stats: K must be >= 1"
    stats = torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device)
    if x.numel() == 0:
        return stats
    x2 = _as_rows(x)
    r = x2.shape[0]
    cfg = per_token_config(k)
    launch(x2, _per_token_row_stats_kernel, (cdiv(r, cfg.rows),),
           x2, stats, r, k, x2.stride(0), ROWS=cfg.rows, BLOCK_K=cfg.block_k, num_warps=cfg.num_warps)
    return stats


def empty_codes(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Uninitialized per-token outputs for ``x`` [..., K]: codes int8 [..., K] and scales fp32
    [..., 1], contiguous, their storage row-padded for the sm90 GEMM (``w8a8.padding``)."""
    return padding.empty_outputs(x.shape, x.dtype, 0, x.device)


def quantize_with_row_stats(x: torch.Tensor, row_stats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``reference.quantize_with_row_stats``: x's rows quantized with the scales their
    (possibly all-reduced) ``row_stats`` [..., 1] give; returns (q, scale)."""
    assert row_stats.dtype == torch.float32 and row_stats.is_contiguous()
    assert row_stats.numel() * x.shape[-1] == x.numel()
    q, scale = empty_codes(x)
    quantize_per_token_out(x, q, scale, row_stats=row_stats)
    return q, scale


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-token int8 quantization, bit-identical to ``reference.quantize_per_token``.

    Parameters
    ----------
    x : [..., K] fp16 / bf16 / fp32 on a CUDA device (or CPU under TRITON_INTERPRET=1).
        The last dim must be contiguous; leading dims may have any strides (they are
        flattened without a copy whenever they merge into one row stride).

    Returns
    -------
    q : [..., K] int8, contiguous.
    scale : [..., 1] fp32, contiguous; 0 for all-zero rows, NaN for rows holding Inf/NaN.
    """
    q, scale = empty_codes(x)
    quantize_per_token_out(x, q, scale)
    return q, scale


def quantize_static_out(
    x: torch.Tensor,
    scale: torch.Tensor,
    zero_point: torch.Tensor | None,
    q: torch.Tensor,
    config: StaticConfig | None = None,
) -> None:
    """Static quantization into a preallocated ``q`` (see ``quantize_static``)."""
    assert scale.numel() == 1, f"w8a8 triton quantize_static: scale must have one element, got {scale.numel()}"
    assert zero_point is None or zero_point.numel() == 1, "w8a8 triton quantize_static: zero_point: one element"
    assert q.dtype == torch.int8 and q.shape == x.shape and q.is_contiguous()
    if x.numel() == 0:
        return
    if x.dim() == 0:  # a scalar is one row of one element
        x, q = x.reshape(1), q.view(1)
    k = x.shape[-1]
    x2 = _as_rows(x)
    r = x2.shape[0]
    cfg = config or static_config(k)
    grid = (cdiv(r, cfg.rows), cdiv(k, cfg.block_k))
    launch(x2, _quantize_static_kernel, grid,
           x2, q, scale, zero_point if zero_point is not None else scale, r, k, x2.stride(0),
           HAS_ZP=zero_point is not None, ROWS=cfg.rows, BLOCK_K=cfg.block_k, num_warps=cfg.num_warps)


def quantize_static(
    x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-tensor static int8 quantization, bit-identical to ``reference.quantize_static``.

    Parameters
    ----------
    x : [..., K] fp16 / bf16 / fp32 (or 0-dim), last dim contiguous, leading dims any strides.
    scale : one-element fp32 tensor on x's device; read by the kernel (no host sync).
    zero_point : None or a one-element int8 / int32 tensor on x's device.

    Returns
    -------
    q : [..., K] int8, contiguous.
    """
    q = padding.empty(x.shape, torch.int8, x.device)
    quantize_static_out(x, scale, zero_point, q)
    return q
