"""CUTLASS sm80 (mma.sync) scaled_mm against the exact reference.

On an H100 this path runs because it is asked for by name
(``backend="cutlass_sm80"``, the sm_90 SASS of the same kernels); on an A100 /
A10 / L4 / L40 it is what ``backend="cutlass"`` runs.
"""
import subprocess

import pytest
import torch

import w8a8
from w8a8 import _extension, backends, reference
from helpers import (assert_ulp_close, capture_graph, check_w8a8linear_graph, poison_allocator, rand_int8,
                     rand_scale)
from test_cutlass_sm90 import _cuobjdump

pytestmark = pytest.mark.cuda
BACKEND = "cutlass_sm80"


@pytest.fixture(autouse=True)
def _need_sm80_kernels():
    reason = backends.unavailable_reason(BACKEND, torch.device("cuda"), "scaled_mm")
    if reason is not None:
        major, _ = torch.cuda.get_device_capability()
        if major in (8, 9):  # a device this path is built for: missing kernels are a failure
            pytest.fail(f"CUDA {major}.x is available but the sm80 CUTLASS kernels are not: {reason}")
        pytest.skip(reason)


M_SWEEP = [1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 256, 1000, 2048]
SM80_CONFIGS = _extension.cutlass_sm80_config_names()  # empty where w8a8._C_sm80 is not built
NK = [(4096, 4096), (4096, 14336), (28672, 4096), (8, 16), (24, 48), (136, 272), (1000, 528)]


def _operands(m, n, k, per_token=True, per_channel=True, bias_dtype=torch.float32):
    dev = "cuda"
    a = rand_int8(m, k, device=dev)
    b = rand_int8(n, k, device=dev)
    sa = rand_scale(m, 1, device=dev) if per_token else rand_scale(1, device=dev)
    sb = rand_scale(n, device=dev) if per_channel else rand_scale(1, device=dev)
    bias = None if bias_dtype is None else torch.randn(n, device=dev).to(bias_dtype)
    return a, b, sa, sb, bias


def _check(m, n, k, out_dtype=torch.bfloat16, per_token=True, per_channel=True, bias_dtype=torch.float32,
           a=None, config_id=-1):
    a_new, b, sa, sb, bias = _operands(m, n, k, per_token, per_channel, bias_dtype)
    a = a_new if a is None else a
    poison_allocator(m * n * 2, "cuda")
    if config_id < 0:
        out = w8a8.scaled_mm(a, b, sa, sb, bias, out_dtype, backend=BACKEND)
    else:
        out = torch.ops.w8a8.scaled_mm_cutlass_sm80(a, b, sa, sb, bias, out_dtype, config_id)
    torch.cuda.synchronize()
    assert_ulp_close(out, reference.scaled_mm(a, b, sa, sb, bias, out_dtype), max_ulp=1)


@pytest.mark.parametrize("n,k", NK)
@pytest.mark.parametrize("m", M_SWEEP)
def test_m_sweep(m, n, k):
    if m * n * k > 2**40:
        pytest.skip("large reference; covered by smaller N/K at this M")
    _check(m, n, k)


@pytest.mark.parametrize("config_id", range(len(SM80_CONFIGS)))
@pytest.mark.parametrize("m,n,k", [(1, 8, 16), (17, 136, 272), (129, 1000, 528), (300, 4096, 4096), (2048, 1024, 8192)])
def test_every_config(config_id, m, n, k):
    """Each entry of the config table (one past the last is refused in test_refusals_...), forced,
    on partial tiles in M, N and K."""
    _check(m, n, k, config_id=config_id)


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("per_token,per_channel", [(True, True), (False, True), (True, False), (False, False)])
@pytest.mark.parametrize("bias_dtype", [None, torch.float32, "out"])
@pytest.mark.parametrize("m", [1, 17, 64, 129, 1000])
def test_epilogue_variants(out_dtype, per_token, per_channel, bias_dtype, m):
    _check(m, 1024, 512, out_dtype, per_token, per_channel, out_dtype if bias_dtype == "out" else bias_dtype)


