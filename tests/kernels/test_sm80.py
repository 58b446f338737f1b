"""The sm80 table (``w8a8::scaled_mm_sm80``, ``w8a8._C_sm80``, CUTLASS mma.sync): every
config entry forced by name, the M ladder's split-K rung past the M = 256 wave, CUDA
graphs, and the SASS. On an H100 these kernels run when named (the sm_90 SASS of the same
kernels); on an A100 / A10 / L4 / L40 they are the default. The shared per-kernel checks
(odd M, epilogues, strides, LLM shapes) run them in test_scaled_mm.py.
"""
import subprocess

import pytest
import torch

from w8a8 import dispatch
from helpers import (SM80, assert_exact, capture_graph, cuobjdump, mm_operands, poison_allocator, rand_int8,
                     ref_scaled_mm, requires_sm80)

pytestmark = [pytest.mark.cuda, requires_sm80]

NAMES = dispatch.config_names("sm80") if SM80 else ()
ENTRIES = list(NAMES) or ["<sm80 table: needs w8a8._C_sm80>"]
SPLIT_K_ENTRIES = [n for n in NAMES if "splitk" in n]
op = torch.ops.w8a8.scaled_mm_sm80 if SM80 else None
plan = torch.ops.w8a8.scaled_mm_sm80_plan if SM80 else None


def _check(*operands, out_dtype=torch.bfloat16, config=""):
    poison_allocator(operands[0].shape[0] * operands[1].shape[0] * 2, "cuda")
    out = op(*operands, out_dtype, config)
    torch.cuda.synchronize()
    assert_exact(out, ref_scaled_mm(*operands, out_dtype))
    return out


def test_the_table():
    assert NAMES and len(NAMES) == len(set(NAMES)), NAMES
    assert SPLIT_K_ENTRIES, f"no split-K entry in {NAMES}"
    assert dispatch.archs("sm80"), "no arch in w8a8._C_sm80"


@pytest.mark.parametrize("config", ENTRIES)
@pytest.mark.parametrize("m,n,k", [(1, 8, 16), (17, 136, 272), (129, 1000, 528), (300, 4096, 4096), (2048, 1024, 8192)])
def test_every_entry_forced_by_name(config, m, n, k):
    """Each entry, forced, on partial tiles in M, N and K."""
    _check(*mm_operands(m, n, k, "cuda"), config=config)


@pytest.mark.parametrize("config", ENTRIES)
@pytest.mark.parametrize("out_dtype,bias_kind", [(torch.bfloat16, "fp32"), (torch.float16, "out"), (torch.bfloat16, None)])
def test_every_entry_epilogue(config, out_dtype, bias_kind):
    bias_dtype = {None: None, "fp32": torch.float32, "out": out_dtype}[bias_kind]
    _check(*mm_operands(33, 136, 272, "cuda", per_token=False, bias_dtype=bias_dtype), out_dtype=out_dtype, config=config)


def test_an_unknown_entry_is_refused():
    with pytest.raises((ValueError, RuntimeError), match="no_such_entry"):
        op(*mm_operands(4, 64, 64, "cuda"), torch.bfloat16, "no_such_entry")


# The ladder splits K on narrow N with a long K just past a wave (4096 x 14336, M in (256, 288]),
# where the device holds three 70 KB CTAs per SM and has the H100's 132 SMs.
SPLIT_K_SHAPES = [(257, 4096, 14336), (263, 4096, 14336), (288, 4096, 14336)]


def _ladder_splits_here() -> bool:
    props = torch.cuda.get_device_properties(0)
    return props.multi_processor_count == 132 and getattr(props, "shared_memory_per_multiprocessor", 0) >= 3 * 70 * 1024


def test_ladder_takes_split_k_past_the_m256_wave():
    if not _ladder_splits_here():
        pytest.skip("the split-K rung is read for the H100's 132 SMs and 227 KB per SM")
    for m, n, k in SPLIT_K_SHAPES:
        assert plan(m, n, k) in SPLIT_K_ENTRIES, (m, n, k, plan(m, n, k))
    # Not where the K ranges would not fill the SMs three CTAs deep (short K, a 4th M tile, wide N).
    for m, n, k in [(256, 4096, 14336), (289, 4096, 14336), (257, 4096, 4096), (257, 6144, 4096), (257, 28672, 4096)]:
        assert plan(m, n, k) not in SPLIT_K_ENTRIES, (m, n, k)
        assert plan(m, n, k) in NAMES


@pytest.mark.parametrize("m,n,k", SPLIT_K_SHAPES)
@pytest.mark.parametrize("out_dtype,bias_kind", [(torch.bfloat16, "fp32"), (torch.float16, "out"), (torch.bfloat16, None)])
def test_split_k_shapes_through_the_ladder(m, n, k, out_dtype, bias_kind):
    """Exact int32 sums of the K ranges, then the one dequantization: the reference's bits."""
    bias_dtype = {None: None, "fp32": torch.float32, "out": out_dtype}[bias_kind]
    _check(*mm_operands(m, n, k, "cuda", bias_dtype=bias_dtype), out_dtype=out_dtype)


@pytest.mark.parametrize("per_token,per_channel", [(False, True), (True, False)])
def test_split_k_scalar_scales_and_row_strided_activation(per_token, per_channel):
    for config in SPLIT_K_ENTRIES:
        _check(*mm_operands(270, 4096, 14336, "cuda", per_token, per_channel, a_pad=32), config=config)


@pytest.mark.parametrize("m,n,k", [(300, 4096, 4096), (257, 4096, 14336)])
def test_deterministic_across_runs(m, n, k):
    """No atomics; the split-K entry adds its K ranges in a fixed order."""
    operands = mm_operands(m, n, k, "cuda")
    first = _check(*operands)
    for _ in range(20):
        assert torch.equal(op(*operands, torch.bfloat16, ""), first)


def test_split_k_in_a_cuda_graph():
    """The partial sums live in a workspace from the caching allocator: capturable, and each
    replay recomputes them from the new inputs."""
    m, n, k = 257, 4096, 14336
    a, b, sa, sb, bias = mm_operands(m, n, k, "cuda")
    config = SPLIT_K_ENTRIES[0]
    graph, out = capture_graph(lambda: op(a, b, sa, sb, bias, torch.bfloat16, config))
    for _ in range(2):
        a.copy_(rand_int8(m, k, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        assert_exact(out, ref_scaled_mm(a, b, sa, sb, bias, torch.bfloat16))


def test_sass_is_mma_sync_for_each_arch():
    tool = cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found")
    import w8a8._C_sm80 as ext

    listing = subprocess.run([tool, "--list-elf", ext.__file__], capture_output=True, text=True, check=True).stdout
    for arch in dispatch.archs("sm80"):
        assert f"sm_{arch}" in listing, f"no sm_{arch} cubin in w8a8._C_sm80"
    sass = subprocess.run([tool, "-sass", ext.__file__], capture_output=True, text=True, check=True).stdout
    assert "IMMA.16832.S8.S8" in sass, "no int8 mma.sync (IMMA.16832) in the SASS of w8a8._C_sm80"
    assert "IGMMA" not in sass, "wgmma in the sm80 library"
