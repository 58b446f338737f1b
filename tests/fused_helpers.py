"""Shared by the fused producer + quantizer tests (tests/ops/test_fused_quant.py: the ops against
the reference; tests/kernels/test_fused_quant_kernels.py: the Triton kernels' internals): inputs,
the tolerance against the reference, the checked runs of each op, and the SiLU-mul kernel as it
was before its rewrite (frozen: its expression, operation for operation), which the current
kernel's product must equal bit for bit.
"""
from __future__ import annotations

import torch

from w8a8 import dispatch, reference
from helpers import CUDA, assert_exact, assert_same_codes, assert_ulp_close, poison_allocator, ulp_distance

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None
# The kernels run here (a GPU, or the interpreter); their modules and the test kernels below are
# defined wherever Triton is installed (the offline sm_90 compilation needs them without either).
TRITON = triton is not None and dispatch.unavailable_reason(
    "silu_mul_quant", "triton", torch.device("cuda" if CUDA else "cpu")) is None
if triton is not None:
    from w8a8.triton import fused_common, silu_quant

EPS = 1e-6

# The SiLU product against the reference, by dtype: (max ulp, the fraction of elements allowed
# to differ at all, with 2 elements of slack for small tensors). torch's exp is not the kernel's
# (fused_quant.py): for 16-bit dtypes that moves a rare element of the first rounding (a) by one
# ulp, which the second (a * up) can widen to two; in fp32 nothing rounds the difference away
# (measured in the interpreter: <= 4 ulp).
FUSED_TOL = {torch.bfloat16: (2, 0.001), torch.float16: (2, 0.001), torch.float32: (8, 1.0)}
# normed is checked exactly, row by row: the reference's formula at some 1 / rms within this many
# fp32 ulps of the reference's own. The mean of squares, summed in another order, and torch.rsqrt
# (within 1 ulp, not correctly rounded) move a row's 1 / rms, and so all of its elements at once:
# how many of them then round differently depends on the row (measured in the interpreter: 2 ulp
# flipped 255 of 4096 bf16 elements of a row whose 1 / rms lies near 11 / 48). A wrong sum, weight
# or rounding moves elements no 1 / rms of the row explains.
RSTD_ULPS = 4


# --- the SiLU of the kernel before its rewrite (frozen: its expression, operation for operation) -----

