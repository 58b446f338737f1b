"""The sm90 table (``w8a8::scaled_mm_sm90``, ``w8a8._C``) on a Hopper GPU: every config
entry forced by name, the decode kernels (dp4a GEMV, mma.sync skinny GEMM), split-K and
stream-K through the plan op and the kernel op's ``split_k`` / ``scheduler``, the heuristic's
plans, CUDA graphs, and the SASS. Entries are addressed by name from
``dispatch.config_names("sm90")``. The single op ``w8a8::linear_sm90``: test_sm90_linear.py.

Every output equals the reference bit for bit (``KERNEL_ULP``): int32 partial sums in any
split order give the same accumulator, and the epilogue rounds like the reference.
"""
import subprocess

import pytest
import torch

from w8a8 import dispatch
from helpers import (SM90, assert_exact, capture_graph, cuobjdump, mm_operands, poison_allocator, rand_int8, rand_scale,
                     ref_scaled_mm, requires_sm90)

pytestmark = [pytest.mark.sm90, requires_sm90]

NAMES = dispatch.config_names("sm90") if SM90 else ()
# Collected on any machine (skipped without the library): the ids are names where it is built.
ENTRIES = list(NAMES) or ["<sm90 table: needs w8a8._C>"]
DECODE = [n for n in NAMES if n.startswith(("gemv", "skinny"))] or ["<decode entries>"]
GEMV = [n for n in NAMES if n.startswith("gemv")]
op = torch.ops.w8a8.scaled_mm_sm90 if SM90 else None
plan = torch.ops.w8a8.scaled_mm_sm90_plan if SM90 else None


def _run(*operands, out_dtype=torch.bfloat16, config="", split_k=None, scheduler="auto"):
    a, b = operands[0], operands[1]
    poison_allocator(a.shape[0] * b.shape[0] * 2, "cuda")
    out = op(*operands, out_dtype, config, split_k, scheduler)
    torch.cuda.synchronize()
    return out


def _check(*operands, out_dtype=torch.bfloat16, **kwargs):
    out = _run(*operands, out_dtype=out_dtype, **kwargs)
    assert_exact(out, ref_scaled_mm(*operands, out_dtype))
    return out


# --- the table ---------------------------------------------------------------------------------


def test_the_table_has_tiles_and_decode_kernels():
    assert len(NAMES) == len(set(NAMES)), "entry names must be unique"
    assert any(n.startswith("gemv_dp4a_ksplit") for n in NAMES), NAMES
    assert any(n.startswith("skinny_mma_ksplit") for n in NAMES), NAMES
    assert any("streamk" in n for n in NAMES) and any("pingpong" in n or "coop" in n for n in NAMES), NAMES
    assert 90 in dispatch.archs("sm90")


@pytest.mark.parametrize("config", ENTRIES)
@pytest.mark.parametrize("m,n,k", [(1, 8, 16), (17, 136, 272), (129, 1000, 528), (300, 4096, 4096)])
def test_every_entry_forced_by_name(config, m, n, k):
    """Partial tiles in M, N and K on every entry."""
    _check(*mm_operands(m, n, k, "cuda"), config=config)


@pytest.mark.parametrize("config", ENTRIES)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("per_token,per_channel,bias_kind", [(True, True, "fp32"), (False, True, None),
                                                             (True, False, "out"), (False, False, "fp32")])
def test_every_entry_epilogue(config, out_dtype, per_token, per_channel, bias_kind):
    bias_dtype = {None: None, "fp32": torch.float32, "out": out_dtype}[bias_kind]
    _check(*mm_operands(33, 520, 1024, "cuda", per_token, per_channel, bias_dtype), out_dtype=out_dtype, config=config)


def test_an_unknown_entry_is_refused():
    with pytest.raises((ValueError, RuntimeError), match="no_such_entry"):
        _run(*mm_operands(4, 64, 64, "cuda"), config="no_such_entry")


# --- the decode kernels ----------------------------------------------------------------------

# Token tiles of 1, 2 and 4 (M = 3 pads one) and of 8 and 16 (M = 5, 9 pad), several tiles
# (5, 8, 9, 17, 33), N and K from one 16-byte chunk to K loops with a partial last step for
# each K split; N = 24, 136, 1000 end inside a 16-row group of the skinny GEMM.
M_DECODE = [1, 2, 3, 4, 5, 8, 9, 16, 17, 33]
NK_DECODE = [(8, 16), (24, 48), (136, 272), (1000, 528), (4096, 4096), (2048, 14336), (264, 1040)]


