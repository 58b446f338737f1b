"""The fused producer + quantization ops: ``rms_norm_quant``, ``add_rms_norm_quant``,
``silu_mul_quant`` (w8a8/reference.py states their math; w8a8/triton/fused_quant.py how
closely the kernels follow it).

* The reference against an independent unfused computation written as transformers
  writes LlamaRMSNorm / LlamaMLP, then ``quantize_per_token``: bit-identical on the CPU.
* Every kernel against the reference: codes and scales bit-identical to
  ``quantize_per_token`` of the kernel's own normed / product, ``sum`` bit-identical,
  normed and product within ``FUSED_TOL`` of the reference's; odd M, 3-D inputs, K edges
  (one block, a partial block, the streaming path), row-strided inputs (gate / up as the
  halves of one [M, 2F] tensor), every dtype, zero / Inf / NaN rows, M = 0, outputs
  poisoned before the kernels write them.
* The kernels' device helpers: bf16 rounding equal to torch's cast, exp within 1 ulp.
* The SiLU-mul kernel against the one it replaced (frozen below as ``_old_silu``): DT(silu(g))
  and 1 + exp(-g) bit-identical for every bf16 and every fp16 value of g, the product
  bit-identical in every kernel test above; its reciprocal quantizer (``_codes``) equal to
  the IEEE division's codes on adversarial quotients (ties, neighbours of half-integers,
  scales over 180 binades); its launch shapes (chunked tiles, persistent programs, the
  streaming path); the exp reduction's sm_90 FP instructions the old kernel's.

Triton runs in its interpreter on the CPU (conftest.py), on CUDA when there is a GPU.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import w8a8
from w8a8 import dispatch, reference
from helpers import (CUDA, FLOAT_DTYPES, assert_exact, assert_same_codes, assert_ulp_close, kernel_params,
                     plant_special_rows, poison_allocator, ulp_distance)

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None
# The kernels run here (a GPU, or the interpreter); their module and the test kernels below are
# defined wherever Triton is installed (the offline sm_90 compilation needs them without either).
TRITON = triton is not None and dispatch.unavailable_reason(
    "silu_mul_quant", "triton", torch.device("cuda" if CUDA else "cpu")) is None
if triton is not None:
    from w8a8.triton import fused_quant
    from w8a8.triton.quant import _quantize_rows

NORM = kernel_params("rms_norm_quant")
SILU = kernel_params("silu_mul_quant")
# One block (K <= 8192: short rows several to a program), partial blocks, the streaming path.
K_VALUES = [1, 7, 16, 17, 127, 128, 129, 4096, 14336]
# The interpreter's speed: few rows where rows are long.
ROWS_FOR_K = {4096: 3, 14336: 2}
EPS = 1e-6

# normed and the SiLU product against the reference, by dtype: (max ulp, the fraction of
# elements allowed to differ at all, the fraction of one row for normed; with 2 elements of
# slack for small tensors). The mean's summation order, torch.rsqrt and exp are not the
# kernels' (fused_quant.py): for 16-bit dtypes that moves a rare element of the first
# rounding (n, a) by one ulp, which the second (weight * n, a * up) can widen to two; in fp32
# nothing rounds the fp32 difference away (measured in the interpreter: <= 4 ulp). A row's
# mean of squares, summed in another order, moves its 1 / rms for all of its elements at
# once: in the interpreter, one row in 360 of 3 x 4096 bf16 rows (x + residual) had 17
# elements one or two ulp off (0.4%), the others none. So normed is bounded row by row.
FUSED_TOL = {torch.bfloat16: (2, 0.001, 0.01), torch.float16: (2, 0.001, 0.01), torch.float32: (8, 1.0, 1.0)}

# numpy, under Triton's interpreter, warns on the Inf / NaN the special rows hold on purpose
pytestmark = [pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")]


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
        return fused_quant._round_to(tl.math.div_rn(g, 1.0 + _old_exp(-g)), DT)

    @triton.jit
    def _old_product_kernel(g_ptr, u_ptr, p_ptr, F, stride_gr, stride_ur, BLOCK: tl.constexpr):
        DT: tl.constexpr = g_ptr.dtype.element_ty
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < F
        g = tl.load(g_ptr + row * stride_gr + cols, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(u_ptr + row * stride_ur + cols, mask=mask, other=0.0).to(tl.float32)
        p = fused_quant._round_to(_old_silu(g, DT) * u, DT)
        tl.store(p_ptr + row * F + cols, p.to(DT), mask=mask)

    @triton.jit
    def _silu_both_kernel(g_ptr, a_new_ptr, a_old_ptr, d_new_ptr, d_old_ptr, N, BLOCK: tl.constexpr):
        """Per element of g: a = DT(silu(g)) and the denominator 1 + exp(-g), new and old."""
        DT: tl.constexpr = g_ptr.dtype.element_ty
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        g = tl.load(g_ptr + i, mask=i < N).to(tl.float32)
        tl.store(a_new_ptr + i, fused_quant._silu(g, DT), mask=i < N)
        tl.store(a_old_ptr + i, _old_silu(g, DT), mask=i < N)
        tl.store(d_new_ptr + i, 1.0 + fused_quant._exp_neg(g), mask=i < N)
        tl.store(d_old_ptr + i, 1.0 + _old_exp(-g), mask=i < N)

    @triton.jit
    def _new_exp_kernel(g_ptr, e_ptr):
        tl.store(e_ptr, fused_quant._exp_neg(tl.load(g_ptr)))

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


# --- the independent computation (as transformers writes it) ---------------------------------------


def llama_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm.forward."""
    input_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return weight * h.to(input_dtype)


