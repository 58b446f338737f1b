"""Every activation quantizer (triton, cuda, reference) against the exact math, bit for
bit: codes and fp32 scales (NaN where the reference is NaN), per token and static, odd
K, leading dims, strided and misaligned views, special rows (zero, NaN, +-Inf), exact .5
ties (half to even), extreme magnitudes, zero points, degenerate static scales, empty
inputs, outputs poisoned; CUDA-graph capture on a GPU. Kernel-specific configs:
test_triton_kernels.py."""
import pytest
import torch

import w8a8
from w8a8 import dispatch, reference
from helpers import (EVERY_VALUE_EXPONENTS, FLOAT_DTYPES, CUDA, SIGNIFICAND_BITS, assert_same_codes, capture_graph,
                     every_16bit_value, every_value_rows, kernel_params, plant_special_rows, poison_allocator,
                     rows_with_spread)

PER_TOKEN = kernel_params("quantize_per_token")
STATIC = kernel_params("quantize_static")
# On the GPU: the CUDA quantizer's launch paths at 12 rows (1 or 2 warps per row up to 256
# vectors, then a block per row in registers, 2 to 8 vectors per thread up to 4096, two
# passes above; odd K takes scalar loads; more rows: test_per_token_llm_shapes). In the
# interpreter: a few K that cover one, partial and several blocks.
K_VALUES = ([1, 7, 16, 100, 512, 1000, 1024, 1032, 4096, 8192, 8200, 14336, 16384, 16392, 20000] if CUDA
            else [1, 7, 100, 1000])