@pytest.mark.parametrize("n,k", NK_DECODE)
@pytest.mark.parametrize("m", M_DECODE)
@pytest.mark.parametrize("config", DECODE)
def test_decode_entries_every_k_split(config, m, n, k):
    _check(*mm_operands(m, n, k, "cuda"), config=config)


@pytest.mark.parametrize("m", [1, 3, 11])
def test_decode_entries_row_strided_activation(m):
    operands = mm_operands(m, 1024, 4096, "cuda", a_pad=64)
    for config in DECODE:
        _check(*operands, config=config)


def test_decode_entries_accumulate_extreme_codes_exactly():
    # -128 * -128 summed over K = 14336 is 234881024: far past fp32's 2^24, exact in int32.
    m, n, k = 13, 64, 14336
    a = torch.full((m, k), -128, dtype=torch.int8, device="cuda")
    b = torch.full((n, k), -128, dtype=torch.int8, device="cuda")
    b[1::2] = 127
    sa, sb = torch.ones(m, 1, device="cuda"), torch.ones(n, device="cuda")
    for config in DECODE:
        _check(a, b, sa, sb, None, out_dtype=torch.float16, config=config)


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_the_heuristic_runs_the_gemv_for_a_few_tokens(m):
    for n, k in ((4096, 4096), (4096, 14336), (28672, 4096), (8, 16)):
        name, decomposition, splits = plan(m, n, k)
        assert name.startswith("gemv") and name.endswith(f"ksplit{splits}"), (name, n, k)
        assert (decomposition, splits) == (("split_k", splits) if splits > 1 else ("data_parallel", 1))
    _check(*mm_operands(m, 4096, 14336, "cuda"))
    assert plan(5, 28672, 4096)[0].startswith("skinny"), "past the GEMV's tokens the skinny GEMM takes over"


@pytest.mark.parametrize("m", [5, 9, 16])
def test_the_heuristic_runs_the_skinny_gemm_past_the_gemv(m):
    # The skinny GEMM (K split 8) where the 64x32 tile would need more than one wave of 64-row
    # weight tiles and K is short; the tile everywhere else, as two 16-token tiles of a
    # cluster where those fit one wave.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for n, k in ((28672, 4096), (64 * sms + 8, 4096), (12288, 8176)):
        assert tuple(plan(m, n, k)) == ("skinny_mma_ksplit8", "split_k", 8), (n, k)
    for n, k in ((64 * sms, 4096), (28672, 8192), (32 * sms + 8, 4096)):
        assert plan(m, n, k)[0] == "swap_64x32x256_1x1_ws", (n, k)
    for n, k in ((4096, 4096), (4096, 14336), (32 * sms, 4096), (8, 16)):
        assert plan(m, n, k)[0] == "swap_64x16x256_1x2_ws", (n, k)
    _check(*mm_operands(m, 28672, 4096, "cuda"))
    _check(*mm_operands(m, 4096, 4096, "cuda"))
    _check(*mm_operands(m, 8, 16, "cuda"))
    assert not plan(17, 28672, 4096)[0].startswith(("gemv", "skinny"))


def test_split_requests_at_a_few_tokens_keep_the_cutlass_tiles():
    assert not plan(1, 4096, 4096, "", 3)[0].startswith("gemv")
    assert not plan(1, 4096, 4096, "", None, "stream_k")[0].startswith("gemv")
    # split_k = 1 ("no split") on a forced GEMV entry runs it unsplit; a split request refuses it.
    assert tuple(plan(1, 4096, 4096, GEMV[-1], 1))[1:] == ("data_parallel", 1)
    with pytest.raises((ValueError, RuntimeError), match="decode kernel"):
        plan(1, 4096, 4096, GEMV[0], 2)


# --- split-K and stream-K --------------------------------------------------------------------


# K = 4112 = 32 x 128 + 16: the last K tile is partial; 14336: the decode down-projections.
@pytest.mark.parametrize("k", [4112, 14336])
@pytest.mark.parametrize("m", [1, 3, 17, 64, 100, 300])
@pytest.mark.parametrize("split_k", [1, 2, 3, 4, 7, 8])
def test_split_counts(m, k, split_k):
    _check(*mm_operands(m, 1032, k, "cuda"), split_k=split_k)  # N: 9 tiles of 128, the last partial


