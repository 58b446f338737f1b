"""The plain-CUDA decode kernels behind the sm90 op, against the exact reference: the dp4a
GEMV (config ids "gemv_dp4a_ksplit*") and the mma.sync skinny GEMM ("skinny_mma_ksplit*").

Their epilogue is the GEMM epilogues' math in the same order, so the outputs must equal the
reference bit for bit (no ULP slack)."""
import pytest
import torch

import w8a8
from w8a8 import _extension, backends, reference
from helpers import poison_allocator, rand_int8, rand_scale

pytestmark = pytest.mark.sm90


@pytest.fixture(autouse=True)
def _need_cutlass():
    reason = backends.unavailable_reason("cutlass", torch.device("cuda"), "scaled_mm")
    if reason is not None:
        pytest.fail(f"CUDA is available but CUTLASS is not: {reason}")


def _ids(prefix: str, cpu_ids: list[int]) -> list[int]:
    if not torch.cuda.is_available():
        return cpu_ids  # collected on CPU machines, skipped there
    return [i for i, name in enumerate(_extension.cutlass_config_names()) if name.startswith(prefix)]


GEMV_IDS = _ids("gemv", [12, 13, 14, 15])
SKINNY_IDS = _ids("skinny", [16, 17, 18, 19])
DECODE_IDS = GEMV_IDS + SKINNY_IDS
# Token tiles of 1, 2 and 4 (M = 3 pads one) and of 8 and 16 (M = 5, 9 pad), several tiles
# (5, 8, 9, 17, 33), and N, K from one 16-byte chunk to K loops with a partial last step for
# each K split; N = 24, 136, 1000 end inside a 16-row group of the skinny GEMM.
M_LIST = [1, 2, 3, 4, 5, 8, 9, 16, 17, 33]
NK = [(8, 16), (24, 48), (136, 272), (1000, 528), (4096, 4096), (2048, 14336), (264, 1040)]


def _operands(m, n, k, per_token=True, per_channel=True, bias_dtype=torch.float32, a=None):
    a = rand_int8(m, k, device="cuda") if a is None else a
    b = rand_int8(n, k, device="cuda")
    sa = rand_scale(m, 1, device="cuda") if per_token else rand_scale(1, device="cuda")
    sb = rand_scale(n, device="cuda") if per_channel else rand_scale(1, device="cuda")
    bias = None if bias_dtype is None else torch.randn(n, device="cuda").to(bias_dtype)
    return a, b, sa, sb, bias


def _run(config_id, a, b, sa, sb, bias, out_dtype=torch.bfloat16):
    poison_allocator(a.shape[0] * b.shape[0] * 2, "cuda")
    out = torch.ops.w8a8.scaled_mm_cutlass(a, b, sa, sb, bias, out_dtype, config_id)
    torch.cuda.synchronize()
    return out


def test_the_table_has_the_decode_kernels():
    names = _extension.cutlass_config_names()
    assert [names[i] for i in GEMV_IDS] == [f"gemv_dp4a_ksplit{s}" for s in (1, 2, 4, 8)]
    assert [names[i] for i in SKINNY_IDS] == [f"skinny_mma_ksplit{s}" for s in (1, 2, 4, 8)]


@pytest.mark.parametrize("n,k", NK)
@pytest.mark.parametrize("m", M_LIST)
@pytest.mark.parametrize("config_id", DECODE_IDS)
def test_every_k_split_is_exact(config_id, m, n, k):
    a, b, sa, sb, bias = _operands(m, n, k)
    out = _run(config_id, a, b, sa, sb, bias)
    assert torch.equal(out, reference.scaled_mm(a, b, sa, sb, bias, torch.bfloat16))


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("per_token,per_channel", [(True, True), (False, True), (True, False), (False, False)])
@pytest.mark.parametrize("bias_kind", [None, "fp32", "out"])
@pytest.mark.parametrize("m", [1, 2, 4, 7, 12])
def test_epilogue_variants(out_dtype, per_token, per_channel, bias_kind, m):
    bias_dtype = {None: None, "fp32": torch.float32, "out": out_dtype}[bias_kind]
    a, b, sa, sb, bias = _operands(m, 520, 1024, per_token, per_channel, bias_dtype)
    for config_id in DECODE_IDS:
        out = _run(config_id, a, b, sa, sb, bias, out_dtype)
        assert torch.equal(out, reference.scaled_mm(a, b, sa, sb, bias, out_dtype)), config_id