def test_unaligned_scale_and_bias_views():
    """Scales and bias are read element by element: views off the 16-byte grid are fine."""
    m, n, k = 33, 136, 272
    a, b = rand_int8(m, k, device="cuda"), rand_int8(n, k, device="cuda")
    sa = rand_scale(m + 1, 1, device="cuda")[1:]
    sb = rand_scale(n + 1, device="cuda")[1:]
    bias = torch.randn(n + 1, device="cuda").to(torch.bfloat16)[1:]
    out = w8a8.scaled_mm(a, b, sa, sb, bias, torch.bfloat16, backend=BACKEND)
    assert_ulp_close(out, reference.scaled_mm(a, b, sa, sb, bias, torch.bfloat16), max_ulp=1)


@pytest.mark.parametrize("m", [1, 33, 300])
def test_row_strided_activation(m):
    wide = rand_int8(m, 4096 + 64, device="cuda")
    _check(m, 2048, 4096, a=wide[:, 32 : 32 + 4096])


def test_m_zero_and_k_zero():
    b = rand_int8(64, 128, device="cuda")
    out = w8a8.scaled_mm(rand_int8(0, 128, device="cuda"), b, rand_scale(0, 1, device="cuda"),
                         rand_scale(64, device="cuda"), backend=BACKEND)
    assert out.shape == (0, 64)
    a0, b0 = rand_int8(5, 0, device="cuda"), rand_int8(8, 0, device="cuda")
    sa, sb, bias = rand_scale(5, 1, device="cuda"), rand_scale(8, device="cuda"), torch.randn(8, device="cuda")
    out = w8a8.scaled_mm(a0, b0, sa, sb, bias, backend=BACKEND)
    assert torch.equal(out, reference.scaled_mm(a0, b0, sa, sb, bias, torch.bfloat16))


def test_refusals_name_the_op_and_values():
    a, b = rand_int8(4, 40, device="cuda"), rand_int8(24, 40, device="cuda")  # K % 16 != 0
    sa, sb = rand_scale(4, 1, device="cuda"), rand_scale(24, device="cuda")
    with pytest.raises(ValueError, match=r"backend='cutlass_sm80' needs K % 16 == 0 .* got K = 40"):
        w8a8.scaled_mm(a, b, sa, sb, backend=BACKEND)
    wide = rand_int8(4, 64 + 1, device="cuda")
    with pytest.raises(RuntimeError, match=r"cutlass_sm80.*16-byte aligned \(cp.async\)"):
        torch.ops.w8a8.scaled_mm_cutlass_sm80(wide[:, 1:], rand_int8(24, 64, device="cuda"), sa, sb, None,
                                               torch.bfloat16)
    past_the_table = len(SM80_CONFIGS)
    with pytest.raises(RuntimeError, match=rf"cutlass_sm80.*config_id must be -1 .* got {past_the_table}"):
        torch.ops.w8a8.scaled_mm_cutlass_sm80(rand_int8(4, 64, device="cuda"), rand_int8(24, 64, device="cuda"),
                                               sa, sb, None, torch.bfloat16, past_the_table)
    with pytest.raises(ValueError, match=r"backend='cutlass_sm80' does not split K"):
        w8a8.scaled_mm(rand_int8(4, 256, device="cuda"), rand_int8(24, 256, device="cuda"), sa, sb,
                       backend=BACKEND, split_k=2)


def test_opcheck():
    for m in (1, 100):
        args = (rand_int8(m, 256, device="cuda"), rand_int8(128, 256, device="cuda"), rand_scale(m, 1, device="cuda"),
                rand_scale(128, device="cuda"), None, torch.bfloat16)
        torch.library.opcheck(torch.ops.w8a8.scaled_mm_cutlass_sm80, args)


@pytest.mark.parametrize("m,n,k", [(300, 4096, 4096), (257, 4096, 14336)])
def test_deterministic_across_runs(m, n, k):
    """No atomics; the split-K config (second shape, on an H100) adds its K ranges in a fixed
    order: every run gives the same bits."""
    a, b, sa, sb, bias = _operands(m, n, k)
    first = w8a8.scaled_mm(a, b, sa, sb, bias, backend=BACKEND)
    for _ in range(20):
        assert torch.equal(w8a8.scaled_mm(a, b, sa, sb, bias, backend=BACKEND), first)


