"""Triton kernel of ``silu_mul_quant``: SiLU(gate) * up, then the per-token int8 quantizer
(``fused_common.py``: the math, the exactness both fused kernels share).

Plan: ``quant_configs.fused_config(F, rows, op="silu_mul")``'s launch shapes
[evidence quant.fused-config]. A program per SM (``FUSED_SILU_PROGRAMS_PER_SM``), each looping
over rows and loading its next row while it works on this one. A row of up to 16384 columns is
held in registers as chunks of a power of two (F = 14336: 7 x 2048, no masked columns), p kept
as DT (bf16 / fp16: two values an int32) between its stats and its codes: SiLU is computed
once per element at every M. Longer rows stream twice (stats, then codes, recomputing p). Per
element: exp's 2**n is an exponent-field add (no F2I, no two multiplications), the stats are
an integer max of |x|'s bits, the codes come from the row's reciprocal and FMA corrections (one
on 16-bit rows, two on fp32 ones) instead of an IEEE division, roundings to DT are cvt.rn on
the GPU, no second pass.

Exactness (beyond ``fused_common.py``'s):

* codes are ``_codes``, which is rint(div_rn(p, scale)): the per-token kernel's corrected
  quotient on 16-bit rows, Markstein's theorem on fp32 ones (rows whose scale is below 2**-60,
  zero rows and rows holding Inf/NaN take the IEEE division), and
  scales come from the max of |x|'s bits before the rounding to dt
  (``_row_stats_from_bits``: the same amax and flags).
* p: exp is not correctly rounded anywhere (torch: Sleef on the CPU, expf on CUDA). Here
  exp(v) = 2**n * exp2(r / ln 2) with a Cody-Waite reduction (|r| <= ln(2) / 2), so its
  error does not grow with |v| as exp2(v / ln 2) would (GPU: ex2.approx on [-1/2, 1/2]).
  a = dt(silu(g)) then differs from the reference by one ulp of dt in rare elements for
  fp16 / bf16, p = dt(a * up) by up to two (as the norm's normed); a few ulp for fp32.
  p is bit for bit what the same reduction gives with 2**n as two multiplications (FMA
  contraction included, and 1 + exp(-g) identical: tests compare every bf16 and fp16 gate
  value, and the sm_90 instructions of the reduction).
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from w8a8.triton._launch import cdiv, launch, launch_for_op
from w8a8.triton.fused_common import _INTERPRET, _outputs, _round_to, _stored, _to_dt
from w8a8.triton.quant import _FLT_MAX, _RINT_MAGIC, _as_rows, _corrected, _quantize_rows, _row_scales
from w8a8.triton.quant_configs import FUSED_SILU_PROGRAMS_PER_SM, fused_config

_NEG_LOG2E = tl.constexpr(-1.4426950408889634)
# ln 2 in two parts: the high part has 15 significant bits, so n * _LN2_HI is exact for
# |n| < 2**9 and v - n * _LN2_HI is exact (Sterbenz).
_LN2_HI = tl.constexpr(0.693145751953125)
_LN2_LO = tl.constexpr(1.4286068203094172e-06)
# exp's argument range: below -80, 1 + exp(v) is 1 in fp32 whatever exp(v) is (< 2**-115);
# above 89 (> ln FLT_MAX = 88.72) exp overflows. The range keeps 2**n of exp's reduction a
# normal fp32 exponent step (n in [-115, 128]).
_EXP_MIN = tl.constexpr(-80.0)
_EXP_MAX = tl.constexpr(89.0)
_INF_BITS = tl.constexpr(0x7F800000)
_ABS_BITS = tl.constexpr(0x7FFFFFFF)
# The smallest scale quantized with a reciprocal (``_codes``): 2**-60. Rows with a smaller
# scale (amax < 127 * 2**-60, ~1e-16), zero rows and rows holding Inf/NaN take the IEEE
# division per element (``quant._quantize_rows``).
_MIN_RECIPROCAL_SCALE = tl.constexpr(8.673617379884035e-19)


# --- device helpers --------------------------------------------------------------------------


@triton.jit
def _exp_neg(g):
    """exp(-g) in fp32 for -g in [-80, 89] (g is clamped to [-89, 80]; a NaN g gives some
    number, which silu's numerator turns into NaN): 2**n * exp(r) with -g = n ln 2 + r
    (Cody-Waite), |r| <= ln(2) / 2, so its error does not grow with |g| as exp2(-g / ln 2)'s
    would.

    The reduction is the one the kernels have always computed on v = -g, written on g with
    the constants' signs flipped so that no instruction negates g (rounding to nearest is
    odd: fma(c, -log2 e, M) = fma(v, log2 e, M), fma(n, ln2_hi, c) = -fma(-n, ln2_hi, v), ...;
    the same FMA contraction, which tests compare in the sm_90 code): the same values on
    the GPU and in the interpreter. 2**n is applied by adding n to exp(r)'s exponent field:
    n comes from the low bits of the rint sum t = -g / ln 2 + 1.5 * 2**23 (bits(t) =
    0x4B400000 + n, and 0x4B400000 << 23 wraps to 0), exp(r) is in [2**-0.5, 2**0.5], so the
    field stays in [11, 254] except at n = 128 with exp(r) >= 1, where the true result
    overflows: the integer min turns that pattern into +Inf. Exact, as the two power-of-two
    multiplications it replaces (one F2I and eight integer / FP instructions fewer)."""
    c = tl.maximum(tl.minimum(g, -_EXP_MIN), -_EXP_MAX)  # -clamp(-g, _EXP_MIN, _EXP_MAX)
    t = c * _NEG_LOG2E + _RINT_MAGIC  # _rint(-g * _LOG2E) before its subtraction
    n = t - _RINT_MAGIC
    r = (c + n * _LN2_HI) + n * _LN2_LO  # -r
    bits = tl.exp2(r * _NEG_LOG2E).to(tl.int32, bitcast=True) + (t.to(tl.int32, bitcast=True) << 23)
    return tl.minimum(bits, _INF_BITS).to(tl.float32, bitcast=True)


@triton.jit
def _silu(g, DT: tl.constexpr):
    """a = DT(silu(g)) of fp32 g holding DT values, as fp32: DT(div_rn(g, 1 + exp(-g)))."""
    return _to_dt(tl.math.div_rn(g, 1.0 + _exp_neg(g)), DT).to(tl.float32)


@triton.jit
def _product(g_rows, u_rows, cols, mask, DT: tl.constexpr):
    """a * up of a tile in fp32, before its rounding to DT (0 outside the row)."""
    g = tl.load(g_rows + cols, mask=mask, other=0.0)
    u = tl.load(u_rows + cols, mask=mask, other=0.0)
    return _silu(g.to(tl.float32), DT) * u.to(tl.float32)


@triton.jit
def _max_abs_bits(m, x):
    """Running per-element max of |x|'s bits (int32): ordered as |x| for numbers, +Inf is
    0x7F800000 and any NaN above it."""
    return tl.maximum(m, x.to(tl.int32, bitcast=True) & _ABS_BITS)


@triton.jit
def _row_stats_from_bits(m, DT: tl.constexpr):
    """A row's (amax, bad) of p = DT(x) from m, the max of |x|'s bits over the row (x the fp32
    products before their rounding): rounding to nearest is monotone and odd, so
    max |DT(x)| = DT(max |x|), and p holds an Inf or a NaN exactly when DT(max |x|) is not
    finite (a NaN x: m above +Inf's bits; an x that DT overflows: its rounding is Inf)."""
    amax = _round_to(m.to(tl.float32, bitcast=True), DT)
    finite = amax <= _FLT_MAX  # False for Inf and NaN
    return tl.where(finite, amax, 0.0), (~finite).to(tl.int32)


@triton.jit
def _codes(x, neg_scale, recip, DT: tl.constexpr):
    """int8 codes of a tile of a quantizable row, rint(div_rn(x, scale)) as ``_quantize_rows``
    gives them, from recip = div_rn(1, scale), neg_scale = -scale and FMA corrections instead
    of a division per element (scale >= 2**-60, so nothing in them under- or overflows where it
    matters). Every step is an explicit FMA (tl.fma: one rounding on the GPU and in the
    interpreter).

    q1 = q0 + (x - q0 * scale) * recip, q0 = x * recip: for x of a 16-bit DT (p is rounded to
    DT) q1 is the correctly rounded quotient, the per-token kernel's corrected quotient
    (``quant._quantize_rows_16bit``, exact for every 16-bit value under every row max while the
    scale is at least 2**-100). For fp32 x, q1 is within half an ulp and a 2**-22 fraction of one
    of x / scale: faithful, and Markstein's theorem (recip within half an ulp of 1 / scale, q1
    faithful) makes a second step's residual exact and its result the correctly rounded
    quotient. |x / scale| <= 127 (1 + 2**-23) on such rows, so no clamp: the rint magic leaves
    the code in the sum's low byte, as in ``_quantize_rows``."""
    s = neg_scale[:, None]  # (negated once a row: no negation per element)
    y = recip[:, None]
    q = _corrected(x * y, x, s, y)
    if DT == tl.float32:
        q = _corrected(q, x, s, y)
    return (q + _RINT_MAGIC).to(tl.int32, bitcast=True).to(tl.int8)


# --- kernels -----------------------------------------------------------------------------------


@triton.jit
def _keep(x, DT: tl.constexpr):
    """What a SINGLE_PASS program keeps of a chunk of p (x the fp32 products): for a 16-bit DT
    the bits of DT(x) in the low half of an int32 (the kernel packs two chunks into one),
    for fp32 x itself."""
    if DT == tl.float32:
        return x
    elif _INTERPRET and DT == tl.bfloat16:  # (its casts: see _INTERPRET)
        return (_round_to(x, DT).to(tl.int32, bitcast=True) >> 16) & 0xFFFF
    else:
        return x.to(DT).to(tl.uint16, bitcast=True).to(tl.int32)


@triton.jit
def _pack(lo, hi):
    """Two kept chunks of 16-bit values in one int32 tensor: half the registers."""
    return lo | (hi << 16)


@triton.jit
def _from_bits(bits, DT: tl.constexpr):
    """fp32 value of the 16-bit DT pattern in the low half of ``bits`` (int32, high half 0)."""
    if DT == tl.bfloat16:
        return (bits << 16).to(tl.float32, bitcast=True)
    else:
        return bits.to(tl.uint16).to(DT, bitcast=True).to(tl.float32)


@triton.jit
def _kept(tile, c: tl.constexpr, N_CHUNKS: tl.constexpr, DT: tl.constexpr):
    """p of chunk c as fp32 from the tile the kernel kept."""
    if DT == tl.float32:
        return tile[c]
    else:
        if c % 2 == 1:
            return _from_bits((tile[c // 2] >> 16) & 0xFFFF, DT)
        elif c == N_CHUNKS - 1:
            return _from_bits(tile[c // 2], DT)
        else:
            return _from_bits(tile[c // 2] & 0xFFFF, DT)


@triton.jit
def _silu_quantize_tile(q_ptr, p, cols, mask, safe_scale, quantizable, recip, FAST: tl.constexpr, DT: tl.constexpr):
    """Store the codes of one chunk of p (fp32 holding DT values): ``_codes`` where every row
    of the program allows it (FAST), else the IEEE division per element."""
    if FAST:
        tl.store(q_ptr + cols, _codes(p, -safe_scale, recip, DT), mask=mask)
    else:
        tl.store(q_ptr + cols, _quantize_rows(p, safe_scale, quantizable), mask=mask)


@triton.jit
def _load_row(g_ptr, u_ptr, rows, R, F, stride_gr, stride_ur, cols, CHUNK: tl.constexpr, N_CHUNKS: tl.constexpr):
    """gate and up of ``rows`` (0 past R and F) as N_CHUNKS tensors [ROWS, CHUNK] each, in DT."""
    row_in = rows < R
    rows64 = rows.to(tl.int64)[:, None]
    gs = ()
    us = ()
    for c in tl.static_range(N_CHUNKS):
        mask = row_in[:, None] & (cols + c * CHUNK < F)
        gs = gs + (tl.load(g_ptr + rows64 * stride_gr + c * CHUNK + cols, mask=mask, other=0.0),)
        us = us + (tl.load(u_ptr + rows64 * stride_ur + c * CHUNK + cols, mask=mask, other=0.0),)
    return gs, us


@triton.jit
def _silu_store_codes(q_rows, tile, g_rows, u_rows, cols, row_in, F, safe_scale, quantizable, recip,
                      FAST: tl.constexpr, SINGLE_PASS: tl.constexpr, BLOCK_K: tl.constexpr, CHUNK: tl.constexpr,
                      N_CHUNKS: tl.constexpr, DT: tl.constexpr):
    """The codes of the rows at hand: from the kept products in ``tile`` (SINGLE_PASS) or from
    a second pass over gate and up; FAST picks the reciprocal quantizer (_silu_quantize_tile)."""
    if SINGLE_PASS:
        for c in tl.static_range(N_CHUNKS):
            mask = row_in[:, None] & (cols + c * CHUNK < F)
            _silu_quantize_tile(q_rows + c * CHUNK, _kept(tile, c, N_CHUNKS, DT), cols, mask, safe_scale, quantizable,
                                recip, FAST, DT)
    else:
        for k0 in range(0, F, BLOCK_K):
            for c in tl.static_range(N_CHUNKS):
                mask = row_in[:, None] & (cols + (k0 + c * CHUNK) < F)
                x = _product(g_rows + (k0 + c * CHUNK), u_rows + (k0 + c * CHUNK), cols, mask, DT)
                _silu_quantize_tile(q_rows + (k0 + c * CHUNK), _to_dt(x, DT).to(tl.float32), cols, mask, safe_scale,
                                    quantizable, recip, FAST, DT)


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
    BLOCK_K: tl.constexpr,  # columns per tile: a multiple of the power of two CHUNK below
    SINGLE_PASS: tl.constexpr,  # the tile covers the row (BLOCK_K >= F)
    STORE_PRODUCT: tl.constexpr,
):
    """Programs take ROWS rows at a time, every num_programs-th group (a grid of one program
    per group runs each once; the host launches FUSED_SILU_PROGRAMS_PER_SM a SM).

    A tile of BLOCK_K columns is BLOCK_K / CHUNK tensors of CHUNK columns, CHUNK the largest
    power of two dividing BLOCK_K (14336 = 7 x 2048: a row of Llama-3-8B's F with no masked
    waste). SINGLE_PASS: p of the whole row stays in registers (bf16: two values an int32)
    between its stats and its codes, and the program's next rows are loaded while it works on
    these; otherwise the row streams twice, the second pass recomputing p."""
    DT: tl.constexpr = g_ptr.dtype.element_ty
    CHUNK: tl.constexpr = BLOCK_K & -BLOCK_K
    N_CHUNKS: tl.constexpr = BLOCK_K // CHUNK
    first = tl.program_id(0) * ROWS
    step = tl.num_programs(0) * ROWS
    cols = tl.arange(0, CHUNK)[None, :]
    if SINGLE_PASS:
        g_next, u_next = _load_row(g_ptr, u_ptr, first + tl.arange(0, ROWS), R, F, stride_gr, stride_ur, cols,
                                   CHUNK, N_CHUNKS)
    for r0 in range(first, R, step):
        rows = r0 + tl.arange(0, ROWS)
        row_in = rows < R
        rows64 = rows.to(tl.int64)
        g_rows = g_ptr + rows64[:, None] * stride_gr
        u_rows = u_ptr + rows64[:, None] * stride_ur
        out = rows64[:, None] * F
        m = tl.zeros([ROWS, CHUNK], dtype=tl.int32)
        tile = ()  # SINGLE_PASS: the row's kept products, packed (an empty tuple when streaming)
        if SINGLE_PASS:
            gs, us = g_next, u_next
            g_next, u_next = _load_row(g_ptr, u_ptr, rows + step, R, F, stride_gr, stride_ur, cols, CHUNK, N_CHUNKS)
            previous = m  # (the even chunk waiting for its pair; set before it is read)
            for c in tl.static_range(N_CHUNKS):
                x = _silu(gs[c].to(tl.float32), DT) * us[c].to(tl.float32)
                m = _max_abs_bits(m, x)
                if STORE_PRODUCT:
                    mask = row_in[:, None] & (cols + c * CHUNK < F)
                    tl.store(p_ptr + out + c * CHUNK + cols, _stored(_to_dt(x, DT), DT), mask=mask)
                kept = _keep(x, DT)
                if DT != tl.float32:  # chunks 2i and 2i + 1 share an int32
                    if c % 2 == 1:
                        tile = tile + (_pack(previous, kept),)
                    elif c == N_CHUNKS - 1:
                        tile = tile + (kept,)
                    else:
                        previous = kept
                else:
                    tile = tile + (kept,)
        else:
            for k0 in range(0, F, BLOCK_K):
                for c in tl.static_range(N_CHUNKS):
                    mask = row_in[:, None] & (cols + (k0 + c * CHUNK) < F)
                    x = _product(g_rows + (k0 + c * CHUNK), u_rows + (k0 + c * CHUNK), cols, mask, DT)
                    m = _max_abs_bits(m, x)
                    if STORE_PRODUCT:
                        tl.store(p_ptr + out + (k0 + c * CHUNK) + cols, _stored(_to_dt(x, DT), DT), mask=mask)
        amax, bad = _row_stats_from_bits(tl.max(m, axis=1), DT)

        scale, safe_scale, quantizable = _row_scales(amax, bad)
        tl.store(scale_ptr + rows, scale, mask=row_in)
        # One branch for the rows at hand: all quantizable with a scale the reciprocal path
        # takes (rows past R do not count); none quantizable (codes 0); else the IEEE
        # division for all of them (as quant.py quantizes).
        fast = (quantizable & (scale >= _MIN_RECIPROCAL_SCALE)) | ~row_in
        recip = tl.math.div_rn(tl.full([ROWS], 1.0, tl.float32), safe_scale)
        if tl.min(fast.to(tl.int32), axis=0) == 1:
            _silu_store_codes(q_ptr + out, tile, g_rows, u_rows, cols, row_in, F, safe_scale, quantizable, recip, True,
                              SINGLE_PASS, BLOCK_K, CHUNK, N_CHUNKS, DT)
        elif tl.max(quantizable.to(tl.int32), axis=0) == 0:  # zero rows, rows holding Inf/NaN: codes 0
            for k0 in range(0, F, BLOCK_K):
                for c in tl.static_range(N_CHUNKS):
                    mask = row_in[:, None] & (cols + (k0 + c * CHUNK) < F)
                    tl.store(q_ptr + out + (k0 + c * CHUNK) + cols, tl.zeros([ROWS, CHUNK], dtype=tl.int8), mask=mask)
        else:
            _silu_store_codes(q_ptr + out, tile, g_rows, u_rows, cols, row_in, F, safe_scale, quantizable, recip, False,
                              SINGLE_PASS, BLOCK_K, CHUNK, N_CHUNKS, DT)


# --- host wrapper ------------------------------------------------------------------------------

# SMs of the interpreter's "device": a few, so the CPU tests run programs over several row groups.
_INTERPRETER_SM_COUNT = 3


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return _INTERPRETER_SM_COUNT
    return torch.cuda.get_device_properties(device).multi_processor_count


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
        cfg = fused_config(f, rows, op="silu_mul")
        groups = cdiv(rows, cfg.rows)
        if cfg.single_pass:  # FUSED_SILU_PROGRAMS_PER_SM a SM loop over the row groups (the kernel's docstring)
            groups = min(groups, _sm_count(g2.device) * FUSED_SILU_PROGRAMS_PER_SM)
        args = (g2, u2, q, scale, product if product is not None else q, rows, f, g2.stride(0), u2.stride(0))
        options = dict(ROWS=cfg.rows, BLOCK_K=cfg.block_k, SINGLE_PASS=cfg.single_pass,
                       STORE_PRODUCT=product is not None, num_warps=cfg.num_warps)
        if product is None:  # the op's C++ implementation launches it again with these arguments (routes.cpp)
            launch_for_op("silu_mul_quant", g2, _silu_mul_quant_kernel, (groups,), *args, **options)
        else:
            launch(g2, _silu_mul_quant_kernel, (groups,), *args, **options)
    return q, scale