@pytest.mark.parametrize("scheduler", ["persistent", "stream_k", "auto"])
@pytest.mark.parametrize("m", [1, 16, 33, 128, 257, 1000])
def test_schedulers(m, scheduler):
    _check(*mm_operands(m, 2048, 8192 + 48, "cuda"), out_dtype=torch.float16, scheduler=scheduler)


def test_split_k_does_not_change_bits_and_runs_are_deterministic():
    operands = mm_operands(16, 4096, 14336, "cuda")
    base = _check(*operands, split_k=1)
    for kwargs in ({"split_k": 2}, {"split_k": 5}, {"split_k": 8}, {"scheduler": "stream_k"}, {}):
        for _ in range(3):
            assert torch.equal(_run(*operands, **kwargs), base), kwargs


@pytest.mark.parametrize(
    "split_k,scheduler,match",
    [(0, "auto", "split_k"), (-2, "auto", "split_k"), (None, "fast", "scheduler"), (2, "persistent", "split_k"),
     (9, "auto", "split_k")],
)
def test_bad_split_values_are_refused(split_k, scheduler, match):
    """K = 512: 4 K tiles of 128, so at most 4 splits. The message names the op and the value
    (wording: the C++ side's)."""
    operands = mm_operands(2, 256, 512, "cuda", bias_dtype=None)
    with pytest.raises((ValueError, RuntimeError), match=rf"scaled_mm.*{match}"):
        _run(*operands, split_k=split_k, scheduler=scheduler)


def test_heuristic_plans():
    # Decode (M = 5..16) on many short weight rows runs the skinny GEMM, whose K split (8) is
    # inside the CTA.
    assert tuple(plan(16, 28672, 4096)) == ("skinny_mma_ksplit8", "split_k", 8)
    # Past them the CUTLASS tiles run unsplit: scheduler "auto" never splits K by itself.
    for m, n, k in ((17, 4096, 14336), (64, 8192, 28672), (2048, 4096, 14336)):
        assert plan(m, n, k)[1] == "data_parallel", (m, n, k)
        assert plan(m, n, k)[0] in NAMES
    # The 64x32 tile serves M = 5..16 where its grid is one wave, or K is long; as two
    # 16-token tiles where two fit one wave.
    assert plan(16, 4096, 4096)[0] == "swap_64x16x256_1x2_ws"
    assert plan(5, 6144, 4096)[0] == "swap_64x32x256_1x1_ws"
    assert plan(5, 8192, 28672)[0] == plan(16, 57344, 8192)[0] == "swap_64x32x256_1x1_ws"
    # The ladder past the decode kernels (scaled_mm_sm90_heuristics.cuh, select_config).
    for m, n, name in ((17, 4096, "swap_64x16x256_1x2_ws"), (17, 6144, "swap_64x32x256_1x1_ws"),
                       (32, 57344, "swap_64x32x256_1x1_ws"),
                       (33, 4096, "swap_64x32x256_1x2_ws"), (64, 28672, "swap_64x64x256_1x1_ws"),
                       (65, 4096, "swap_64x48x256_1x2_ws"), (65, 6144, "swap_64x96x256_1x1_ws"),
                       (96, 10240, "swap_64x96x256_1x1_ws"), (96, 28672, "64x128x128_2x1_pingpong_swz8"),
                       (97, 4096, "swap_64x64x256_1x2_ws"), (128, 4096, "swap_64x64x256_1x2_ws"),
                       (97, 6144, "64x128x128_2x1_pingpong_swz8"), (193, 4096, "swap_64x128x128_1x2_ws"),
                       (193, 6144, "128x96x128_2x1_coop"), (256, 10240, "128x192x128_2x1_coop"),
                       (256, 8192, "128x128x128_2x1_pingpong_swz8"), (512, 6144, "128x192x128_2x1_coop"),
                       (256, 28672, "128x128x128_2x1_pingpong_swz8"), (300, 4096, "swap_128x80x128_1x2_coop"),
                       (320, 57344, "swap_128x160x128_1x1_coop"), (321, 4096, "swap_128x96x128_1x2_coop"),
                       (384, 57344, "swap_128x192x128_1x1_coop"), (385, 4096, "128x128x128_2x1_pingpong_swz8")):
        assert plan(m, n, 4096)[0] == name, (m, n)
    # 512 rows where no tile fits one wave: the 128x256 tile where its waves are no more than the
    # 128x128 tile's half-waves (OneWavePolicy).
    for n, name in ((57344, "128x256x128_2x1_coop_swz8_rasterN"), (8192, "128x256x128_2x1_coop_swz8_rasterN"),
                    (10240, "128x128x128_2x1_pingpong_swz8"), (28672, "128x128x128_2x1_pingpong_swz8")):
        assert plan(512, n, 8192)[0] == name, n
    # Past 512 rows: the 128x128 pingpong tile rastered along N from 1024 rows on N <= 6144 and
    # K <= 4096 (NarrowWeightsPolicy), else the 128x256 tile.
    for m, n, k in ((1024, 4096, 4096), (8192, 6144, 4096), (1500, 4096, 2048)):
        assert plan(m, n, k)[0] == "128x128x128_2x1_pingpong_rasterN", (m, n, k)
    for m, n, k in ((1023, 4096, 4096), (1024, 6152, 4096), (1024, 4096, 4112), (8192, 8192, 8192)):
        assert plan(m, n, k)[0] == "128x256x128_2x1_coop_swz8_rasterN", (m, n, k)
    # Explicit requests are honoured.
    assert tuple(plan(1, 4096, 4096, "", 3))[1:] == ("split_k", 3)
    assert tuple(plan(1, 4096, 14336, "", 1))[1:] == ("data_parallel", 1)
    assert tuple(plan(1, 4096, 14336, "", None, "persistent"))[1:] == ("data_parallel", 1)
    assert plan(2048, 4096, 14336, "", None, "stream_k")[1] == "stream_k"
    assert tuple(plan(2048, 4096, 14336, "", 2))[1:] == ("split_k", 2)