# numpy, under Triton's interpreter, warns on Inf * 0 and NaN compares: the NaNs are the point
pytestmark = [pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")]


def per_token(backend, x):
    poison_allocator(x.numel() * 4, x.device)
    got = dispatch.kernel("quantize_per_token", backend)(x)
    assert got[0].is_contiguous() and got[0].shape == x.shape and got[1].shape == (*x.shape[:-1], 1)
    assert_same_codes(got, reference.quantize_per_token(x.cpu()))
    return got


def static(backend, x, scale, zp=None):
    poison_allocator(x.numel(), x.device)
    q = dispatch.kernel("quantize_static", backend)(x, scale, zp)
    expected = reference.quantize_static(x.cpu(), scale.cpu(), None if zp is None else zp.cpu())
    assert q.dtype == torch.int8 and q.shape == x.shape
    assert backend == "reference" or q.is_contiguous()  # the reference: test_static_output_is_contiguous
    assert torch.equal(q.cpu(), expected), f"{int((q.cpu() != expected).sum())} of {q.numel()} codes differ"
    return q


# --- per token ------------------------------------------------------------------------------------


@pytest.mark.parametrize("device,backend", PER_TOKEN)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("k", K_VALUES)
def test_per_token_special_rows(device, backend, dtype, k):
    x = plant_special_rows(rows_with_spread(12, k, dtype, device))
    q, s = per_token(backend, x)
    assert bool((q[:5] == 0).all()), "zero and non-finite rows give q = 0"
    assert float(s[0]) == 0.0, "an all-zero row gives scale 0"
    assert bool(s[1:5].isnan().all()), "a row holding NaN or Inf gives scale NaN"
    assert bool(s[5:].isfinite().all()) and bool((s[5:] > 0).all())
    assert int(q.min()) >= -127, "symmetric scales never produce -128"
    per_token(backend, x.view(2, 2, 3, k))  # leading dims


@pytest.mark.parametrize("device,backend", PER_TOKEN)
@pytest.mark.parametrize("m", [1, 3, 17, 33, 100])
def test_per_token_odd_m(device, backend, m):
    per_token(backend, plant_special_rows(rows_with_spread(m, 64, torch.bfloat16, device)))


@pytest.mark.parametrize("device,backend", PER_TOKEN)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_per_token_exact_ties_round_half_to_even(device, backend, dtype):
    """x = (j + 0.5) * s with s a power of two and one element 127 * s: scale == s exactly and
    x / scale lands on every half integer in (-127, 127)."""
    halves = torch.arange(-127, 127, device=device).float() + 0.5
    s = torch.exp2(torch.randint(-20, 10, (6, 1), device=device).float())
    body = halves[torch.randperm(halves.numel(), device=device)] * s
    sign = torch.where(torch.rand(6, 1, device=device) < 0.5, -1.0, 1.0)
    x = torch.cat([body, 127 * s * sign], dim=1).to(dtype)  # all values exact in bf16 (<= 8 bits)
    assert torch.equal(reference.quantize_per_token(x.cpu())[1], s.cpu()), "the construction gives scale == s"
    per_token(backend, x)


@pytest.mark.parametrize("device,backend", PER_TOKEN)
@pytest.mark.parametrize("m,k", [(6, 1000)] + ([(40, 4096), (300, 4096), (130, 14336), (3, 40000)] if CUDA else []))
def test_per_token_near_ties(device, backend, m, k):
    """fp32 rows with scales over 60 binades, half of them with 12-bit mantissas (exact ties
    exist) and half with full ones, holding RN(scale (j + 1/2)) (quotients at and beside ties),
    1..3 ulp from those, random values and +-amax itself: where a kernel rounds a reciprocal
    product instead of dividing, these are the values it must send through the division (the
    CUDA kernel's shapes by M and K)."""
    short = torch.randint(2048, 4096, (m, 1)).double() / 2048
    mantissa = torch.where(torch.arange(m).view(m, 1) % 2 == 0, short, 1 + torch.rand(m, 1).double())
    amax = (mantissa * torch.exp2(torch.randint(-30, 30, (m, 1)).double()) * 127).float()
    scale = amax / 127.0  # the reference's scale: RN(amax / 127)
    halves = ((torch.randint(-127, 127, (m, k)).double() + 0.5) * scale.double()).float()
    steps = torch.randint(-3, 4, (m, k))
    beside = halves
    for i in range(3):
        beside = torch.where(steps > i, torch.nextafter(beside, torch.tensor(float("inf"))), beside)
        beside = torch.where(-steps > i, torch.nextafter(beside, torch.tensor(float("-inf"))), beside)
    kind = torch.randint(0, 3, (m, k))
    x = torch.where(kind == 0, halves, torch.where(kind == 1, beside, (torch.rand(m, k) * 2 - 1) * amax))
    x = torch.minimum(torch.maximum(x, -amax), amax)
    x[:, k // 2] = amax[:, 0] * torch.where(torch.rand(m) < 0.5, -1.0, 1.0)
    quotient = x.double() / scale.double()
    assert int((quotient - quotient.floor() == 0.5).sum()) > m * k // 20, "exact ties are there"
    per_token(backend, x.to(device))


def corrected_codes(v, d):
    """The quantizers' 16-bit arithmetic emulated exactly (numpy, float64 where it is exact, the
    one inexact float64 sum resolved with its exact error): inv = RN(1 / d), p = RN(v inv),
    r = RN(v - p d), Q = RN(p + r inv), then rint(Q)."""
    import numpy as np

    inv = np.float32(1) / d
    p = v * inv
    pd, v64 = p.astype(np.float64) * np.float64(d), v.astype(np.float64)  # the product: 48 bits, exact
    assert np.all((pd == 0) == (v64 == 0)) and np.all(np.abs(v64 - pd) <= np.abs(v64) / 2), "v - p d is exact"
    r = (v64 - pd).astype(np.float32)
    a, t = p.astype(np.float64), r.astype(np.float64) * np.float64(inv)  # r inv: 48 bits, exact
    s = a + t
    err = (a - (s - (s - a))) + (t - (s - a))  # s + err == a + t exactly (TwoSum)
    q = s.astype(np.float32)
    # RN32(s) is RN32(a + t) unless s is a float32 midpoint and err moves the exact sum off it.
    other = np.nextafter(q, np.where(s > q, np.float32(np.inf), np.float32(-np.inf)).astype(np.float32))
    at_midpoint = (s == (q.astype(np.float64) + other.astype(np.float64)) / 2) & (err != 0)
    q = np.where(at_midpoint & ((err > 0) == (other > q)), other, q)
    return np.rint(q)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_corrected_quotient_gives_the_reference_codes_for_every_16bit_value(dtype):
    """The quantizers' arithmetic for 16-bit rows (corrected_codes), for every value of the type
    under each of its significands as the row max (exponent 0, and for fp16 the smallest normal
    and the largest exponent too), gives the reference's rint(RN(v / d)), d = RN(amax / 127),
    code for code; so does it, as the Triton kernel runs it, on every bf16 row whose d is an
    fp32 subnormal (values and d scaled by 2^64 first). The product v inv alone rounds some of
    them to another integer (the correction is needed)."""
    import numpy as np

    values = every_16bit_value(dtype).numpy()
    maxima = values[values >= 1][: 1 << SIGNIFICAND_BITS[dtype]]
    if dtype == torch.float16:
        maxima = np.concatenate([maxima, values[values >= 2.0**-14][:1024], values[values >= 2.0**15]])
    rows = [(amax, np.float32(1)) for amax in maxima]
    if dtype == torch.bfloat16:  # d = RN(amax / 127) under 2^-126: the fp32 subnormal scales
        rows += [(amax, np.float32(2.0**64)) for amax in values[(values > 0) & (values < 127 * 2.0**-126)]]
    wrong = uncorrected_wrong = checked = 0
    for amax, up in rows:
        d = np.float32(amax) / np.float32(127)
        v = values[(np.abs(values) <= amax) & (np.abs(values) >= d / 4)]  # below: |Q| < 0.26, code 0
        reference = np.rint(v / d)  # a float32 division, rounded once
        wrong += int((corrected_codes(v * up, d * up) != reference).sum())
        uncorrected_wrong += int((np.rint(v * (np.float32(1) / d)) != reference).sum())
        checked += v.size
    assert wrong == 0 and uncorrected_wrong > 0 and checked > len(rows) * 100


@pytest.mark.cuda
@pytest.mark.parametrize("device,backend", kernel_params("quantize_per_token", devices=("cuda",)))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_per_token_every_16bit_value_under_every_row_max(device, backend, dtype):
    """every_value_rows: every value of the type under each significand as the row max, at
    exponents across the type's range (bf16: on both sides of the 2^-100 scale edge); the rows
    also padded (with their max) to 16392 values, the CUDA ring kernel's shortest (fp16's are
    longer already)."""
    rows = every_value_rows(dtype, EVERY_VALUE_EXPONENTS[dtype]).to(device)
    per_token(backend, rows)
    if rows.shape[1] < 16392:
        per_token(backend, torch.cat([rows, rows[:, :1].expand(-1, 16392 - rows.shape[1])], dim=1))


@pytest.mark.parametrize("device,backend", PER_TOKEN)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_per_token_extreme_magnitudes(device, backend, dtype):
    big, tiny = torch.finfo(dtype).max, torch.finfo(dtype).tiny
    x = rows_with_spread(6, 33, dtype, device)
    x[0, 5], x[1, 6] = big, -big
    x[2] = 0
    x[2, 0] = -tiny  # one tiny nonzero: amax > 0, q = -127 there
    x[3] = tiny * 4  # the scale is an fp32 subnormal for bf16 / fp32: kept, never flushed
    x[4, :] = x[4, :1]  # a constant row: every q = +-127
    per_token(backend, x)


@pytest.mark.parametrize("device,backend", PER_TOKEN)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_per_token_strided_and_misaligned_views(device, backend, dtype):
    base = rows_with_spread(3 * 7, 40, dtype, device).view(3, 7, 40)
    per_token(backend, base[..., 3:36])  # row stride 40 > K = 33, misaligned start
    per_token(backend, base[:, 1:6, :17])  # leading dims that do not merge
    per_token(backend, base.transpose(0, 1)[..., :8])  # permuted leading dims
    per_token(backend, base[:, 2, 5:6])  # K = 1
    per_token(backend, base.view(21, 40)[::2, :16])  # every other row


@pytest.mark.parametrize("device,backend", PER_TOKEN)
def test_per_token_empty(device, backend):
    q, s = dispatch.kernel("quantize_per_token", backend)(torch.empty(0, 3, 64, device=device, dtype=torch.bfloat16))
    assert q.shape == (0, 3, 64) and q.dtype == torch.int8 and s.shape == (0, 3, 1) and s.dtype == torch.float32


# --- static --------------------------------------------------------------------------------------

ZERO_POINTS = {
    "none": None,
    "int8": (torch.int8, -3),
    "int8_min": (torch.int8, -128),
    "int32": (torch.int32, 17),
    "int32_wide": (torch.int32, -400),  # +Inf -> 508 - 400 -> clamped
}


def _zp(kind, device):
    spec = ZERO_POINTS[kind]
    return None if spec is None else torch.tensor([spec[1]], dtype=spec[0], device=device)


@pytest.mark.parametrize("device,backend", STATIC)
@pytest.mark.parametrize("zp_kind", list(ZERO_POINTS))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1,), (3, 17), (2, 5, 100)], ids=str)
def test_static_special_values(device, backend, shape, dtype, zp_kind):
    x = (torch.randn(shape, device=device) * 3).to(dtype)
    flat = x.view(-1)
    for i, v in enumerate([float("inf"), float("-inf"), float("nan"), 1e30, -1e30, 0.0]):
        if i * 5 < flat.numel():
            flat[i * 5] = v
    static(backend, x, (torch.rand((), device=device) * 0.05 + 0.01).reshape(1), _zp(zp_kind, device))


