"""Row padding of activation buffers (w8a8/padding.py): the producers' padded storage and the
sm90 GEMM running on it. The rule and the views are checked on the CPU (with a stand-in
for the sm90 op); on an sm_90 GPU the padded GEMM is compared bit for bit with the
reference on operands whose pad rows hold garbage, and is shown to run on the padded rows."""
import functools
import math

import pytest
import torch

import w8a8
from w8a8 import dispatch, padding
from helpers import assert_exact, rand_int8, rand_scale, ref_scaled_mm, requires_sm90


@pytest.mark.parametrize("m, padded", [(1, 1), (16, 16), (32, 32), (33, 48), (47, 48), (48, 48), (49, 49), (64, 64), (65, 96), (96, 96), (97, 128), (100, 128), (128, 128),
                                       (129, 192), (192, 192), (193, 256), (200, 256), (256, 256), (257, 320),
                                       (320, 320), (321, 384), (384, 384), (385, 512), (512, 512), (513, 513), (4096, 4096)])
def test_padded_rows(m, padded):
    assert padding.padded_rows(m) == padded


@pytest.mark.parametrize("shape", [(65, 96), (5, 20, 96), (129, 1), (3, 96)])
def test_empty_pads_the_storage_and_returns_the_first_rows(shape):
    t = padding.empty(shape, torch.int8, "cpu", pad=True)
    m = math.prod(shape[:-1])
    assert t.shape == shape and t.is_contiguous() and t.storage_offset() == 0
    assert t.untyped_storage().nbytes() == padding.padded_rows(m) * shape[-1]


def test_empty_does_not_pad_on_the_cpu_by_default_nor_a_0_dim_tensor():
    assert padding.empty((100, 32), torch.int8, "cpu").untyped_storage().nbytes() == 100 * 32
    assert padding.empty((), torch.float32, "cpu", pad=True).shape == ()


def test_widened_views_the_same_storage_where_it_has_room():
    t = padding.empty((100, 48), torch.int8, "cpu", pad=True)
    wide = padding.widened(t, 128)
    assert wide.shape == (128, 48) and wide.stride() == t.stride() and wide.data_ptr() == t.data_ptr()
    assert padding.widened(t, 129) is None  # past the storage
    assert padding.widened(torch.empty(100, 48), 128) is None  # exact-size storage
    assert padding.widened(t, 100) is None  # nothing to widen
    strided = torch.empty(128, 64, dtype=torch.int8)[:100, :48]  # row pitch 64
    wide = padding.widened(strided, 128)
    assert wide.shape == (128, 48) and wide.stride() == (64, 1)


def test_padded_operands_need_room_in_both_and_keep_a_single_scale():
    a = padding.empty((100, 32), torch.int8, "cpu", pad=True)
    s = padding.empty((100, 1), torch.float32, "cpu", pad=True)
    wide_a, wide_s = padding.padded_operands(a, s)
    assert wide_a.shape == (128, 32) and wide_s.shape == (128, 1)
    assert padding.padded_operands(a, torch.empty(100, 1)) is None
    assert padding.padded_operands(a, torch.ones(1))[1].numel() == 1
    flat = padding.empty((100,), torch.float32, "cpu", pad=False)
    assert padding.padded_operands(a, flat) is None
    assert padding.padded_operands(torch.empty(64, 32, dtype=torch.int8), torch.empty(64, 1)) is None  # M = 64


def _spy_op(calls, a, b, a_scale, b_scale, bias, out_dtype):
    calls.append((a.shape[0], a_scale.shape[0] if a_scale.numel() > 1 else 1))
    return ref_scaled_mm(a, b, a_scale, b_scale, bias, out_dtype)


@pytest.mark.parametrize("m", [65, 100, 130])
def test_the_sm90_call_runs_on_the_padded_rows_and_returns_m(m):
    calls = []
    op = functools.partial(_spy_op, calls)
    a = padding.empty((m, 64), torch.int8, "cpu", pad=True)
    a.copy_(rand_int8(m, 64))
    s = padding.empty((m, 1), torch.float32, "cpu", pad=True)
    s.copy_(rand_scale(m, 1))
    b, sb = rand_int8(40, 64), rand_scale(40)
    out = dispatch._sm90_padded(op, a, b, s, sb, None, torch.bfloat16)
    assert calls == [(padding.padded_rows(m), padding.padded_rows(m))]
    assert out.shape == (m, 40) and out.is_contiguous()
    assert_exact(out, ref_scaled_mm(a, b, s, sb, None, torch.bfloat16))
    calls.clear()
    dispatch._sm90_padded(op, a.clone(), b, s, sb, None, torch.bfloat16)  # no room: as given
    assert calls == [(m, m)]


@requires_sm90
@pytest.mark.parametrize("quantizer", [None, "cuda", "triton"])
@pytest.mark.parametrize("m", [65, 77, 127, 129, 200, 255, 257, 319, 321, 383, 385, 511])
@pytest.mark.parametrize("n, k", [(4096, 4096), (136, 272)])
def test_sm90_on_padded_producer_outputs_is_exact(m, n, k, quantizer):
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    q, s = w8a8.ops.quantize_per_token(x, backend=quantizer)
    assert q.untyped_storage().nbytes() == padding.padded_rows(m) * k
    # Garbage in the pad rows: codes, and scales that are NaN, reach only dropped rows.
    padding.widened(q, padding.padded_rows(m))[m:].random_(-128, 128)
    padding.widened(s, padding.padded_rows(m))[m:].fill_(float("nan"))
    b, sb = rand_int8(n, k, device="cuda"), rand_scale(n, device="cuda")
    bias = torch.randn(n, device="cuda")
    for out_dtype in (torch.bfloat16, torch.float16):
        out = w8a8.ops.scaled_mm(q, b, s, sb, bias, out_dtype)
        assert out.shape == (m, n)
        assert out.untyped_storage().nbytes() == padding.padded_rows(m) * n * 2  # ran on the padded rows
        assert_exact(out, ref_scaled_mm(q, b, s, sb, bias, out_dtype))


@requires_sm90
def test_the_padding_ends_on_the_tile_edge_the_ladder_picks():
    # The rule here and the sm90 ladder (scaled_mm_sm90_configs.cuh) are stated apart: the
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