@pytest.mark.parametrize("m", [5, 16, 17, 33, 48, 64, 65, 96, 97, 128, 129, 192, 193, 256])
def test_paired_token_tiles_where_two_fit_one_wave(m):
    # N <= 32 x SMs (two CTAs per 64 weight rows in one wave): the rung's tokens as two token
    # tiles of a 1x2 cluster (PairedTokenTilesPolicy); wider N keeps the one-token-tile rungs.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tokens = 16 if m <= 32 else 32 if m <= 64 else 48 if m <= 96 else 64 if m <= 128 else 96 if m <= 192 else 128
    for n in (8, 4096, 32 * sms):
        depth = 128 if tokens in (96, 128) else 256  # the 96- and 128-token pairs run 128-deep stages
        assert tuple(plan(m, n, 4096)) == (f"swap_64x{tokens}x{depth}_1x2_ws", "data_parallel", 1), (m, n)
    assert "1x2_ws" not in plan(257, 4096, 4096)[0]
    assert "1x2_ws" not in plan(m, 32 * sms + 8, 4096)[0]
    for n, k in ((4096, 4096 + 16), (1000, 14336), (8, 16)):
        _check(*mm_operands(m, n, k, "cuda"), out_dtype=torch.float16 if m % 2 else torch.bfloat16)