@pytest.mark.parametrize("device,backend", STATIC)
@pytest.mark.parametrize("k", K_VALUES)
def test_static_k_values(device, backend, k):
    x = plant_special_rows(rows_with_spread(21, k, torch.bfloat16, device))
    static(backend, x, torch.tensor([0.37], device=device), _zp("int8", device))


@pytest.mark.parametrize("device,backend", STATIC)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_static_exact_ties_and_documented_specials(device, backend, dtype):
    s = 2.0**-5
    x = ((torch.arange(-140, 140, device=device).float() + 0.5) * s).view(4, 70).to(dtype)
    static(backend, x, torch.tensor([s], device=device), _zp("int8", device))
    x[0, :3] = torch.tensor([float("inf"), float("-inf"), float("nan")])
    q = static(backend, x, torch.tensor([0.05], device=device), torch.tensor([3], dtype=torch.int32, device=device))
    assert q[0, :3].tolist() == [127, -128, 3], "+Inf, -Inf, NaN -> 127, -128, zero_point"


@pytest.mark.parametrize("device,backend", STATIC)
def test_static_strided_views_and_degenerate_scales(device, backend):
    base = torch.randn(3, 6, 40, device=device)
    zp = torch.tensor([5], dtype=torch.int32, device=device)
    for x in (base[..., 2:35], base[:, ::2, :9], base.transpose(0, 1)):
        static(backend, x, torch.tensor([0.02], device=device), zp)
    x = base[0].clone()
    x[0, :3] = 0.0
    q = static(backend, x, torch.tensor([0.0], device=device), zp)  # x / 0: +-Inf saturate, 0 / 0 -> zp
    assert torch.equal(q.cpu(), torch.where(x > 0, 127, torch.where(x < 0, -128, 5)).cpu().to(torch.int8))
    for value in (float("nan"), float("inf")):  # every code of finite x is the zero point
        assert bool((static(backend, x, torch.tensor([value], device=device), zp) == 5).all())
    static(backend, x, torch.tensor([1e-30], device=device), None)
    negative = static(backend, x, torch.tensor([-0.05], device=device), None)
    assert torch.equal(negative, static(backend, -x, torch.tensor([0.05], device=device), None)), \
        "a negative scale gives the codes of -x"
    static(backend, x, torch.tensor([0.02], device=device).reshape(1, 1), None)  # any one-value shape
    static(backend, torch.empty(0, 64, device=device), torch.tensor([1.0], device=device), None)
    static(backend, torch.empty(4, 0, device=device), torch.tensor([1.0], device=device), None)  # K = 0