def llama_silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """transformers' LlamaMLP: act_fn(gate_proj(x)) * up_proj(x), in the model dtype."""
    return F.silu(gate) * up


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


def assert_near_reference(out: torch.Tensor, ref: torch.Tensor, what: str, by_row: bool = False) -> None:
    """Within FUSED_TOL of the reference (NaN exactly where the reference is NaN); by_row: the
    elements that may differ counted in each row (FUSED_TOL's row fraction)."""
    max_ulp, fraction, row_fraction = FUSED_TOL[out.dtype]
    out, ref = out.cpu(), ref.cpu()
    assert_ulp_close(out, ref, max_ulp)
    differs = ulp_distance(out.masked_fill(out.isnan(), 0), ref.masked_fill(ref.isnan(), 0)) > 0
    if by_row:
        per_row = differs.reshape(-1, out.shape[-1]).sum(1)
        allowed = max(2, row_fraction * out.shape[-1])
        assert int(per_row.max()) <= allowed, (
            f"{what}: {int(per_row.max())} of a row's {out.shape[-1]} elements differ (at most {allowed:g})")
        return
    differ = int(differs.sum())
    assert differ <= max(2, fraction * out.numel()), f"{what}: {differ} of {out.numel()} elements differ"


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
    assert_near_reference(normed, ref[2], "normed", by_row=True)
    if residual is not None:
        assert got[3].dtype == x.dtype and got[3].shape == x.shape and got[3].is_contiguous()
        assert_exact(got[3], ref[3])
    return got


def silu_product(backend: str, gate, up) -> torch.Tensor:
    """The product the kernel quantizes (Triton: its private flag stores it; NaN-filled first)."""
    if backend == "reference":
        return reference.silu_mul(gate, up)
    p = torch.full(gate.shape, float("nan"), dtype=gate.dtype, device=gate.device)
    fused_quant.silu_mul_quant(gate, up, product=p)
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


# --- the reference is transformers' computation --------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("k", K_VALUES)
def test_reference_is_transformers(dtype, k):
    m = 5
    x = plant_special_rows(rows(m, k, dtype, "cpu"))
    weight, residual = norm_weight(k, dtype, "cpu"), rows(m, k, dtype, "cpu")
    normed = llama_rms_norm(x, weight, EPS)
    codes, scales, got = reference.rms_norm_quant(x, weight, EPS)
    assert_exact(got, normed)
    assert_same_codes((codes, scales), reference.quantize_per_token(normed))

    s = x + residual  # transformers: hidden_states = residual + hidden_states, in the model dtype
    codes, scales, got, total = reference.add_rms_norm_quant(x, residual, weight, 1e-5)
    assert_exact(total, s)
    assert_exact(got, llama_rms_norm(s, weight, 1e-5))
    assert_same_codes((codes, scales), reference.quantize_per_token(llama_rms_norm(s, weight, 1e-5)))

    gate, up = gate_up(m, k, dtype, "cpu")
    gate = plant_special_rows(gate)
    p = llama_silu_mul(gate, up)
    assert_exact(reference.silu_mul(gate, up), p)
    assert_same_codes(reference.silu_mul_quant(gate, up), reference.quantize_per_token(p))


