"""Row padding of activation buffers (csrc/common/padded_rows.h, w8a8/padding.py): the rule where
w8a8._C is built, the producers' padded storage, and on an sm_90 GPU the padded GEMM compared bit
for bit with the reference on operands whose pad rows hold garbage, shown to run on the padded
rows (and on exact-size storage as given)."""
import math

import pytest
import torch

import w8a8
from w8a8 import dispatch, padding
from helpers import assert_exact, rand_int8, rand_scale, ref_scaled_mm, requires_sm90


needs_c = pytest.mark.skipif(not dispatch.load("_C")[0], reason="the rule lives in w8a8._C (csrc/common/padded_rows.h)")


@needs_c
@pytest.mark.parametrize("m, padded", [(1, 1), (16, 16), (32, 32), (33, 48), (47, 48), (48, 48), (49, 49), (64, 64), (65, 96), (96, 96), (97, 128), (100, 128), (128, 128),
                                       (129, 192), (192, 192), (193, 256), (200, 256), (256, 256), (257, 320),
                                       (320, 320), (321, 384), (384, 384), (385, 512), (512, 512), (513, 513), (4096, 4096)])
def test_padded_rows(m, padded):
    assert padding.padded_rows(m) == padded == torch.ops.w8a8.padded_rows(m)


@pytest.mark.skipif(dispatch.load("_C")[0], reason="needs w8a8._C unbuilt")
def test_no_padding_without_the_sm90_library():
    assert [padding.padded_rows(m) for m in (1, 33, 65, 385, 513)] == [1, 33, 65, 385, 513]


@pytest.mark.parametrize("shape", [(65, 96), (5, 20, 96), (129, 1), (3, 96)])
def test_empty_pads_the_storage_and_returns_the_first_rows(shape):
    t = padding.empty(shape, torch.int8, "cpu", pad=True)
    m = math.prod(shape[:-1])
    assert t.shape == shape and t.is_contiguous() and t.storage_offset() == 0
    assert t.untyped_storage().nbytes() == padding.padded_rows(m) * shape[-1]


@pytest.mark.parametrize("direct", [True, False])
def test_empty_allocates_the_same_tensor_with_or_without_the_direct_allocator(monkeypatch, direct):
    """torch's direct allocator (Inductor's) where this torch has it, torch.empty_strided otherwise:
    the same shape, strides, dtype, device and storage either way."""
    if not direct:
        monkeypatch.setattr(padding, "_DIRECT", {})
    elif padding._DIRECT.get("cpu") is None:
        pytest.skip("this torch has no direct CPU allocator")
    for shape, pad in [((65, 96), True), ((5, 20, 96), False), ((3, 1), True), ((0, 8), True)]:
        t = padding.empty(shape, torch.float16, torch.device("cpu"), pad=pad)
        m = math.prod(shape[:-1])
        rows = padding.padded_rows(m) if pad else m
        assert (t.shape, t.dtype, t.device, t.is_contiguous()) == (shape, torch.float16, torch.device("cpu"), True)
        assert t.untyped_storage().nbytes() == rows * shape[-1] * 2


@pytest.fixture
def fresh_plans():
    """padding's layout caches emptied before and after (a test may change the rule they read)."""
    padding._plan.cache_clear()
    padding._output_layouts.cache_clear()
    yield
    padding._plan.cache_clear()
    padding._output_layouts.cache_clear()


def _layout(t: torch.Tensor):
    return t.shape, t.stride(), t.dtype, t.storage_offset(), t.untyped_storage().nbytes()


