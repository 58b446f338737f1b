"""The CUDA activation quantizers (backend "cuda", csrc/quantize.cu) against the exact
reference: bit-identical codes and scales on every launch path (warp per row, block per
row in registers, two-pass), vectorized and scalar loads, special rows, static with
zero points, CUDA-graph capture, and their errors."""
import pytest
import torch

import w8a8
from w8a8 import backends, reference
from helpers import capture_graph, plant_special_rows, poison_allocator, rows_with_spread

pytestmark = pytest.mark.sm90

DEV = "cuda"
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Warp-per-row up to 128 vectors (K <= 1024 bf16 / 512 fp32), block-per-row in registers
# up to 2048 vectors (K <= 16384 bf16 / 8192 fp32), two-pass above; odd K takes scalar loads.
K_VALUES = [1, 7, 16, 100, 512, 1000, 1024, 1032, 4096, 8192, 8200, 14336, 16384, 16392, 20000]


@pytest.fixture(autouse=True)
def _need_cuda_backend():
    if torch.cuda.is_available():
        reason = backends.unavailable_reason("cuda", torch.device(DEV), "quantize_per_token")
        if reason is not None:
            pytest.fail(f"CUDA is available but the 'cuda' quantizers are not: {reason}")


def _rows(r, k, dtype):
    """Rows over ~8 decades of magnitude; rows 0..4: zero, NaN, +Inf, -Inf, Inf and NaN."""
    return plant_special_rows(rows_with_spread(r, k, dtype, DEV))


def _check_per_token(x):
    poison_allocator(x.numel() * 4, DEV)
    q, s = w8a8.quantize_per_token(x, backend="cuda")
    rq, rs = reference.quantize_per_token(x)
    assert torch.equal(q, rq), f"{int((q != rq).sum())} of {q.numel()} codes differ"
    assert torch.equal(s.isnan(), rs.isnan())
    assert torch.equal(s.nan_to_num(0).view(torch.int32), rs.nan_to_num(0).view(torch.int32))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("k", K_VALUES)
def test_per_token_bit_identical(k, dtype):
    _check_per_token(_rows(37, k, dtype))


@pytest.mark.parametrize("m", [1, 3, 17, 33, 100, 2048])
def test_per_token_m_sweep(m):
    _check_per_token(_rows(m, 4096, torch.bfloat16))


def test_per_token_exact_ties_round_half_to_even():
    # amax 127 gives scale 1.0, so x / scale hits every .5 tie exactly.
    x = torch.arange(-127, 128, device=DEV, dtype=torch.float32).repeat(3, 4)[:, :1016]
    x[:, 1:] = torch.arange(-63.5, 63.5, 0.125, device=DEV)[: x.shape[1] - 1]
    x[:, 0] = 127.0
    _check_per_token(x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_per_token_strided_and_misaligned_views(dtype):
    base = _rows(9, 4096 + 24, dtype)
    _check_per_token(base[:, 8 : 8 + 4096])  # row stride 4120: rows not 16-byte aligned for bf16/fp16
    _check_per_token(base[:, 1 : 1 + 4000])  # misaligned start, odd K
    _check_per_token(base.view(3, 3, -1)[:, :, :2048])  # leading dims, strided rows
    _check_per_token(base[::2, :1024])  # every other row


@pytest.mark.parametrize("zp", [None, ("int8", -7), ("int32", 100)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("k", [1, 17, 1000, 4096, 14336])
def test_static_bit_identical(k, dtype, zp):
    x = _rows(21, k, dtype)
    scale = torch.tensor([0.37], device=DEV)
    zero_point = None if zp is None else torch.tensor([zp[1]], dtype=getattr(torch, zp[0]), device=DEV)
    poison_allocator(x.numel(), DEV)
    q = w8a8.quantize_static(x, scale, zero_point, backend="cuda")
    assert torch.equal(q, reference.quantize_static(x, scale, zero_point))


def test_static_degenerate_scales():
    x = _rows(5, 256, torch.bfloat16)
    for value in (0.0, float("inf"), float("nan"), 1e-30):
        scale = torch.tensor([value], device=DEV)
        assert torch.equal(w8a8.quantize_static(x, scale, backend="cuda"), reference.quantize_static(x, scale))


def test_empty_inputs():
    q, s = w8a8.quantize_per_token(torch.empty(0, 64, device=DEV, dtype=torch.bfloat16), backend="cuda")
    assert q.shape == (0, 64) and s.shape == (0, 1)
    q = w8a8.quantize_static(torch.empty(0, 64, device=DEV), torch.tensor([1.0], device=DEV), backend="cuda")
    assert q.shape == (0, 64)


def test_opcheck():
    x = torch.randn(3, 5, 48, device=DEV, dtype=torch.bfloat16)
    torch.library.opcheck(torch.ops.w8a8.quantize_per_token_cuda, (x,))
    torch.library.opcheck(torch.ops.w8a8.quantize_static_cuda, (x, torch.tensor([0.02], device=DEV), None))


def test_errors_name_the_op():
    with pytest.raises(RuntimeError, match=r"quantize_per_token\(backend='cuda'\): x must be float32, float16 or bfloat16, got Char"):
        torch.ops.w8a8.quantize_per_token_cuda(torch.ones(2, 8, dtype=torch.int8, device=DEV))
    with pytest.raises(RuntimeError, match=r"x's last dim must be contiguous"):
        torch.ops.w8a8.quantize_per_token_cuda(torch.randn(8, 2, device=DEV).t())
    with pytest.raises(RuntimeError, match=r"quantize_static\(backend='cuda'\): scale must hold one float32 value"):
        torch.ops.w8a8.quantize_static_cuda(torch.randn(2, 8, device=DEV), torch.ones(2, device=DEV), None)


def test_default_quantizer_on_hopper_is_triton():
    # The CUDA quantizer serves W8A8Linear's single-op decode path; Triton is faster at large M.
    assert backends.resolve(None, torch.device(DEV), "quantize_per_token") == "triton"


def test_graph_capture():
    x = _rows(16, 4096, torch.bfloat16)
    graph, (q, s) = capture_graph(lambda: w8a8.quantize_per_token(x, backend="cuda"))
    for _ in range(3):
        x.copy_(_rows(16, 4096, torch.bfloat16))
        graph.replay()
        torch.cuda.synchronize()
        rq, rs = reference.quantize_per_token(x)
        assert torch.equal(q, rq) and torch.equal(s.nan_to_num(-1), rs.nan_to_num(-1))