def test_reference_3d_and_permuted_inputs_give_contiguous_outputs():
    x = rows(12, 40, torch.bfloat16, "cpu").view(3, 4, 40).transpose(0, 1)  # leading dims do not merge
    weight = norm_weight(40, torch.bfloat16, "cpu")
    codes, scales, normed, total = reference.add_rms_norm_quant(x, x, weight, EPS)
    assert all(t.is_contiguous() for t in (codes, scales, normed, total)) and scales.shape == (4, 3, 1)
    assert_exact(normed, llama_rms_norm(x + x, weight, EPS))
    gate, up = gate_up(12, 40, torch.float16, "cpu")
    codes, scales = reference.silu_mul_quant(gate.view(3, 4, 40), up.reshape(3, 4, 40))
    assert codes.is_contiguous() and scales.shape == (3, 4, 1)


# --- every kernel against the reference -------------------------------------------------------------


@pytest.mark.parametrize("device,backend", NORM)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("k", K_VALUES)
def test_norm_k_values(device, backend, dtype, k):
    m = ROWS_FOR_K.get(k, 9)
    x, weight = rows(m, k, dtype, device), norm_weight(k, dtype, device)
    run_norm(backend, x, weight, EPS)
    run_norm(backend, x, weight, EPS, residual=rows(m, k, dtype, device))


@pytest.mark.parametrize("device,backend", SILU)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("k", K_VALUES)
def test_silu_k_values(device, backend, dtype, k):
    run_silu(backend, *gate_up(ROWS_FOR_K.get(k, 9), k, dtype, device))


@pytest.mark.parametrize("device,backend", NORM)
@pytest.mark.parametrize("m", [1, 3, 17, 33, 100])
def test_odd_m(device, backend, m):
    k = 64
    x, weight = plant_special_rows(rows(m, k, torch.bfloat16, device)), norm_weight(k, torch.bfloat16, device)
    run_norm(backend, x, weight, EPS)
    run_norm(backend, x, weight, EPS, residual=rows(m, k, torch.bfloat16, device))
    gate, up = gate_up(m, k, torch.bfloat16, device)
    run_silu(backend, plant_special_rows(gate), up)


@pytest.mark.parametrize("device,backend", NORM)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_3d_and_strided_inputs(device, backend, dtype):
    k = 40
    base = rows(3 * 8, 2 * k, dtype, device).view(3, 8, 2 * k)
    weight = norm_weight(k, dtype, device)
    run_norm(backend, base[..., :k], weight, EPS)  # 3-D, row stride 2K
    run_norm(backend, base[..., 3:3 + k], weight, EPS, residual=base[:, :, k:].clone())  # misaligned start
    broadcast = base[:, 1:2, :k].expand(3, 8, k).transpose(0, 1)  # a stride-0 residual
    run_norm(backend, base.transpose(0, 1)[..., :k], weight, EPS, residual=broadcast)  # rows that do not merge
    run_silu(backend, base[..., :k], base[..., k:])  # the halves of a [3, 8, 2F] tensor
    run_silu(backend, base.transpose(0, 1)[:4, :, 5:5 + k], base[:, 1::2, k:].transpose(0, 1))
    run_silu(backend, base[..., 7:8], base[..., 9:10])  # F = 1