@pytest.mark.parametrize("shape", [(65, 96), (2, 40, 96), (129, 1), (1, 8), (0, 8)])
@pytest.mark.parametrize("pad", [True, False])
def test_producer_outputs_are_laid_out_as_empty_lays_out_each(monkeypatch, fresh_plans, shape, pad):
    """empty_outputs' one plan for a producer's outputs (codes, scales, then the float ones) gives
    the tensors that empty gives one by one, padded (a GPU's layout, built here on the CPU, with a
    stand-in rule where w8a8._C is not built) or not."""
    if not dispatch.load("_C")[0]:
        monkeypatch.setattr(padding, "padded_rows", lambda m: m + 3 if m > 1 else m)
    cpu = torch.device("cpu")
    got = [padding._allocate(layout, cpu, "cpu")
           for layout in padding._output_layouts(torch.Size(shape), torch.bfloat16, 2, pad)]
    want = [padding.empty(shape, torch.int8, cpu, pad=pad), padding.empty((*shape[:-1], 1), torch.float32, cpu, pad=pad),
            padding.empty(shape, torch.bfloat16, cpu, pad=False), padding.empty(shape, torch.bfloat16, cpu, pad=False)]
    assert [_layout(t) for t in got] == [_layout(t) for t in want]
    m = math.prod(shape[:-1])
    assert got[0].untyped_storage().nbytes() == (padding.padded_rows(m) if pad else m) * shape[-1]
    on_cpu = padding.empty_outputs(torch.Size(shape), torch.float16, 1, cpu)  # the CPU pads nothing
    assert [_layout(t) for t in on_cpu] == [_layout(t) for t in (
        torch.empty(shape, dtype=torch.int8), torch.empty((*shape[:-1], 1)), torch.empty(shape, dtype=torch.float16))]


def test_empty_does_not_pad_on_the_cpu_by_default_nor_a_0_dim_tensor():
    assert padding.empty((100, 32), torch.int8, "cpu").untyped_storage().nbytes() == 100 * 32
    assert padding.empty((), torch.float32, "cpu", pad=True).shape == ()


def _pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    """The pad rows of a producer's output (storage past its first M rows)."""
    return t.as_strided((rows, t.shape[1]), t.stride(), t.storage_offset())[t.shape[0]:]


@requires_sm90
@pytest.mark.parametrize("quantizer", [None, "sm90", "triton"])
@pytest.mark.parametrize("m", [65, 77, 127, 129, 200, 255, 257, 319, 321, 383, 385, 511])
@pytest.mark.parametrize("n, k", [(4096, 4096), (136, 272)])
def test_sm90_on_padded_producer_outputs_is_exact(m, n, k, quantizer):
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    q, s = w8a8.ops.quantize_per_token(x, backend=quantizer)
    assert q.untyped_storage().nbytes() == padding.padded_rows(m) * k
    # Garbage in the pad rows: codes, and scales that are NaN, reach only dropped rows.
    _pad_rows(q, padding.padded_rows(m)).random_(-128, 128)
    _pad_rows(s, padding.padded_rows(m)).fill_(float("nan"))
    b, sb = rand_int8(n, k, device="cuda"), rand_scale(n, device="cuda")
    bias = torch.randn(n, device="cuda")
    for out_dtype in (torch.bfloat16, torch.float16):
        out = w8a8.ops.scaled_mm(q, b, s, sb, bias, out_dtype)
        assert out.shape == (m, n)
        assert out.untyped_storage().nbytes() == padding.padded_rows(m) * n * 2  # ran on the padded rows
        assert_exact(out, ref_scaled_mm(q, b, s, sb, bias, out_dtype))
        exact = w8a8.ops.scaled_mm(q.clone(), b, s.clone(), sb, bias, out_dtype)  # no room: run as given
        assert exact.untyped_storage().nbytes() == m * n * 2
        assert_exact(exact, ref_scaled_mm(q, b, s, sb, bias, out_dtype))


@requires_sm90
def test_the_padding_ends_on_the_tile_edge_the_ladder_picks():
    # The rule here and the sm90 ladder (scaled_mm_sm90_heuristics.cuh) are stated apart: the
    # padded row count must run the tile the unpadded one would, so that padding only
    # fills that tile's last token tile.
    plan = torch.ops.w8a8.scaled_mm_sm90_plan
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m in range(65, 513):
        for n in (4096, 6144, 64 * sms + 128, 10240, 28672):
            assert plan(padding.padded_rows(m), n, 4096)[0] == plan(m, n, 4096)[0], (m, n)


@requires_sm90
def test_w8a8_linear_between_tile_edges_is_exact():
    layer = w8a8.W8A8Linear.from_linear(torch.nn.Linear(512, 256, bias=True, dtype=torch.bfloat16)).cuda()
    for m in (65, 100, 129, 250):
        x = torch.randn(2, m, 512, device="cuda", dtype=torch.bfloat16)
        q, s = w8a8.ops.quantize_per_token(x.reshape(-1, 512), backend="reference")
        ref = ref_scaled_mm(q, layer.weight, s, layer.weight_scale, layer.bias, torch.bfloat16)
        assert_exact(layer(x).reshape(-1, 256), ref)

