"""Triton kernel of ``rms_norm_quant`` / ``add_rms_norm_quant``: RMSNorm (after the
residual add when one is given), then the per-token int8 quantizer (``fused_common.py``: the
math, the exactness both fused kernels share).

Plan: ``quant_configs.fused_config(K, rows)``'s launch shapes [evidence quant.fused-config].
Per-row programs; rows up to 8192 columns (16384 with up to 1024 rows) stay in registers,
short rows packed several per program; longer rows stream in 2048-wide tiles in three passes
(sum of squares and ``sum``; normed and its row stats; codes), recomputing instead of reading
back what the program wrote.

Exactness (beyond ``fused_common.py``'s):

* ``sum`` is bit-identical: one fp32 add rounded to dt, as the reference.
* normed: the mean's fp32 summation order cannot match torch's, and torch.rsqrt (the
  reference's, as transformers calls it) is within 1 ulp on the CPU, not correctly
  rounded, so rstd can differ from the reference's by an ulp or two of fp32; the rest is
  the reference's arithmetic, so each row of normed is exactly the reference's formula at
  that rstd (tests: at some rstd within 4 ulp of the reference's). For fp16 and bf16 that
  moves elements of n = dt(s * rstd) by one unit in the last place of dt, which
  ``weight * n`` can widen to two in normed: usually a rare element, in a row whose rstd
  lies near a rounding boundary of many products many of them. For fp32, where nothing
  rounds it away, most elements of such a row differ by a few ulp.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from w8a8.triton._launch import cdiv, launch_for_op
from w8a8.triton.fused_common import _outputs, _round_to, _stored
from w8a8.triton.quant import (_accumulate_stats, _as_rows, _corrected_row_factors, _per_token_codes, _row_scales,
                               _row_stats)
from w8a8.triton.quant_configs import fused_config

# --- device helpers --------------------------------------------------------------------------


@triton.jit
def _load_s(x_rows, r_rows, sum_rows, cols, mask, HAS_RESIDUAL: tl.constexpr, STORE_SUM: tl.constexpr,
            DT: tl.constexpr):
    """s of a [ROWS, BLOCK] tile in fp32: x, or x + residual rounded to DT (stored when STORE_SUM)."""
    s = tl.load(x_rows + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        s = _round_to(s + tl.load(r_rows + cols, mask=mask, other=0.0).to(tl.float32), DT)
        if STORE_SUM:
            tl.store(sum_rows + cols, _stored(s, DT), mask=mask)
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
        tl.store(normed_ptr + out + cols, _stored(normed, DT), mask=mask)
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
            tl.store(normed_ptr + out + k0 + cols, _stored(normed, DT), mask=mask)
            amax, bad = _accumulate_stats(amax, bad, normed)
        amax, bad = tl.max(amax, axis=1), tl.max(bad.to(tl.int32), axis=1)

    scale, safe_scale, quantizable = _row_scales(amax, bad)
    tl.store(scale_ptr + rows, scale, mask=row_in)
    # normed holds DT values: on 16-bit rows the per-token kernel's corrected quotient applies.
    SIXTEEN_BIT: tl.constexpr = DT != tl.float32
    up, divisor, inv = _corrected_row_factors(safe_scale)  # per row; unused (dropped) on fp32 rows
    if SINGLE_PASS:
        codes = _per_token_codes(normed, safe_scale, up, divisor, inv, quantizable, SIXTEEN_BIT)
        tl.store(q_ptr + out + cols, codes, mask=mask)
    else:
        for k0 in range(0, K, BLOCK_K):
            mask = row_in[:, None] & (cols + k0 < K)
            s = _load_s(x_rows + k0, r_rows + k0, sum_ptr + out + k0, cols, mask, HAS_RESIDUAL, False, DT)
            # The same values as the pass that took the row max (the same expression): the
            # corrected quotient's codes need |normed| <= amax, having no clamp.
            normed = _normed(s, rstd, w_ptr + k0, cols, mask, DT)
            codes = _per_token_codes(normed, safe_scale, up, divisor, inv, quantizable, SIXTEEN_BIT)
            tl.store(q_ptr + out + k0 + cols, codes, mask=mask)


# --- host wrapper ------------------------------------------------------------------------------


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
        # The op's C++ implementation launches it again with these arguments (csrc/torch/sm90/routes.cpp).
        launch_for_op("rms_norm_quant" if residual is None else "add_rms_norm_quant", x2, _rms_norm_quant_kernel,
                      (cdiv(rows, cfg.rows),),
                      x2, r2, weight, q, scale, normed, total if total is not None else normed,
                      rows, k, x2.stride(0), r2.stride(0), float(eps),
                      HAS_RESIDUAL=residual is not None, ROWS=cfg.rows, BLOCK_K=cfg.block_k,
                      SINGLE_PASS=cfg.single_pass, num_warps=cfg.num_warps)
    return outputs