@pytest.mark.parametrize("device,backend", NORM)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("k", [100, 8200])  # one block; streamed, with a partial last tile
def test_special_rows(device, backend, dtype, k):
    """Zero, NaN, +Inf, -Inf, Inf-and-NaN rows (in x, in the residual, in gate and in up), a
    row whose squares overflow fp32, and eps = 0 on a zero row (0 * Inf: NaN, codes 0)."""
    m = 8 if k == 100 else 6
    big = torch.finfo(dtype).max
    x = plant_special_rows(rows(m, k, dtype, device))
    x[5] = big
    x[5, 1::2] = -big
    weight = norm_weight(k, dtype, device)
    q, s, normed = run_norm(backend, x, weight, EPS)
    assert bool((q[:5] == 0).all()) and float(s[0]) == 0.0 and bool(s[1:5].isnan().all())
    if big * big > torch.finfo(torch.float32).max:
        assert bool((q[5] == 0).all()) and float(s[5]) == 0.0, "squares overflow: rstd = 0, normed 0"
    q, s, normed = run_norm(backend, x, weight, 0.0)
    assert bool(normed[0].isnan().all()) and bool(s[0].isnan()), "a zero row with eps = 0 is 0 * Inf"
    residual = plant_special_rows(rows(m, k, dtype, device)).flip(0)  # specials in the last rows
    run_norm(backend, x, weight, EPS, residual=residual)
    gate, up = gate_up(m, k, dtype, device)
    run_silu(backend, plant_special_rows(gate), up)
    run_silu(backend, gate, plant_special_rows(up))
    gate = gate.clone()
    gate[0, :4] = torch.tensor([-200.0, -90.0, 60.0, -60.0])  # exp's extremes (silu -> -0 / the identity)
    run_silu(backend, gate, up)


@pytest.mark.parametrize("device,backend", NORM)
def test_empty(device, backend):
    for shape in ((0, 64), (2, 0, 64)):
        x = torch.empty(shape, dtype=torch.bfloat16, device=device)
        weight = norm_weight(64, torch.bfloat16, device)
        q, s, normed, total = dispatch.kernel("add_rms_norm_quant", backend)(x, x, weight, EPS)
        assert q.shape == shape and s.shape == (*shape[:-1], 1) and normed.shape == shape and total.shape == shape
        q, s = dispatch.kernel("silu_mul_quant", backend)(x, x)
        assert q.shape == shape and q.dtype == torch.int8 and s.shape == (*shape[:-1], 1)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("k", [17, 8200])
def test_triton_writes_every_output_element(device, k, monkeypatch):
    """The kernels' outputs poisoned where they are allocated, twice with different values
    (no int8 value is a safe sentinel); every element must come out as the reference's."""
    if dispatch.unavailable_reason("rms_norm_quant", "triton", torch.device(device)) is not None:
        pytest.skip(f"Triton is not available on {device} here")
    allocate = fused_quant._outputs
    m = 5 if k == 17 else 2
    x, weight, residual = rows(m, k, torch.float16, device), norm_weight(k, torch.float16, device), rows(m, k, torch.float16, device)
    gate, up = gate_up(m, k, torch.float16, device)
    for code, scale, value in ((77, -1.0, float("nan")), (-77, -2.0, 30000.0)):
        def poisoned(x, n_float, code=code, scale=scale, value=value):
            q, s, *floats = allocate(x, n_float)
            return (q.fill_(code), s.fill_(scale), *(t.fill_(value) for t in floats))

        monkeypatch.setattr(fused_quant, "_outputs", poisoned)
        run_norm("triton", x, weight, EPS)
        run_norm("triton", x, weight, EPS, residual=residual)
        run_silu("triton", gate, up)


# --- the public ops -------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_public_ops(device):
    """The wrappers and the ops give the default kernel's results (the reference on the CPU)."""
    x = rows(12, 96, torch.bfloat16, device).view(4, 3, 96)
    weight, residual = norm_weight(96, torch.bfloat16, device), rows(12, 96, torch.bfloat16, device).view(4, 3, 96)
    default = "reference" if device == "cpu" else dispatch.choose("rms_norm_quant", torch.device(device))
    for got in (w8a8.ops.rms_norm_quant(x, weight, EPS), torch.ops.w8a8.rms_norm_quant(x, weight, EPS)):
        expected = dispatch.kernel("rms_norm_quant", default)(x, weight, EPS)
        assert len(got) == 3 and all(torch.equal(a, b) for a, b in zip(got, expected))
    for got in (w8a8.ops.rms_norm_quant(x, weight, EPS, residual=residual),
                torch.ops.w8a8.add_rms_norm_quant(x, residual, weight, EPS)):
        expected = dispatch.kernel("add_rms_norm_quant", default)(x, residual, weight, EPS)
        assert len(got) == 4 and all(torch.equal(a, b) for a, b in zip(got, expected))
    gate, up = gate_up(12, 96, torch.bfloat16, device)
    for got in (w8a8.ops.silu_mul_quant(gate, up), torch.ops.w8a8.silu_mul_quant(gate, up)):
        expected = dispatch.kernel("silu_mul_quant", default)(gate, up)
        assert all(torch.equal(a, b) for a, b in zip(got, expected))
    for backend in ("triton", "reference"):
        if dispatch.unavailable_reason("rms_norm_quant", backend, torch.device(device)) is None:
            got = w8a8.ops.rms_norm_quant(x, weight, EPS, residual=residual, backend=backend)
            assert all(torch.equal(a, b) for a, b in
                       zip(got, dispatch.kernel("add_rms_norm_quant", backend)(x, residual, weight, EPS)))
            assert all(torch.equal(a, b) for a, b in
                       zip(w8a8.ops.silu_mul_quant(gate, up, backend=backend),
                           dispatch.kernel("silu_mul_quant", backend)(gate, up)))


