"""The fused producer + quantization ops: ``rms_norm_quant``, ``add_rms_norm_quant``,
``silu_mul_quant`` (w8a8/reference.py states their math; w8a8/triton/fused_common.py how
closely the kernels follow it).

* The reference against an independent unfused computation written as transformers
  writes LlamaRMSNorm / LlamaMLP, then ``quantize_per_token``: bit-identical on the CPU.
* Every kernel against the reference: codes and scales bit-identical to
  ``quantize_per_token`` of the kernel's own normed / product, ``sum`` bit-identical,
  each row of normed the reference's formula at a 1 / rms within ``RSTD_ULPS`` of the
  reference's, the product within ``FUSED_TOL`` of the reference's; odd M, 3-D inputs, K edges
  (one block, a partial block, the streaming path), row-strided inputs (gate / up as the
  halves of one [M, 2F] tensor), every dtype, zero / Inf / NaN rows, M = 0, outputs
  poisoned before the kernels write them.
* The SiLU-mul product bit-identical to the kernel it replaced (tests/fused_helpers.py) in
  every kernel test above; the measured launch-shape rules.
* The kernels' internals: tests/kernels/test_fused_quant_kernels.py.

Triton runs in its interpreter on the CPU (conftest.py), on CUDA when there is a GPU.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import w8a8
from w8a8 import dispatch, reference
from helpers import (CUDA, EVERY_VALUE_EXPONENTS, FLOAT_DTYPES, assert_exact, assert_same_codes, every_value_rows,
                     kernel_params, plant_special_rows)
from fused_helpers import EPS, TRITON, gate_up, norm_weight, rows, run_norm, run_silu, silu_product

if TRITON:
    from w8a8.triton import norm_quant, silu_quant

NORM = kernel_params("rms_norm_quant")
SILU = kernel_params("silu_mul_quant")
# One block (K <= 8192: short rows several to a program), partial blocks, the streaming path.
K_VALUES = [1, 7, 16, 17, 127, 128, 129, 4096, 14336]
# The interpreter's speed: few rows where rows are long.
ROWS_FOR_K = {4096: 3, 14336: 2}

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


@pytest.mark.parametrize("device,backend", SILU)
def test_silu_products_below_the_smallest_normal(device, backend):
    """SiLU of a gate near -88 times a small up lands below bf16's smallest normal (2**-126): the
    product is written as the reference rounds it (a random draw found Triton's interpreter
    writing -9.28e-39 as -6.80e-39)."""
    gate = torch.tensor([[-88.5, -88.0, -87.0, -86.0, 1.0, -2.0, 3.0, 0.5]], dtype=torch.bfloat16, device=device)
    up = torch.tensor([[0.028564453125, 0.01, 0.003, 0.001, 1.0, 1.0, 1.0, 1.0]], dtype=torch.bfloat16, device=device)
    assert (reference.silu_mul(gate.cpu(), up.cpu())[0, :4].abs() < 2.0**-126).all()
    run_silu(backend, gate, up)


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


# Every 16-bit value under each significand as the row max: on the GPU at every exponent of
# test_quantize's every-value test, in the interpreter (slow, and it mishandles subnormal bf16
# rows) 8 maxima of exponent 0.
def every_value_targets(device, dtype) -> torch.Tensor:
    if device == "cuda":
        return every_value_rows(dtype, EVERY_VALUE_EXPONENTS[dtype])
    targets = every_value_rows(dtype, (0,))
    return targets[::targets.shape[0] // 8]


@pytest.mark.parametrize("device,backend", [p for p in NORM if p.values[1] != "reference"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_norm_codes_of_every_16bit_value_under_every_row_max(device, backend, dtype):
    """normed = weight exactly (x all ones, eps = 0: 1 / rms = 1), so a weight per call puts
    every_value_targets through the norm kernel's quantizer (bf16: rows held in registers; fp16:
    rows of over 16384 values, streamed), codes and scales against quantize_per_token of normed."""
    targets = every_value_targets(device, dtype).to(device)
    ones = torch.ones(1, targets.shape[1], dtype=dtype, device=device)
    out = [dispatch.kernel("rms_norm_quant", backend)(ones, weight, 0.0) for weight in targets]
    q, s, normed = (torch.cat([o[i] for o in out]) for i in range(3))
    assert_exact(normed, targets)
    assert_same_codes((q, s), reference.quantize_per_token(targets.cpu()))


@pytest.mark.parametrize("device,backend", [p for p in SILU if p.values[1] != "reference"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_silu_codes_of_every_16bit_value_under_every_row_max(device, backend, dtype):
    """gate = 32 (silu(32) = 32 in fp32) and up = targets / 32: the product is every_value_targets
    wherever targets / 32 is a value of the type (at least every row whose max is 2^-100 or more in
    bf16, 1 or more in fp16: no value of theirs reaches the subnormals), through the SiLU kernel's
    quantizer (bf16: rows held in registers; fp16: rows of over 16384 values, streamed); codes and
    scales against quantize_per_token of the kernel's own product."""
    targets = every_value_targets(device, dtype)
    up = (targets.float() / 32).to(dtype)
    exact = (up.float() * 32 == targets.float()).all(-1)
    assert bool(exact[targets.float().amax(-1) >= (1.0 if dtype == torch.float16 else 2.0**-100)].all())
    gate, up = torch.full_like(up, 32.0).to(device), up.to(device)
    q, s = dispatch.kernel("silu_mul_quant", backend)(gate, up)
    product = silu_product(backend, gate, up).cpu()
    assert_exact(product[exact], targets[exact])
    assert_same_codes((q, s), reference.quantize_per_token(product))


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
    allocate = norm_quant._outputs  # (silu_quant's is the same function, fused_common._outputs)
    m = 5 if k == 17 else 2
    x, weight, residual = rows(m, k, torch.float16, device), norm_weight(k, torch.float16, device), rows(m, k, torch.float16, device)
    gate, up = gate_up(m, k, torch.float16, device)
    for code, scale, value in ((77, -1.0, float("nan")), (-77, -2.0, 30000.0)):
        def poisoned(x, n_float, code=code, scale=scale, value=value):
            q, s, *floats = allocate(x, n_float)
            return (q.fill_(code), s.fill_(scale), *(t.fill_(value) for t in floats))

        for module in (norm_quant, silu_quant):
            monkeypatch.setattr(module, "_outputs", poisoned)
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