SPLIT_K_CONFIG = SM80_CONFIGS.index("96x128x64_w48x64x64_s5_splitk") if SM80_CONFIGS else -1
# The ladder splits K on narrow N with a long K just past a wave (4096 x 14336, M in (256, 288]),
# where the device holds three 70 KB CTAs per SM and has the H100's 132 SMs.
SPLIT_K_SHAPES = [(257, 4096, 14336), (263, 4096, 14336), (288, 4096, 14336)]


def _ladder_splits_here() -> bool:
    props = torch.cuda.get_device_properties(0)
    shared_per_sm = getattr(props, "shared_memory_per_multiprocessor", 0)
    return props.multi_processor_count == 132 and shared_per_sm >= 3 * 70 * 1024


def test_ladder_takes_split_k_past_the_m256_wave():
    if not _ladder_splits_here():
        pytest.skip("the split-K rung is read for the H100's 132 SMs and 227 KB per SM")
    for m, n, k in SPLIT_K_SHAPES:
        assert torch.ops.w8a8.scaled_mm_cutlass_sm80_config(m, n, k) == SPLIT_K_CONFIG, (m, n, k)
    # Not where the K ranges would not fill the SMs three CTAs deep (short K, a 4th M tile, wide N).
    for m, n, k in [(256, 4096, 14336), (289, 4096, 14336), (257, 4096, 4096), (257, 6144, 4096),
                    (257, 28672, 4096)]:
        assert torch.ops.w8a8.scaled_mm_cutlass_sm80_config(m, n, k) != SPLIT_K_CONFIG, (m, n, k)


@pytest.mark.parametrize("m,n,k", SPLIT_K_SHAPES)
@pytest.mark.parametrize("out_dtype,bias_dtype", [(torch.bfloat16, torch.float32), (torch.float16, "out"),
                                                  (torch.bfloat16, None)])
def test_split_k_shapes_through_the_ladder(m, n, k, out_dtype, bias_dtype):
    """Exact int32 sums of the K ranges, then the one dequantization: within 1 ulp of the reference."""
    _check(m, n, k, out_dtype, bias_dtype=out_dtype if bias_dtype == "out" else bias_dtype)


@pytest.mark.parametrize("per_token,per_channel", [(False, True), (True, False)])
def test_split_k_scalar_scales_and_row_strided_activation(per_token, per_channel):
    m, k = 270, 14336
    wide = rand_int8(m, k + 32, device="cuda")
    _check(m, 4096, k, per_token=per_token, per_channel=per_channel, a=wide[:, 16 : 16 + k])


def test_split_k_in_a_cuda_graph():
    """The partial sums live in a workspace from the caching allocator: capturable, and each
    replay recomputes them from the new inputs."""
    m, n, k = 257, 4096, 14336
    a, b, sa, sb, bias = _operands(m, n, k)
    graph, out = capture_graph(lambda: w8a8.scaled_mm(a, b, sa, sb, bias, backend=BACKEND))
    for _ in range(2):
        a.copy_(rand_int8(m, k, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        assert_ulp_close(out, reference.scaled_mm(a, b, sa, sb, bias, torch.bfloat16), max_ulp=1)


@pytest.mark.parametrize("m", [1, 16, 200])
def test_w8a8linear_cuda_graph(m):
    check_w8a8linear_graph(BACKEND, m)


def test_w8a8linear_compiles_without_graph_breaks():
    lin = torch.nn.Linear(512, 256, bias=False, device="cuda", dtype=torch.bfloat16)
    layer = w8a8.W8A8Linear.from_linear(lin, backend=BACKEND)
    x = torch.randn(7, 512, device="cuda", dtype=torch.bfloat16)
    compiled = torch.compile(layer, fullgraph=True)
    assert torch.equal(compiled(x), layer(x))


def test_sass_is_mma_sync_for_each_arch():
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found")
    import w8a8._C_sm80 as ext

    listing = subprocess.run([tool, "--list-elf", ext.__file__], capture_output=True, text=True, check=True).stdout
    for arch in _extension.cutlass_sm80_archs():
        assert f"sm_{arch}" in listing, f"no sm_{arch} cubin in w8a8._C_sm80"
    sass = subprocess.run([tool, "-sass", ext.__file__], capture_output=True, text=True, check=True).stdout
    assert "IMMA.16832.S8.S8" in sass, "no int8 mma.sync (IMMA.16832) in the SASS of w8a8._C_sm80"
    assert "IGMMA" not in sass, "wgmma in the sm80 library"