# --- the kernels' device helpers -----------------------------------------------------------------


if TRITON:
    @triton.jit
    def _apply_helpers(v_ptr, bf16_ptr, exp_ptr, N, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(v_ptr + i, mask=i < N)
        tl.store(bf16_ptr + i, fused_quant._round_to(v, tl.bfloat16), mask=i < N)
        tl.store(exp_ptr + i, fused_quant._exp_neg(-v), mask=i < N)  # exp(v)


@pytest.mark.skipif(not TRITON, reason="Triton is not available here")
def test_triton_helpers_round_bf16_like_torch_and_exp_within_an_ulp():
    device = "cuda" if CUDA else "cpu"

    def run(v):
        bf16, exp = torch.empty_like(v), torch.empty_like(v)
        _apply_helpers[(triton.cdiv(v.numel(), 16384),)](v, bf16, exp, v.numel(), BLOCK=16384)
        return bf16, exp

    edges = [0, -2**31, 0x7F800000, 0x7F7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0x00008000, 0x00018000, 0x00007FFF,
             0x3F808000, 0x3F818000, 0x7FC00000, 0x7FFFFFFF, -0x00800000, 1]  # ties, overflow, subnormals, NaN
    bits = torch.cat([torch.tensor(edges), torch.randint(-2**31, 2**31, (1 << 16,))]).to(torch.int32)
    v = bits.view(torch.float32).to(device)
    bf16, _ = run(v)
    expected = v.cpu().to(torch.bfloat16).float()
    assert torch.equal(bf16.cpu().isnan(), expected.isnan())
    assert torch.equal(bf16.cpu().nan_to_num(0).view(torch.int32), expected.nan_to_num(0).view(torch.int32))

    v = torch.cat([torch.empty(1 << 16).uniform_(-80, 89), torch.empty(1 << 14).uniform_(-20, 20),
                   torch.tensor([88.5, 88.72, 88.7228, 89.0, -80.0, -79.9, 0.0, float("inf")])]).to(device)
    _, exp = run(v)
    exact = torch.exp(v.cpu().double()).float()  # correctly rounded (but for double rounding, ~2**-29)
    assert_ulp_close(exp.cpu(), exact, max_ulp=1 if device == "cpu" else 4)
    # Below -80 the argument is clamped: exp(-80) (< 2**-115), so that 1 + exp(v) is 1 all the same.
    _, exp = run(torch.tensor([-80.0, -80.5, -104.0, -1e30, float("-inf")], device=device))
    assert bool((exp == exp[0]).all()) and bool((1.0 + exp == 1.0).all()) and 0 < float(exp[0]) < 2.0**-115


def test_fused_launch_shapes():
    """The measured rules of quant_configs.fused_config (the kernels' tests run every branch)."""
    from w8a8.triton import quant_configs as qc
    from w8a8.triton.quant_configs import PerTokenConfig, fused_config, per_token_config

    assert fused_config(4096, 16) == PerTokenConfig(4096, 1, True, 16)
    assert fused_config(4096, 2048) == PerTokenConfig(4096, 1, True, 8)
    assert fused_config(14336, 64) == PerTokenConfig(16384, 1, True, 32)
    assert fused_config(14336, 2048) == per_token_config(14336)
    assert fused_config(1000, 3) == per_token_config(1000)
    # SiLU-mul: the row in registers at every M up to FUSED_SILU_MAX_SINGLE_PASS_K, in tiles of
    # a multiple of a power of two (no masked waste at Llama widths), streamed above.
    few, many = qc.FUSED_SILU_FEW_ROWS_WARPS, qc.FUSED_SILU_WARPS
    assert fused_config(14336, 64, op="silu_mul") == PerTokenConfig(14336, 1, True, few)
    assert fused_config(14336, 8192, op="silu_mul") == PerTokenConfig(14336, 1, True, many)
    assert fused_config(11008, 8192, op="silu_mul") == PerTokenConfig(11264, 1, True, many)  # 11 x 1024
    for k in (4096, 8192, 16384):
        assert fused_config(k, 1, op="silu_mul") == PerTokenConfig(k, 1, True, few)
    assert fused_config(14337, 300, op="silu_mul") == PerTokenConfig(15360, 1, True, many)  # 15 x 1024
    assert fused_config(16385, 1, op="silu_mul").single_pass is False
    assert fused_config(1000, 3, op="silu_mul") == per_token_config(1000)
    for k in (2048, 5000, 11008, 14336, 14337, 16384):
        block = qc.silu_tile_width(k)
        chunk = block & -block
        assert block >= k and block % qc.FUSED_SILU_MIN_GRANULE == 0 and chunk >= qc.FUSED_SILU_MIN_GRANULE
        assert block - k < chunk  # only the last chunk is partly masked


# --- the SiLU-mul kernel against the one it replaced --------------------------------------------------


@pytest.mark.skipif(not TRITON, reason="Triton is not available here")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_silu_every_value_matches_the_previous_kernel(dtype):
    """Every 16-bit value of gate: a = DT(silu(g)) and its denominator 1 + exp(-g), both bit
    for bit those of the kernel before the rewrite (exp's 2**n applied to the exponent field
    instead of two multiplications, the argument clamped at -80 instead of -104); against
    torch's silu (the reference) within one ulp in at most FUSED_TOL's fraction of them (exp
    is not correctly rounded on either side; in the interpreter none differ)."""
    device = "cuda" if CUDA else "cpu"
    g = every_value(dtype, device)
    n = g.numel()
    a_new, a_old, d_new, d_old = (torch.empty(n, device=device) for _ in range(4))
    _silu_both_kernel[(triton.cdiv(n, 8192),)](g, a_new, a_old, d_new, d_old, n, BLOCK=8192)
    assert_exact(d_new, d_old)
    assert_exact(a_new, a_old)
    a = a_new.cpu().to(dtype)
    assert_exact(a.float(), a_new.cpu())  # DT values: the cast is exact
    print(f"{dtype}: a and 1 + exp(-g) bit-identical to the previous kernel's for all {n} values")
    ref = torch.nn.functional.silu(g.cpu().float()).to(dtype)  # reference.silu_mul's a
    if device == "cpu" and dtype == torch.bfloat16:
        # Triton's interpreter widens the 254 subnormal bf16 values to wrong fp32 values (its
        # bf16 -> fp32 conversion; the GPU's is a shift): compare the rest.
        normal = (g.cpu().float().abs() >= torch.finfo(torch.float32).tiny) | (g.cpu() == 0) | ~g.cpu().isfinite()
        a, ref = a[normal], ref[normal]
    differ = int((ulp_distance(a.masked_fill(a.isnan(), 0), ref.masked_fill(ref.isnan(), 0)) > 0).sum())
    assert_ulp_close(a, ref, max_ulp=1)
    print(f"{dtype}: {differ} of {a.numel()} values differ from torch's silu by an ulp")
    assert differ <= FUSED_TOL[dtype][1] * n, f"{differ} of {n} values of {dtype} differ from torch's silu by an ulp"


if TRITON:
    @triton.jit
    def _codes_kernel(x_ptr, s_ptr, fast_ptr, slow_ptr, N, BLOCK: tl.constexpr):
        """Each x its own row with its own scale: the reciprocal path's codes and the IEEE division's."""
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + i, mask=i < N, other=0.0)[:, None]
        s = tl.load(s_ptr + i, mask=i < N, other=1.0)
        recip = tl.math.div_rn(tl.full([BLOCK], 1.0, tl.float32), s)
        tl.store(fast_ptr + i[:, None], fused_quant._codes(x, -s, recip), mask=(i < N)[:, None])
        tl.store(slow_ptr + i[:, None], _quantize_rows(x, s, s > 0), mask=(i < N)[:, None])