def test_static_output_is_contiguous_on_the_reference():
    x = torch.randn(3, 6, 40).transpose(0, 1)
    assert w8a8.ops.quantize_static(x, torch.tensor([0.02])).is_contiguous()


# --- the public ops and the GPU ------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_public_ops(device):
    x = plant_special_rows(rows_with_spread(12, 200, torch.bfloat16, device)).view(4, 3, 200)
    assert_same_codes(w8a8.ops.quantize_per_token(x), reference.quantize_per_token(x.cpu()))
    assert_same_codes(torch.ops.w8a8.quantize_per_token(x), reference.quantize_per_token(x.cpu()))
    scale = torch.tensor([0.01], device=device)
    zp = torch.tensor([-5], dtype=torch.int8, device=device)
    expected = reference.quantize_static(x.cpu(), scale.cpu(), zp.cpu())
    assert torch.equal(w8a8.ops.quantize_static(x, scale, zp).cpu(), expected)
    assert torch.equal(torch.ops.w8a8.quantize_static(x, scale, zp).cpu(), expected)


@pytest.mark.cuda
@pytest.mark.parametrize("device,backend", kernel_params("quantize_per_token", devices=("cuda",)))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
# One row per block up to 384 rows (2048 where bf16 K <= 4096), several past that: both sides; and
# each throughput shape's row lengths (bf16: 256 x 4, 7, 8 vectors, 512 x 7, 8) full and partial;
# the ring kernel (16-bit rows of 2049..3584 vectors from 320 rows): its edges, one row and several
# per block, rows partly filling its slots.
@pytest.mark.parametrize("m,k", [(1000, 4096), (257, 14336), (64, 16384), (9, 32768 + 123), (2048, 4096),
                                 (100, 4096), (256, 8192), (64, 28672), (17, 32768 + 16), (33, 3001),
                                 (2049, 4096), (384, 8192), (385, 8192), (400, 6000),
                                 (385, 14336), (390, 16000), (400, 28672), (100, 28000), (390, 30000),
                                 (320, 16392), (319, 28672), (1000, 28672), (331, 20000), (2000, 24576)])
