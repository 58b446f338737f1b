"""Triton kernels of the fused producer + quantization ops: RMSNorm (with or without the
residual add) and SiLU(gate) * up, each followed by the per-token int8 quantizer.

One file for both kernels: each is the per-token quantizer of ``quant.py`` behind an
elementwise prologue, and they share its jitted helpers, its launch shapes and the plan
below; their tests are ``tests/test_fused_quant.py``. The math is ``w8a8.reference``
(``rms_norm_quant``, ``add_rms_norm_quant``, ``silu_mul_quant``), in the model dtype
``dt`` with fp32 inside and the reference's roundings to dt::

    s      = x, or dt(x + residual)                        (stored: sum)
    normed = dt(weight * dt(s * rstd)),  rstd = div_rn(1, sqrt_rn(mean(s**2) + eps))
    p      = dt(dt(silu(gate)) * up),    silu(g) = div_rn(g, 1 + exp(-g))
    codes, scales = quantize_per_token(normed or p)        (quant.py's helpers)

Plan: per-row programs with ``quant_configs.fused_config(K, rows)``'s launch shape (measured
for these kernels; the shapes and figures are there): rows up to 8192 columns (16384 with up
to 1024 rows) stay in registers, short rows packed several per program; longer rows stream in
2048-wide tiles, the norm in three passes (sum of squares and ``sum``; normed and its row
stats; codes), SiLU-mul in two (p and its stats; codes), recomputing instead of reading back
what the program wrote.

Exactness:

* codes and scales are bit-identical to ``reference.quantize_per_token`` of the kernel's
  own normed / p: the same helpers as ``quant.py`` (IEEE division, the rint magic,
  non-finite detection) on the dt values.
* ``sum`` is bit-identical: one fp32 add rounded to dt, as the reference.
* normed: the mean's fp32 summation order cannot match torch's, and torch.rsqrt (the
  reference's, as transformers calls it) is within 1 ulp on the CPU, not correctly
  rounded, so rstd can differ from the reference's by an ulp or two of fp32. For fp16
  and bf16 that moves a rare element of n = dt(s * rstd) by one unit in the last place
  of dt, which ``weight * n`` can widen to two in normed (|weight| * ulp(n) spans up to
  two ulps of the product's binade); tests: within 2 ulp, >= 99.9% of elements equal.
  For fp32, where nothing rounds it away, most elements of such a row differ by a few ulp.
* p: exp is not correctly rounded anywhere (torch: Sleef on the CPU, expf on CUDA). Here
  exp(v) = 2**n * exp2(r / ln 2) with a Cody-Waite reduction (|r| <= ln(2) / 2), so its
  error does not grow with |v| as exp2(v / ln 2) would (GPU: ex2.approx on [-1/2, 1/2]).
  a = dt(silu(g)) then differs from the reference by one ulp of dt in rare elements for
  fp16 / bf16, p = dt(a * up) by up to two (as normed above); a few ulp for fp32.
* Triton's default FMA contraction (seen in the sm_90 PTX) fuses only the sum of squares
  and exp's reduction, never an operation whose rounding the reference states.
* Rounding to bf16 is integer round-to-nearest-even on the fp32 bits (torch's own
  algorithm): Triton's interpreter truncates fp32 -> bf16 casts, and this way the CPU
  tests run the expression the GPU runs. fp16 casts round to nearest even everywhere.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from w8a8.triton._launch import launching
from w8a8.triton.quant import (
    _accumulate_stats,
    _as_rows,
    _quantize_rows,
    _rint,
    _row_scales,
    _row_stats,
)
from w8a8.triton.quant_configs import fused_config

_LOG2E = tl.constexpr(1.4426950408889634)
# ln 2 in two parts: the high part has 15 significant bits, so n * _LN2_HI is exact for
# |n| < 2**9 and v - n * _LN2_HI is exact (Sterbenz).
_LN2_HI = tl.constexpr(0.693145751953125)
_LN2_LO = tl.constexpr(1.4286068203094172e-06)
# exp(v) rounds to 0 in fp32 below -104 and overflows above 89 (> ln FLT_MAX = 88.72).
_EXP_MIN = tl.constexpr(-104.0)
_EXP_MAX = tl.constexpr(89.0)
_INF = tl.constexpr(float("inf"))


# --- device helpers --------------------------------------------------------------------------


@triton.jit
def _round_to(v, DT: tl.constexpr):
    """fp32 v rounded to DT (nearest even) and returned as fp32: the value that casting to
    DT and back gives on the GPU, in the interpreter too."""
    if DT == tl.bfloat16:
        bits = v.to(tl.int32, bitcast=True)
        bits = (bits + (0x7FFF + ((bits >> 16) & 1))) & -65536
        return tl.where(v == v, bits.to(tl.float32, bitcast=True), _INF - _INF)  # NaN stays NaN
    elif DT == tl.float16:
        return v.to(tl.float16).to(tl.float32)
    else:
        return v


@triton.jit
def _pow2(k):
    """2**k as fp32, for integer k (int32) in [-126, 127]: built from its exponent bits."""
    return ((k + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _exp(v):
    """exp(v) in fp32: 2**n * exp(r) with v = n ln 2 + r (Cody-Waite), |r| <= ln(2) / 2.
    (A NaN v gives some number: silu's numerator carries the NaN.)"""
    v = tl.minimum(tl.maximum(v, _EXP_MIN), _EXP_MAX)
    n = _rint(v * _LOG2E)  # |n| <= 151
    r = (v - n * _LN2_HI) - n * _LN2_LO
    ni = n.to(tl.int32)
    h = ni >> 1  # 2**n in two factors, each a normal fp32: 2**-150 and 2**128 are not
    return tl.exp2(r * _LOG2E) * _pow2(h) * _pow2(ni - h)


@triton.jit
def _load_s(x_rows, r_rows, sum_rows, cols, mask, HAS_RESIDUAL: tl.constexpr, STORE_SUM: tl.constexpr,
            DT: tl.constexpr):
    """s of a [ROWS, BLOCK] tile in fp32: x, or x + residual rounded to DT (stored when STORE_SUM)."""
    s = tl.load(x_rows + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        s = _round_to(s + tl.load(r_rows + cols, mask=mask, other=0.0).to(tl.float32), DT)
        if STORE_SUM:
            tl.store(sum_rows + cols, s.to(DT), mask=mask)
    return s


@triton.jit
def _rstd(sum_sq, K, eps):
    """1 / sqrt(mean + eps) per row, each step correctly rounded."""
    var = tl.math.div_rn(sum_sq, K * 1.0)  # (K * 1.0: K may arrive as the constexpr 1)
    return tl.math.div_rn(tl.full(var.shape, 1.0, tl.float32), tl.sqrt_rn(var + eps))


@triton.jit
def _normed(s, rstd, w_ptr, cols, mask, DT: tl.constexpr):
    """normed of a tile in fp32 (0 outside the row, so the row stats see only the row)."""
    n = _round_to(s * rstd[:, None], DT)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    return tl.where(mask, _round_to(w * n, DT), 0.0)


@triton.jit
def _product(g_rows, u_rows, cols, mask, DT: tl.constexpr):
    """p = DT(DT(silu(gate)) * up) of a tile in fp32 (0 outside the row)."""
    g = tl.load(g_rows + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_rows + cols, mask=mask, other=0.0).to(tl.float32)
    a = _round_to(tl.math.div_rn(g, 1.0 + _exp(-g)), DT)
    return _round_to(a * u, DT)


# --- kernels -----------------------------------------------------------------------------------


@triton.jit
def _rms_norm_quant_kernel(
    x_ptr,  # [R, K] fp16/bf16/fp32, row stride stride_xr, unit column stride
    res_ptr,  # [R, K] x's dtype, row stride stride_rr (read only with HAS_RESIDUAL)
    w_ptr,  # [K] x's dtype, contiguous
    q_ptr,  # [R, K] int8, contiguous
    scale_ptr,  # [R] fp32
    normed_ptr,  # [R, K] x's dtype, contiguous
    sum_ptr,  # [R, K] x's dtype, contiguous (written only with HAS_RESIDUAL)
    R,
    K,
    stride_xr,
    stride_rr,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
):
    DT: tl.constexpr = normed_ptr.dtype.element_ty
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_in = rows < R
    rows64 = rows.to(tl.int64)
    x_rows = x_ptr + rows64[:, None] * stride_xr
    r_rows = res_ptr + rows64[:, None] * stride_rr
    out = rows64[:, None] * K  # the contiguous outputs' row offsets
    cols = tl.arange(0, BLOCK_K)[None, :]

    if SINGLE_PASS:
        mask = row_in[:, None] & (cols < K)
        s = _load_s(x_rows, r_rows, sum_ptr + out, cols, mask, HAS_RESIDUAL, True, DT)
        normed = _normed(s, _rstd(tl.sum(s * s, axis=1), K, eps), w_ptr, cols, mask, DT)
        tl.store(normed_ptr + out + cols, normed.to(DT), mask=mask)
        amax, bad = _row_stats(normed)
    else:
        sum_sq = tl.zeros([ROWS, BLOCK_K], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            mask = row_in[:, None] & (cols + k0 < K)
            s = _load_s(x_rows + k0, r_rows + k0, sum_ptr + out + k0, cols, mask, HAS_RESIDUAL, True, DT)
            sum_sq += s * s
        rstd = _rstd(tl.sum(sum_sq, axis=1), K, eps)
        amax = tl.zeros([ROWS, BLOCK_K], dtype=tl.float32)
        bad = tl.zeros([ROWS, BLOCK_K], dtype=tl.int1)
        for k0 in range(0, K, BLOCK_K):
            mask = row_in[:, None] & (cols + k0 < K)
            s = _load_s(x_rows + k0, r_rows + k0, sum_ptr + out + k0, cols, mask, HAS_RESIDUAL, False, DT)
            normed = _normed(s, rstd, w_ptr + k0, cols, mask, DT)
            tl.store(normed_ptr + out + k0 + cols, normed.to(DT), mask=mask)
            amax, bad = _accumulate_stats(amax, bad, normed)
        amax, bad = tl.max(amax, axis=1), tl.max(bad.to(tl.int32), axis=1)

    scale, safe_scale, quantizable = _row_scales(amax, bad)
    tl.store(scale_ptr + rows, scale, mask=row_in)
    if SINGLE_PASS:
        tl.store(q_ptr + out + cols, _quantize_rows(normed, safe_scale, quantizable), mask=mask)
    else:
        for k0 in range(0, K, BLOCK_K):
            mask = row_in[:, None] & (cols + k0 < K)
            s = _load_s(x_rows + k0, r_rows + k0, sum_ptr + out + k0, cols, mask, HAS_RESIDUAL, False, DT)
            normed = _normed(s, rstd, w_ptr + k0, cols, mask, DT)
            tl.store(q_ptr + out + k0 + cols, _quantize_rows(normed, safe_scale, quantizable), mask=mask)


@triton.jit
def _silu_mul_quant_kernel(
    g_ptr,  # [R, F] fp16/bf16/fp32, row stride stride_gr, unit column stride
    u_ptr,  # [R, F] gate's dtype, row stride stride_ur, unit column stride
    q_ptr,  # [R, F] int8, contiguous
    scale_ptr,  # [R] fp32
    p_ptr,  # [R, F] gate's dtype, contiguous (written only with STORE_PRODUCT: tests)
    R,
    F,
    stride_gr,
    stride_ur,
    ROWS: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
    STORE_PRODUCT: tl.constexpr,
):
    DT: tl.constexpr = g_ptr.dtype.element_ty
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_in = rows < R
    rows64 = rows.to(tl.int64)
    g_rows = g_ptr + rows64[:, None] * stride_gr
    u_rows = u_ptr + rows64[:, None] * stride_ur
    out = rows64[:, None] * F
    cols = tl.arange(0, BLOCK_K)[None, :]

    if SINGLE_PASS:
        mask = row_in[:, None] & (cols < F)
        p = _product(g_rows, u_rows, cols, mask, DT)
        if STORE_PRODUCT:
            tl.store(p_ptr + out + cols, p.to(DT), mask=mask)
        amax, bad = _row_stats(p)
    else:
        amax = tl.zeros([ROWS, BLOCK_K], dtype=tl.float32)
        bad = tl.zeros([ROWS, BLOCK_K], dtype=tl.int1)
        for k0 in range(0, F, BLOCK_K):
            mask = row_in[:, None] & (cols + k0 < F)
            p = _product(g_rows + k0, u_rows + k0, cols, mask, DT)
            if STORE_PRODUCT:
                tl.store(p_ptr + out + k0 + cols, p.to(DT), mask=mask)
            amax, bad = _accumulate_stats(amax, bad, p)
        amax, bad = tl.max(amax, axis=1), tl.max(bad.to(tl.int32), axis=1)

    scale, safe_scale, quantizable = _row_scales(amax, bad)
    tl.store(scale_ptr + rows, scale, mask=row_in)
    if SINGLE_PASS:
        tl.store(q_ptr + out + cols, _quantize_rows(p, safe_scale, quantizable), mask=mask)
    else:
        for k0 in range(0, F, BLOCK_K):
            mask = row_in[:, None] & (cols + k0 < F)
            p = _product(g_rows + k0, u_rows + k0, cols, mask, DT)
            tl.store(q_ptr + out + k0 + cols, _quantize_rows(p, safe_scale, quantizable), mask=mask)


# --- host wrappers -----------------------------------------------------------------------------


def _outputs(x: torch.Tensor, n_float: int) -> tuple[torch.Tensor, ...]:
    """The outputs, uninitialized: codes int8 [..., K], scales fp32 [..., 1], then ``n_float``
    [..., K] tensors of x's dtype (normed, sum), all contiguous. (Tests poison them here.)"""
    q = torch.empty(x.shape, dtype=torch.int8, device=x.device)
    scale = torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device)
    return (q, scale, *(torch.empty(x.shape, dtype=x.dtype, device=x.device) for _ in range(n_float)))


def rms_norm_quant(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, ...]:
    """RMSNorm (after the residual add when ``residual`` is given), then per-token int8
    quantization; ``reference.rms_norm_quant`` / ``add_rms_norm_quant`` (module docstring:
    how exactly).

    Parameters
    ----------
    x : [..., K] fp16 / bf16 / fp32 on a CUDA device (or the CPU under TRITON_INTERPRET=1),
        last dim contiguous, leading dims any strides (flattened without a copy whenever
        they merge into one row stride), K >= 1.
    weight : [K], x's dtype, contiguous.
    eps : float >= 0.
    residual : None, or x's shape and dtype, last dim contiguous.

    Returns
    -------
    (codes, scales, normed), and ``sum`` with ``residual``: codes int8 [..., K], scales fp32
    [..., 1], normed and sum [..., K] in x's dtype, all contiguous and written whole.
    """
    outputs = _outputs(x, 1 if residual is None else 2)
    q, scale, normed = outputs[:3]
    total = outputs[3] if residual is not None else None
    if x.numel() > 0:
        k = x.shape[-1]
        assert weight.shape == (k,) and weight.dtype == x.dtype and weight.is_contiguous()
        x2 = _as_rows(x)
        r2 = _as_rows(residual) if residual is not None else x2
        rows = x2.shape[0]
        cfg = fused_config(k, rows)
        with launching(x2):
            _rms_norm_quant_kernel[(triton.cdiv(rows, cfg.rows),)](
                x2, r2, weight, q, scale, normed, total if total is not None else normed,
                rows, k, x2.stride(0), r2.stride(0), float(eps),
                HAS_RESIDUAL=residual is not None, ROWS=cfg.rows, BLOCK_K=cfg.block_k,
                SINGLE_PASS=cfg.single_pass, num_warps=cfg.num_warps,
            )
    return outputs


def silu_mul_quant(
    gate: torch.Tensor, up: torch.Tensor, product: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """SiLU(gate) * up, then per-token int8 quantization; ``reference.silu_mul_quant``
    (module docstring: how exactly).

    Parameters
    ----------
    gate, up : [..., F] fp16 / bf16 / fp32, same shape and dtype, last dim contiguous,
        leading dims any strides (the halves of one [M, 2F] GEMM output need no copy).
    product : None, or a contiguous [..., F] tensor of gate's dtype that receives p, the
        values quantized (tests: the codes are checked against p).

    Returns
    -------
    codes : [..., F] int8, contiguous. scales : [..., 1] fp32.
    """
    q, scale = _outputs(gate, 0)
    if product is not None:
        assert product.shape == gate.shape and product.dtype == gate.dtype and product.is_contiguous()
    if gate.numel() > 0:
        f = gate.shape[-1]
        g2, u2 = _as_rows(gate), _as_rows(up)
        rows = g2.shape[0]
        cfg = fused_config(f, rows)
        with launching(g2):
            _silu_mul_quant_kernel[(triton.cdiv(rows, cfg.rows),)](
                g2, u2, q, scale, product if product is not None else q, rows, f, g2.stride(0), u2.stride(0),
                ROWS=cfg.rows, BLOCK_K=cfg.block_k, SINGLE_PASS=cfg.single_pass,
                STORE_PRODUCT=product is not None, num_warps=cfg.num_warps,
            )
    return q, scale