@pytest.mark.skipif(not TRITON, reason="Triton is not available here")
def test_reciprocal_codes_equal_the_divisions():
    """``_codes`` (x * div_rn(1, scale) and two FMA corrections) against rint(div_rn(x, scale)):
    scales RN(amax / 127) over 180 binades down to the path's 2**-60, x within +-amax: random,
    RN(scale (k + 1/2)) (quotients at and beside ties) and 1..3 ulp from them, +-amax itself."""
    device = "cuda" if CUDA else "cpu"
    n = 1 << 19
    amax = torch.exp2(torch.empty(n, dtype=torch.float64).uniform_(-52, 127)).float()
    scale = amax / torch.full_like(amax, 127.0)
    keep = scale >= 2.0**-60
    amax, scale = amax[keep], scale[keep]
    m = amax.numel()
    x = (scale.double() * torch.empty(m, dtype=torch.float64).uniform_(-127, 127)).float()
    ties = (scale.double() * (torch.randint(-127, 127, (m,)).double() + 0.5)).float()
    steps = torch.randint(-3, 4, (m,))
    beside = ties.clone()
    for i in range(3):
        beside = torch.where(steps > i, torch.nextafter(beside, torch.tensor(float("inf"))), beside)
        beside = torch.where(-steps > i, torch.nextafter(beside, torch.tensor(float("-inf"))), beside)
    kind = torch.randint(0, 4, (m,))
    x = torch.where(kind == 1, ties, torch.where(kind == 2, beside, x))
    x = torch.where(kind == 3, amax * (torch.randint(0, 2, (m,)) * 2 - 1).float(), x)
    x = torch.minimum(torch.maximum(x, -amax), amax)
    quotient = x.double() / scale.double()
    assert int((quotient - quotient.floor() == 0.5).sum()) > 1000  # exact ties are there
    fast, slow = (torch.empty(m, dtype=torch.int8, device=device) for _ in range(2))
    x_d, s_d = x.to(device), scale.to(device)
    _codes_kernel[(triton.cdiv(m, 8192),)](x_d, s_d, fast, slow, m, BLOCK=8192)
    expected = torch.round(x / scale).clamp(-128, 127).to(torch.int8)  # IEEE division on the CPU
    assert torch.equal(slow.cpu(), expected)
    assert torch.equal(fast.cpu(), expected), f"{int((fast.cpu() != expected).sum())} codes differ"


