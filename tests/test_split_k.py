"""Split-K / stream-K of the CUTLASS sm90 kernel: correctness, the heuristic's plan,
determinism, CUDA-graph capture, and the errors for bad values.

The CPU-side validation (values refused before any kernel) is in test_ops.py.
"""
import pytest
import torch

import w8a8
from w8a8 import _extension, reference
from helpers import assert_ulp_close, capture_graph, poison_allocator, rand_int8, rand_scale

pytestmark = pytest.mark.sm90

DEV = "cuda"


def _operands(m, n, k, bias=True):
    a, b = rand_int8(m, k, device=DEV), rand_int8(n, k, device=DEV)
    sa, sb = rand_scale(m, 1, device=DEV), rand_scale(n, device=DEV)
    bias_t = torch.randn(n, device=DEV) if bias else None
    return a, b, sa, sb, bias_t


# K = 4112 = 32 x 128 + 16: the last K tile is partial; 14336 and 28672: the decode down-projections.
@pytest.mark.parametrize("k", [4112, 14336])
@pytest.mark.parametrize("m", [1, 3, 17, 64, 100, 300])
@pytest.mark.parametrize("split_k", [1, 2, 3, 4, 7, 8])
def test_split_counts_match_reference(m, k, split_k):
    n = 1032  # 9 weight tiles of 128 rows, the last one partial
    a, b, sa, sb, bias = _operands(m, n, k)
    poison_allocator(m * n * 2, DEV)
    out = w8a8.scaled_mm(a, b, sa, sb, bias, torch.bfloat16, backend="cutlass", split_k=split_k)
    assert_ulp_close(out, reference.scaled_mm(a, b, sa, sb, bias, torch.bfloat16), max_ulp=1)


@pytest.mark.parametrize("scheduler", ["persistent", "streamk", "auto"])
@pytest.mark.parametrize("m", [1, 16, 33, 128, 257, 1000])
def test_schedulers_match_reference(m, scheduler):
    n, k = 2048, 8192 + 48
    a, b, sa, sb, bias = _operands(m, n, k)
    out = w8a8.scaled_mm(a, b, sa, sb, bias, torch.float16, backend="cutlass", scheduler=scheduler)
    assert_ulp_close(out, reference.scaled_mm(a, b, sa, sb, bias, torch.float16), max_ulp=1)


def test_split_k_does_not_change_bits():
    # int32 partial sums: every split count and scheduler gives the same output, bit for bit.
    m, n, k = 16, 4096, 14336
    a, b, sa, sb, bias = _operands(m, n, k)
    base = w8a8.scaled_mm(a, b, sa, sb, bias, backend="cutlass", split_k=1)
    for kwargs in ({"split_k": 2}, {"split_k": 5}, {"split_k": 8}, {"scheduler": "streamk"}, {}):
        assert torch.equal(w8a8.scaled_mm(a, b, sa, sb, bias, backend="cutlass", **kwargs), base), kwargs


@pytest.mark.parametrize("kwargs", [{}, {"split_k": 4}, {"scheduler": "streamk"}])
def test_deterministic_over_runs(kwargs):
    m, n, k = 3, 4096, 14336
    a, b, sa, sb, bias = _operands(m, n, k)
    first = w8a8.scaled_mm(a, b, sa, sb, bias, backend="cutlass", **kwargs)
    for _ in range(10):
        assert torch.equal(w8a8.scaled_mm(a, b, sa, sb, bias, backend="cutlass", **kwargs), first)