@pytest.mark.parametrize("m", [1, 3, 11])
def test_row_strided_activation(m):
    wide = rand_int8(m, 4096 + 64, device="cuda")
    a, b, sa, sb, bias = _operands(m, 1024, 4096, a=wide[:, 32 : 32 + 4096])
    for config_id in DECODE_IDS:
        assert torch.equal(_run(config_id, a, b, sa, sb, bias), reference.scaled_mm(a, b, sa, sb, bias)), config_id


def test_extreme_codes_accumulate_exactly():
    # -128 * -128 summed over K = 14336 is 234881024: far past fp32's 2^24, exact in int32.
    m, n, k = 13, 64, 14336
    a = torch.full((m, k), -128, dtype=torch.int8, device="cuda")
    b = torch.full((n, k), -128, dtype=torch.int8, device="cuda")
    b[1::2] = 127
    sa, sb = torch.ones(m, 1, device="cuda"), torch.ones(n, device="cuda")
    for config_id in DECODE_IDS:
        out = _run(config_id, a, b, sa, sb, None, torch.float16)
        assert torch.equal(out, reference.scaled_mm(a, b, sa, sb, None, torch.float16)), config_id


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_the_heuristic_runs_the_gemv_for_a_few_tokens(m):
    names = _extension.cutlass_config_names()
    for n, k in ((4096, 4096), (4096, 14336), (28672, 4096), (8, 16)):
        config_id, mode, splits = w8a8.cutlass_plan(m, n, k)
        assert names[config_id].startswith("gemv")
        assert (mode, splits) == (("split_k", splits) if splits > 1 else ("data_parallel", 1))
        assert names[config_id].endswith(f"ksplit{splits}")
    a, b, sa, sb, bias = _operands(m, 4096, 14336)
    out = w8a8.scaled_mm(a, b, sa, sb, bias, backend="cutlass")
    assert torch.equal(out, reference.scaled_mm(a, b, sa, sb, bias))
    # Past the GEMV's tokens the skinny GEMM takes over.
    assert names[w8a8.cutlass_plan(5, 4096, 4096)[0]].startswith("skinny")


@pytest.mark.parametrize("m", [5, 9, 16])
def test_the_heuristic_runs_the_skinny_gemm_past_the_gemv(m):
    names = _extension.cutlass_config_names()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for n, k in ((4096, 4096), (4096, 14336), (28672, 4096), (8192, 8192), (8, 16)):
        config_id, mode, splits = w8a8.cutlass_plan(m, n, k)
        # Split 8 (one 16-row group per CTA) unless that grid ends in a partial second wave.
        ctas = -(-n // 16)
        expected = 4 if 2 * sms < ctas <= 4 * sms else 8
        assert (names[config_id], mode, splits) == (f"skinny_mma_ksplit{expected}", "split_k", expected), (n, k)
    a, b, sa, sb, bias = _operands(m, 4096, 14336)
    out = w8a8.scaled_mm(a, b, sa, sb, bias, backend="cutlass")
    assert torch.equal(out, reference.scaled_mm(a, b, sa, sb, bias))
    assert not names[w8a8.cutlass_plan(17, 4096, 4096)[0]].startswith(("gemv", "skinny"))


def test_split_requests_at_a_few_tokens_keep_the_cutlass_tiles():
    names = _extension.cutlass_config_names()
    assert not names[w8a8.cutlass_plan(1, 4096, 4096, split_k=3)[0]].startswith("gemv")
    assert not names[w8a8.cutlass_plan(1, 4096, 4096, scheduler="streamk")[0]].startswith("gemv")
    # split_k = 1 ("no split") on a forced GEMV entry runs it unsplit; a split request refuses it.
    assert w8a8.cutlass_plan(1, 4096, 4096, split_k=1, config_id=GEMV_IDS[-1])[1:] == ("data_parallel", 1)
    with pytest.raises(RuntimeError, match="a decode kernel whose K split is fixed by its config id"):
        w8a8.cutlass_plan(1, 4096, 4096, split_k=2, config_id=GEMV_IDS[0])


@pytest.mark.parametrize("m", [2, 10])
def test_deterministic_and_graph_capturable(m):
    a, b, sa, sb, bias = _operands(m, 4096, 14336)
    for config_id in DECODE_IDS:
        first = _run(config_id, a, b, sa, sb, bias)
        for _ in range(20):
            assert torch.equal(_run(config_id, a, b, sa, sb, bias), first)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        w8a8.scaled_mm(a, b, sa, sb, bias, backend="cutlass")  # warm-up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = w8a8.scaled_mm(a, b, sa, sb, bias, backend="cutlass")
    a.copy_(rand_int8(*a.shape, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, reference.scaled_mm(a, b, sa, sb, bias))