def run_silu_shape(gate, up, block_k, single_pass, num_warps, programs):
    """The kernel launched with a given shape and number of programs; returns (codes, scales, p)."""
    f = gate.shape[-1]
    g2, u2 = gate.reshape(-1, f), up.reshape(-1, f)
    q = torch.full(g2.shape, 77, dtype=torch.int8, device=gate.device)
    s = torch.full((g2.shape[0], 1), -1.0, device=gate.device)
    p = torch.full(g2.shape, float("nan"), dtype=gate.dtype, device=gate.device)
    fused_quant._silu_mul_quant_kernel[(programs,)](
        g2, u2, q, s, p, g2.shape[0], f, g2.stride(0), u2.stride(0), ROWS=1, BLOCK_K=block_k,
        SINGLE_PASS=single_pass, STORE_PRODUCT=True, num_warps=num_warps)
    return q, s, p


@pytest.mark.skipif(not TRITON, reason="Triton is not available here")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("f,shapes", [
    (14336, [(14336, True), (16384, True), (2048, False), (6144, False)]),  # 7 chunks, pow2, streamed, 3 x 2048
    (11008, [(11264, True), (12288, True), (3072, False)]),  # 11 chunks of 1024 (odd: one unpacked), 6 x 2048
    (4096, [(4096, True), (6144, True), (1024, False)]),
    (1031, [(2048, True), (1536, True), (512, False)]),  # odd F: the last chunk masked
])
def test_silu_launch_shapes(dtype, f, shapes):
    """Every launch shape gives the default's outputs and the previous kernel's product, with
    programs looping over several rows each (1, 2, 3 programs for 5 rows: special rows, odd
    counts per program) or one row each."""
    device = "cuda" if CUDA else "cpu"
    m = 5
    gate, up = gate_up(m, f, dtype, device)
    gate = plant_special_rows(gate)
    gate[1] = gate[1].nan_to_num(0) * 1e-30  # a tiny row: scale < 2**-60, the IEEE-division branch
    expected = silu_product("triton", gate, up)
    assert_exact(expected, old_silu_product(gate, up))
    codes, scales = reference.quantize_per_token(expected.cpu())
    for block_k, single_pass in shapes:
        for programs in (1, 2, 3, m):
            q, s, p = run_silu_shape(gate, up, block_k, single_pass, 4, programs)
            assert_exact(p, expected)
            assert_same_codes((q, s), (codes, scales))


