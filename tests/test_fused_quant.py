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

Triton runs in its interpreter on the CPU (conftest.py), on CUDA when there is a GPU.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import w8a8
from w8a8 import dispatch, reference
from helpers import (CUDA, FLOAT_DTYPES, assert_exact, assert_same_codes, assert_ulp_close, kernel_params,
                     plant_special_rows, poison_allocator, ulp_distance)

TRITON = dispatch.unavailable_reason("silu_mul_quant", "triton", torch.device("cuda" if CUDA else "cpu")) is None
if TRITON:  # (the kernels' module is imported only where they can run)
    import triton
    import triton.language as tl

    from w8a8.triton import fused_quant

NORM = kernel_params("rms_norm_quant")
SILU = kernel_params("silu_mul_quant")
# One block (K <= 8192: short rows several to a program), partial blocks, the streaming path.
K_VALUES = [1, 7, 16, 17, 127, 128, 129, 4096, 14336]
# The interpreter's speed: few rows where rows are long.
ROWS_FOR_K = {4096: 3, 14336: 2}
EPS = 1e-6

# normed and the SiLU product against the reference, by dtype: (max ulp, the fraction of
# elements allowed to differ at all; with 2 elements of slack for small tensors). The
# mean's summation order, torch.rsqrt and exp are not the kernels' (fused_quant.py): for
# 16-bit dtypes that moves a rare element of the first rounding (n, a) by one ulp, which
# the second (weight * n, a * up) can widen to two; in fp32 nothing rounds the fp32
# difference away (measured in the interpreter: <= 4 ulp).
FUSED_TOL = {torch.bfloat16: (2, 0.001), torch.float16: (2, 0.001), torch.float32: (8, 1.0)}

# numpy, under Triton's interpreter, warns on the Inf / NaN the special rows hold on purpose
pytestmark = [pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")]


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


def assert_near_reference(out: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """Within FUSED_TOL of the reference (NaN exactly where the reference is NaN)."""
    max_ulp, fraction = FUSED_TOL[out.dtype]
    out, ref = out.cpu(), ref.cpu()
    assert_ulp_close(out, ref, max_ulp)
    differ = int((ulp_distance(out.masked_fill(out.isnan(), 0), ref.masked_fill(ref.isnan(), 0)) > 0).sum())
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
    assert_near_reference(normed, ref[2], "normed")
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
    for got in (w8a8.rms_norm_quant(x, weight, EPS), torch.ops.w8a8.rms_norm_quant(x, weight, EPS)):
        expected = dispatch.kernel("rms_norm_quant", default)(x, weight, EPS)
        assert len(got) == 3 and all(torch.equal(a, b) for a, b in zip(got, expected))
    for got in (w8a8.rms_norm_quant(x, weight, EPS, residual=residual),
                torch.ops.w8a8.add_rms_norm_quant(x, residual, weight, EPS)):
        expected = dispatch.kernel("add_rms_norm_quant", default)(x, residual, weight, EPS)
        assert len(got) == 4 and all(torch.equal(a, b) for a, b in zip(got, expected))
    gate, up = gate_up(12, 96, torch.bfloat16, device)
    for got in (w8a8.silu_mul_quant(gate, up), torch.ops.w8a8.silu_mul_quant(gate, up)):
        expected = dispatch.kernel("silu_mul_quant", default)(gate, up)
        assert all(torch.equal(a, b) for a, b in zip(got, expected))
    for backend in ("triton", "reference"):
        if dispatch.unavailable_reason("rms_norm_quant", backend, torch.device(device)) is None:
            got = w8a8.rms_norm_quant(x, weight, EPS, residual=residual, backend=backend)
            assert all(torch.equal(a, b) for a, b in
                       zip(got, dispatch.kernel("add_rms_norm_quant", backend)(x, residual, weight, EPS)))
            assert all(torch.equal(a, b) for a, b in
                       zip(w8a8.silu_mul_quant(gate, up, backend=backend),
                           dispatch.kernel("silu_mul_quant", backend)(gate, up)))


# --- the kernels' device helpers -----------------------------------------------------------------


if TRITON:
    @triton.jit
    def _apply_helpers(v_ptr, bf16_ptr, exp_ptr, N, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(v_ptr + i, mask=i < N)
        tl.store(bf16_ptr + i, fused_quant._round_to(v, tl.bfloat16), mask=i < N)
        tl.store(exp_ptr + i, fused_quant._exp(v), mask=i < N)


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

    v = torch.cat([torch.empty(1 << 16).uniform_(-104, 89), torch.empty(1 << 14).uniform_(-20, 20),
                   torch.tensor([88.5, 88.72, -87.0, -103.0, 0.0, float("inf"), float("-inf")])]).to(device)
    _, exp = run(v)
    exact = torch.exp(v.cpu().double()).float()  # correctly rounded (but for double rounding, ~2**-29)
    assert_ulp_close(exp.cpu(), exact, max_ulp=1 if device == "cpu" else 4)


def test_fused_launch_shapes():
    """The measured rules of quant_configs.fused_config (the kernels' tests run every branch)."""
    from w8a8.triton.quant_configs import PerTokenConfig, fused_config, per_token_config

    assert fused_config(4096, 16) == PerTokenConfig(4096, 1, True, 16)
    assert fused_config(4096, 2048) == PerTokenConfig(4096, 1, True, 8)
    assert fused_config(14336, 64) == PerTokenConfig(16384, 1, True, 32)
    assert fused_config(14336, 2048) == per_token_config(14336)
    assert fused_config(1000, 3) == per_token_config(1000)