def test_per_token_llm_shapes(device, backend, dtype, m, k):
    per_token(backend, plant_special_rows(rows_with_spread(m, k, dtype, device)))


@pytest.mark.cuda
@pytest.mark.parametrize("device,backend", kernel_params("quantize_per_token", devices=("cuda",)))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_per_token_long_rows_strided_and_offset(device, backend, dtype):
    """Rows of the ring kernel's lengths (CUDA: 16-bit rows of 2049..3584 vectors, 320 rows and
    more) read through a row pitch longer than K, and from an odd element offset (scalar loads)."""
    base = plant_special_rows(rows_with_spread(400, 28672 + 64, dtype, device))
    per_token(backend, base[:, :28672])
    per_token(backend, base[:, 1:24577])


@pytest.mark.cuda
@pytest.mark.parametrize("device,backend", kernel_params("quantize_per_token", devices=("cuda",)))
def test_graph_capture(device, backend):
    x = plant_special_rows(rows_with_spread(16, 4096, torch.bfloat16, device))
    kernel = dispatch.kernel("quantize_per_token", backend)
    graph, (q, s) = capture_graph(lambda: kernel(x))
    for _ in range(3):
        x.copy_(plant_special_rows(rows_with_spread(16, 4096, torch.bfloat16, device)))
        graph.replay()
        torch.cuda.synchronize()
        assert_same_codes((q, s), reference.quantize_per_token(x.cpu()))