@pytest.mark.parametrize("m", [129, 150, 191, 192])
def test_the_192_token_rung(m):
    # M = 129..192 runs tiles that cover 192 tokens (Rung192Policy): by N, a 64-row tile (two
    # token tiles of a cluster where those fit one wave), two token tiles of 96 in one wave, one
    # of 192 in one wave, else 96 again.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for n in (4096, 6144, 64 * sms, 64 * sms + 128, 128 * sms, 128 * sms + 128, 28672):
        weight_tiles = -(-n // 128)
        expected = ("swap_64x96x128_1x2_ws" if 2 * -(-n // 64) <= sms else "swap_64x96x256_1x1_ws" if n <= 4096
                    else "swap_128x96x128_1x2_coop" if 2 * weight_tiles <= sms
                    else "swap_128x192x128_1x1_coop" if weight_tiles <= sms else "swap_128x96x128_1x2_coop")
        assert tuple(plan(m, n, 4096)) == (expected, "data_parallel", 1), (m, n)
    for n, k in ((4096, 4096 + 16), (6144, 1040), (10240, 528), (28672, 272)):
        _check(*mm_operands(m, n, k, "cuda"), out_dtype=torch.float16 if m % 2 else torch.bfloat16)


@pytest.mark.parametrize("m", [257, 300, 319, 320, 321, 350, 383, 384])
def test_the_320_and_384_token_rungs(m):
    # M = 257..320 and 321..384 run swap-AB tiles that cover 320 / 384 tokens (Rung320Policy,
    # Rung384Policy): four tiles of a quarter of the rung (1x2 cluster) where they fill the SM
    # waves better by more than 0.15, else two of half of it. At 384 rows, three 128-token
    # tiles 240 weights wide where they make one wave that fills the SMs better than that pick
    # by more than 0.15.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    quarter = 80 if m <= 320 else 96

    def filled(tiles):
        return tiles / (-(-tiles // sms) * sms)

    for n in (1024, 4096, 6144, 8192, 10240, 28672, 57344):
        weight_tiles = -(-n // 128)
        use_quarter = filled(4 * weight_tiles) > filled(2 * weight_tiles) + 0.15
        expected = f"swap_128x{quarter}x128_1x2_coop" if use_quarter else f"swap_128x{2 * quarter}x128_1x1_coop"
        one_wave = 3 * -(-n // 240)
        if m > 320 and one_wave <= sms and one_wave / sms > filled((4 if use_quarter else 2) * weight_tiles) + 0.15:
            expected = "128x240x128_1x1_coop"
        assert tuple(plan(m, n, 4096)) == (expected, "data_parallel", 1), (m, n)
    if m > 320:
        assert plan(m, 10240, 4096)[0] == "128x240x128_1x1_coop"
    for n, k in ((4096, 4096 + 16), (6144, 1040), (10240, 528), (264, 272)):
        _check(*mm_operands(m, n, k, "cuda"), out_dtype=torch.float16 if m % 2 else torch.bfloat16)


# --- CUDA graphs: operands rewritten right before the op, split-K, the decode entries ---------


@pytest.mark.parametrize("m", [1, 12, 40, 100, 200, 300])
def test_scaled_mm_reads_codes_written_just_before_it(m):
    """In a CUDA graph, each GEMM's codes and scales are rewritten by the copies right before
    it, and the next copy overwrites them while the GEMM may still be draining: every output
    has its own operands' bits (the GEMM waits for the kernel before it before any load)."""
    n, k = 2048, 4096
    a, b, sa, sb, bias = mm_operands(m, n, k, "cuda")
    sources = [(rand_int8(m, k, device="cuda"), rand_scale(m, 1, device="cuda")) for _ in range(3)]

    def step():
        outs = []
        for src_a, src_s in sources:
            a.copy_(src_a)
            sa.copy_(src_s)
            outs.append(op(a, b, sa, sb, bias, torch.bfloat16, "", None, "auto"))
        return torch.stack(outs)

    graph, out = capture_graph(step)
    for _ in range(3):
        for src_a, src_s in sources:
            src_a.copy_(rand_int8(m, k, device="cuda"))
            src_s.copy_(rand_scale(m, 1, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        for i, (src_a, src_s) in enumerate(sources):
            assert_exact(out[i], ref_scaled_mm(src_a, b, src_s, sb, bias, torch.bfloat16))


def test_split_k_in_a_cuda_graph():
    # The split-K fix-up needs its lock workspace zeroed before every launch: that memset
    # must be part of the graph, or the second replay deadlocks or reads stale partials.
    m, n, k = 4, 4096, 14336
    a, b, sa, sb, bias = mm_operands(m, n, k, "cuda")
    graph, out = capture_graph(lambda: op(a, b, sa, sb, bias, torch.bfloat16, "", 4, "auto"))
    for _ in range(5):
        a.copy_(rand_int8(m, k, device="cuda"))
        sa.copy_(rand_scale(m, 1, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        assert_exact(out, ref_scaled_mm(a, b, sa, sb, bias, torch.bfloat16))


@pytest.mark.parametrize("m", [2, 10])
def test_decode_entries_deterministic_and_graph_capturable(m):
    operands = mm_operands(m, 4096, 14336, "cuda")
    for config in DECODE:
        first = _run(*operands, config=config)
        for _ in range(20):
            assert torch.equal(_run(*operands, config=config), first), config
    a, b, sa, sb, bias = operands
    graph, out = capture_graph(lambda: op(a, b, sa, sb, bias, torch.bfloat16, "", None, "auto"))
    a.copy_(rand_int8(*a.shape, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    assert_exact(out, ref_scaled_mm(a, b, sa, sb, bias, torch.bfloat16))


# --- the library ---------------------------------------------------------------------------------


def test_built_kernels_use_igmma():
    tool = cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found")
    import w8a8._C as ext

    sass = subprocess.run([tool, "-sass", ext.__file__], capture_output=True, text=True, check=True).stdout
    assert "IGMMA" in sass, "no IGMMA in the SASS of w8a8._C: the sm90 kernels are not on the wgmma path"