if triton is not None:
    from w8a8.triton.quant import _rint

    _OLD_LOG2E = tl.constexpr(1.4426950408889634)
    _OLD_LN2_HI = tl.constexpr(0.693145751953125)
    _OLD_LN2_LO = tl.constexpr(1.4286068203094172e-06)
    _OLD_EXP_MIN = tl.constexpr(-104.0)
    _OLD_EXP_MAX = tl.constexpr(89.0)

    @triton.jit
    def _old_pow2(k):
        return ((k + 127) << 23).to(tl.float32, bitcast=True)

    @triton.jit
    def _old_exp(v):
        v = tl.minimum(tl.maximum(v, _OLD_EXP_MIN), _OLD_EXP_MAX)
        n = _rint(v * _OLD_LOG2E)
        r = (v - n * _OLD_LN2_HI) - n * _OLD_LN2_LO
        ni = n.to(tl.int32)
        h = ni >> 1
        return tl.exp2(r * _OLD_LOG2E) * _old_pow2(h) * _old_pow2(ni - h)

    @triton.jit
    def _old_silu(g, DT: tl.constexpr):
        """a = DT(silu(g)) as the kernel before the rewrite computed it (fp32 holding DT values)."""
        return fused_common._round_to(tl.math.div_rn(g, 1.0 + _old_exp(-g)), DT)

    @triton.jit
    def _old_product_kernel(g_ptr, u_ptr, p_ptr, F, stride_gr, stride_ur, BLOCK: tl.constexpr):
        DT: tl.constexpr = g_ptr.dtype.element_ty
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < F
        g = tl.load(g_ptr + row * stride_gr + cols, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(u_ptr + row * stride_ur + cols, mask=mask, other=0.0).to(tl.float32)
        p = fused_common._round_to(_old_silu(g, DT) * u, DT)
        tl.store(p_ptr + row * F + cols, fused_common._stored(p, DT), mask=mask)

    @triton.jit
    def _silu_both_kernel(g_ptr, a_new_ptr, a_old_ptr, d_new_ptr, d_old_ptr, N, BLOCK: tl.constexpr):
        """Per element of g: a = DT(silu(g)) and the denominator 1 + exp(-g), new and old."""
        DT: tl.constexpr = g_ptr.dtype.element_ty
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        g = tl.load(g_ptr + i, mask=i < N).to(tl.float32)
        tl.store(a_new_ptr + i, silu_quant._silu(g, DT), mask=i < N)
        tl.store(a_old_ptr + i, _old_silu(g, DT), mask=i < N)
        tl.store(d_new_ptr + i, 1.0 + silu_quant._exp_neg(g), mask=i < N)
        tl.store(d_old_ptr + i, 1.0 + _old_exp(-g), mask=i < N)

    @triton.jit
    def _new_exp_kernel(g_ptr, e_ptr):
        tl.store(e_ptr, silu_quant._exp_neg(tl.load(g_ptr)))

    @triton.jit
    def _old_exp_kernel(g_ptr, e_ptr):
        tl.store(e_ptr, _old_exp(-tl.load(g_ptr)))


def old_silu_product(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """p as the SiLU-mul kernel before its rewrite computed it, [..., F] contiguous."""
    f = gate.shape[-1]
    g2, u2 = gate.reshape(-1, f), up.reshape(-1, f)
    p = torch.empty(g2.shape, dtype=gate.dtype, device=gate.device)
    if p.numel():
        _old_product_kernel[(g2.shape[0], triton.cdiv(f, 1024))](g2, u2, p, f, g2.stride(0), u2.stride(0), BLOCK=1024)
    return p.view(gate.shape)


def every_value(dtype: torch.dtype, device) -> torch.Tensor:
    """All 65536 bit patterns of a 16-bit dtype (NaNs, infinities, subnormals, both zeros)."""
    return torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16).view(dtype).to(device)


# --- inputs ---------------------------------------------------------------------------------------


def rows(m: int, k: int, dtype, device, scale: float = 3.0) -> torch.Tensor:
    """Gaussian rows, each with its own magnitude over ~4 decades (activations of a block)."""
    mag = torch.exp2(torch.empty(m, 1, device=device).uniform_(-6, 6))
    return (torch.randn(m, k, device=device) * mag * scale).to(dtype)


def norm_weight(k: int, dtype, device) -> torch.Tensor:
    return (torch.randn(k, device=device) * 0.5 + 1).to(dtype)


def gate_up(m: int, f: int, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """gate and up as the two halves of one [m, 2f] GEMM output (row stride 2f)."""
    both = (torch.randn(m, 2 * f, device=device) * 3).to(dtype)
    return both[:, :f], both[:, f:]


# --- checks ------------------------------------------------------------------------------------------


def assert_near_reference(out: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """Within FUSED_TOL of the reference (NaN exactly where the reference is NaN)."""
    max_ulp, fraction = FUSED_TOL[out.dtype]
    out, ref = out.cpu(), ref.cpu()
    assert_ulp_close(out, ref, max_ulp)
    differs = ulp_distance(out.masked_fill(out.isnan(), 0), ref.masked_fill(ref.isnan(), 0)) > 0
    differ = int(differs.sum())
    assert differ <= max(2, fraction * out.numel()), f"{what}: {differ} of {out.numel()} elements differ"


def assert_normed_rows(normed: torch.Tensor, s: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """Each row of normed is exactly ``reference.rms_norm``'s formula for that row of s at a
    1 / rms within RSTD_ULPS fp32 ulps of the reference's (NaN where that gives NaN)."""
    k = normed.shape[-1]
    out, rows, w = normed.cpu().reshape(-1, k), s.cpu().reshape(-1, k), weight.cpu()
    bits = reference.rms_rstd(rows, eps).view(torch.int32)
    explained = torch.zeros(out.shape[0], dtype=torch.bool)
    for step in range(-RSTD_ULPS, RSTD_ULPS + 1):
        formula = reference.rms_norm_at(rows, w, (bits + step).view(torch.float32))
        explained |= ((formula == out) | (formula.isnan() & out.isnan())).all(-1)
    rows = (~explained).nonzero().flatten().tolist()
    assert not rows, f"normed: rows {rows[:8]} ({len(rows)} of {out.shape[0]}) are the reference's formula at no 1 / rms within {RSTD_ULPS} ulp of its own"


def run_norm(backend: str, x, weight, eps, residual=None):
    """The kernel through its op (or the validated reference); outputs checked against the
    reference, the codes against the kernel's own normed. Returns the outputs."""
    poison_allocator(x.numel() * 4, x.device)
    if residual is None:
        got = dispatch.kernel("rms_norm_quant", backend)(x, weight, eps)
        ref = reference.rms_norm_quant(x.cpu(), weight.cpu(), eps)
    else:
        got = dispatch.kernel("add_rms_norm_quant", backend)(x, residual, weight, eps)
        ref = reference.add_rms_norm_quant(x.cpu(), residual.cpu(), weight.cpu(), eps)
    assert len(got) == len(ref)
    q, s, normed = got[:3]
    assert q.dtype == torch.int8 and q.shape == x.shape and q.is_contiguous()
    assert s.dtype == torch.float32 and s.shape == (*x.shape[:-1], 1)
    assert normed.dtype == x.dtype and normed.shape == x.shape and normed.is_contiguous()
    assert_same_codes((q, s), reference.quantize_per_token(normed.cpu()))
    if residual is not None:
        assert got[3].dtype == x.dtype and got[3].shape == x.shape and got[3].is_contiguous()
        assert_exact(got[3], ref[3])
    assert_normed_rows(normed, x if residual is None else ref[3], weight, eps)
    return got


def silu_product(backend: str, gate, up) -> torch.Tensor:
    """The product the kernel quantizes (Triton: its private flag stores it; NaN-filled first)."""
    if backend == "reference":
        return reference.silu_mul(gate, up)
    p = torch.full(gate.shape, float("nan"), dtype=gate.dtype, device=gate.device)
    silu_quant.silu_mul_quant(gate, up, product=p)
    return p


def run_silu(backend: str, gate, up):
    poison_allocator(gate.numel() * 4, gate.device)
    q, s = dispatch.kernel("silu_mul_quant", backend)(gate, up)
    assert q.dtype == torch.int8 and q.shape == gate.shape and q.is_contiguous()
    assert s.dtype == torch.float32 and s.shape == (*gate.shape[:-1], 1)
    p = silu_product(backend, gate, up)
    assert_same_codes((q, s), reference.quantize_per_token(p.cpu()))
    assert_near_reference(p, reference.silu_mul(gate.cpu(), up.cpu()), "product")
    if backend == "triton":
        assert_exact(p, old_silu_product(gate, up))  # what the kernel before the rewrite gave
    return q, s