@pytest.mark.skipif(not TRITON, reason="Triton is not available here")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("m,f", [(1, 4096), (3, 14336), (7, 11008), (17, 2048), (100, 64), (4, 16385), (3, 14337)])
def test_silu_rows_per_program(dtype, m, f):
    """The op at odd row counts and widths, with fewer programs than row groups (the CPU's
    stand-in SM count is 3): every row written, codes and product as above."""
    device = "cuda" if CUDA else "cpu"
    gate, up = gate_up(m, f, dtype, device)
    if m >= 5:
        gate = plant_special_rows(gate)
    run_silu("triton", gate, up)


# Offline sm_90 compilation (no GPU needed), as tests/test_triton_kernels.py does it.
_EXP_PTX_SCRIPT = textwrap.dedent(
    r"""
    import json, re
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    import test_fused_quant as t

    def ops(fn):
        src = ASTSource(fn=fn, signature=dict(g_ptr="*fp32", e_ptr="*fp32"), constexprs={})
        ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=1)).asm["ptx"]
        seq = [re.sub(r"%\w+", "%r", l.strip()) for l in ptx.splitlines()
               if re.match(r"\s*(neg|sub|add|mul|fma|min|max|ex2)[.a-z0-9]*\s", l) and ".f32" in l]
        return seq[:seq.index(next(l for l in seq if l.startswith("ex2"))) + 1]

    print(json.dumps(dict(new=ops(t._new_exp_kernel), old=ops(t._old_exp_kernel))))
    """
)


@pytest.mark.skipif(triton is None, reason="Triton is not installed here")
def test_sm90_exp_reduction_is_the_previous_kernels():
    """The FP instructions of exp's reduction up to ex2, compiled for sm_90: the previous
    kernel's on v = -g, FMA contraction included (t = fma(v, log2 e, 1.5 * 2**23) before the
    rint subtraction, two FMAs for r), written on g: the constants' signs flipped, no
    negation of g, the clamp [-89, 80] on g for [-104, 89] on v. Rounding to nearest is odd,
    so every value is the old one or its negation, which the next instruction's flipped
    constant turns back: ex2's argument is the old one. On the GPU that and the exhaustive
    test make the product bit-identical to the previous kernel's."""
    try:
        from triton.backends.compiler import GPUTarget  # noqa: F401
        import triton.backends.nvidia  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"this triton has no NVIDIA backend to compile with ({exc})")
    here = Path(__file__).resolve().parent  # this module (the script imports it), tests/ (helpers), the repository
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(here.parents[1]), str(here.parent), str(here)]
                                        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    run = subprocess.run([sys.executable, "-c", _EXP_PTX_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, f"offline sm_90 compilation failed:\n{run.stderr[-4000:]}"
    seqs = json.loads(run.stdout.splitlines()[-1])
    new, old = ([" ".join(line.split()) for line in seqs[k]] for k in ("new", "old"))
    # -log2 e, ln2 hi, ln2 lo against the old signs
    flipped = {"0fBFB8AA3B": "0f3FB8AA3B", "0f3F317200": "0fBF317200", "0f35BFBE8E": "0fB5BFBE8E"}

    def flip(line):
        for a, b in flipped.items():
            line = line.replace(a, b)
        return line

    assert new[:2] == ["min.f32 %r, %r, 0f42A00000;", "max.f32 %r, %r, 0fC2B20000;"], seqs  # 80, -89: no negation
    assert [flip(line) for line in new[2:]] == old[-6:], seqs
    assert old[-6] == "fma.rn.f32 %r, %r, 0f3FB8AA3B, 0f4B400000;" and old[-1].startswith("ex2.approx.ftz.f32"), seqs