def test_heuristic_plans():
    names = _extension.cutlass_config_names()
    # Decode (M <= 16) runs the decode kernels, whose K split is inside the CTA (fixed order);
    # through a long K on few rows it is split 8 ways (csrc/scaled_mm_sm90_configs.cuh SkinnyPolicy).
    config, mode, splits = w8a8.cutlass_plan(16, 4096, 14336)
    assert names[config] == "skinny_mma_ksplit8" and (mode, splits) == ("split_k", 8)
    # Past them the CUTLASS tiles run unsplit: the scheduler "auto" heuristic never splits K.
    for m, n, k in ((17, 4096, 14336), (64, 8192, 28672), (2048, 4096, 14336)):
        assert w8a8.cutlass_plan(m, n, k)[1] == "data_parallel", (m, n, k)
    # Explicit requests are honoured.
    assert w8a8.cutlass_plan(1, 4096, 4096, split_k=3)[1:] == ("split_k", 3)
    assert w8a8.cutlass_plan(1, 4096, 14336, split_k=1)[1:] == ("data_parallel", 1)
    assert w8a8.cutlass_plan(1, 4096, 14336, scheduler="persistent")[1:] == ("data_parallel", 1)
    assert w8a8.cutlass_plan(2048, 4096, 14336, scheduler="streamk")[1] == "stream_k"
    assert w8a8.cutlass_plan(2048, 4096, 14336, split_k=2)[1:] == ("split_k", 2)


def test_graph_capture_with_split_k():
    # The split-K fix-up needs its lock workspace zeroed before every launch: that memset
    # must be part of the graph, or the second replay deadlocks or reads stale partials.
    m, n, k = 4, 4096, 14336
    a, b, sa, sb, bias = _operands(m, n, k)
    graph, out = capture_graph(lambda: w8a8.scaled_mm(a, b, sa, sb, bias, backend="cutlass", split_k=4))
    for _ in range(5):
        a.copy_(rand_int8(m, k, device=DEV))
        sa.copy_(rand_scale(m, 1, device=DEV))
        graph.replay()
        torch.cuda.synchronize()
        assert_ulp_close(out, reference.scaled_mm(a, b, sa, sb, bias, torch.bfloat16), max_ulp=1)


def test_w8a8linear_split_k_attribute():
    lin = torch.nn.Linear(14336, 1024, device=DEV, dtype=torch.bfloat16)
    layer = w8a8.W8A8Linear.from_linear(lin, backend="cutlass")
    x = torch.randn(5, 14336, device=DEV, dtype=torch.bfloat16)
    base = layer(x)
    layer.split_k = 6
    assert torch.equal(layer(x), base)
    layer.split_k = None
    layer.scheduler = "streamk"
    assert torch.equal(layer(x), base)
    with pytest.raises(ValueError, match="split_k=2 needs scheduler='auto'"):
        layer.split_k = 2


def test_bad_values_name_the_op_and_the_value():
    a, b, sa, sb, _ = _operands(2, 256, 512)
    op = torch.ops.w8a8.scaled_mm_cutlass
    with pytest.raises(RuntimeError, match=r"scaled_mm\(backend='cutlass'\): split_k must be .*\[1, 4\].* got 5"):
        op(a, b, sa, sb, None, torch.bfloat16, -1, 5, "auto")
    with pytest.raises(RuntimeError, match="split_k must be .* got 0"):
        op(a, b, sa, sb, None, torch.bfloat16, -1, 0, "auto")
    with pytest.raises(RuntimeError, match="scheduler must be 'auto', 'persistent' or 'streamk', got 'fast'"):
        op(a, b, sa, sb, None, torch.bfloat16, -1, None, "fast")
    with pytest.raises(RuntimeError, match="split_k = 2 needs scheduler 'auto'"):
        op(a, b, sa, sb, None, torch.bfloat16, -1, 2, "persistent")
    # A forced config on the persistent scheduler cannot split K.
    with pytest.raises(RuntimeError, match="stream-K-scheduler config .* persistent scheduler"):
        op(a, b, sa, sb, None, torch.bfloat16, 4, 2, "auto")
    with pytest.raises(ValueError, match=r"w8a8.scaled_mm: split_k must be at most 4 .* got 9"):
        w8a8.scaled_mm(a, b, sa, sb, backend="cutlass", split_k=9)
