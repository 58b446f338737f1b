"""CUTLASS sm90 scaled_mm on a Hopper GPU, against the exact reference."""
import glob
import os
import shutil
import subprocess

import pytest
import torch

import w8a8
from w8a8 import _extension, backends, reference
from helpers import assert_ulp_close, check_w8a8linear_graph, poison_allocator, rand_int8, rand_scale

pytestmark = pytest.mark.sm90


def _cutlass_ready():
    if not torch.cuda.is_available():
        return False
    return backends.unavailable_reason("cutlass", torch.device("cuda"), "scaled_mm") is None


@pytest.fixture(autouse=True)
def _need_cutlass():
    if torch.cuda.is_available() and not _cutlass_ready():
        pytest.fail(f"CUDA is available but CUTLASS is not: {backends.unavailable_reason('cutlass', torch.device('cuda'))}")


M_SWEEP = [1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 256, 1000, 2048, 4096]
NK = [(4096, 4096), (6144, 4096), (4096, 14336), (28672, 4096), (8, 16), (24, 48), (136, 272), (1000, 528)]


def _check(m, n, k, out_dtype=torch.bfloat16, per_token=True, per_channel=True, bias_dtype=torch.float32, a=None):
    dev = "cuda"
    a = rand_int8(m, k, device=dev) if a is None else a
    b = rand_int8(n, k, device=dev)
    sa = rand_scale(m, 1, device=dev) if per_token else rand_scale(1, device=dev)
    sb = rand_scale(n, device=dev) if per_channel else rand_scale(1, device=dev)
    bias = None if bias_dtype is None else torch.randn(n, device=dev).to(bias_dtype)
    poison_allocator(m * n * 2, dev)
    out = w8a8.scaled_mm(a, b, sa, sb, bias, out_dtype, backend="cutlass")
    torch.cuda.synchronize()
    ref = reference.scaled_mm(a, b, sa, sb, bias, out_dtype)
    assert_ulp_close(out, ref, max_ulp=1)


@pytest.mark.parametrize("n,k", NK)
@pytest.mark.parametrize("m", M_SWEEP)
def test_m_sweep(m, n, k):
    if m * n * k > 2**40:
        pytest.skip("large reference; covered by smaller N/K at this M")
    _check(m, n, k)


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("per_token,per_channel", [(True, True), (False, True), (True, False), (False, False)])
@pytest.mark.parametrize("bias_dtype", [None, torch.float32, "out"])
@pytest.mark.parametrize("m", [1, 17, 64, 129, 1000])
def test_epilogue_variants(out_dtype, per_token, per_channel, bias_dtype, m):
    _check(m, 1024, 512, out_dtype, per_token, per_channel, out_dtype if bias_dtype == "out" else bias_dtype)


@pytest.mark.parametrize("m", [1, 33, 300])
def test_row_strided_activation(m):
    wide = rand_int8(m, 4096 + 64, device="cuda")
    _check(m, 2048, 4096, a=wide[:, 32 : 32 + 4096])


def test_m_zero_returns_empty():
    b = rand_int8(64, 128, device="cuda")
    out = w8a8.scaled_mm(rand_int8(0, 128, device="cuda"), b, rand_scale(0, 1, device="cuda"), rand_scale(64, device="cuda"), backend="cutlass")
    assert out.shape == (0, 64)


def test_misaligned_shapes_are_refused_or_routed():
    a, b = rand_int8(4, 40, device="cuda"), rand_int8(24, 40, device="cuda")  # K % 16 != 0
    sa, sb = rand_scale(4, 1, device="cuda"), rand_scale(24, device="cuda")
    with pytest.raises(ValueError, match=r"backend='cutlass' needs K % 16 == 0 .* got K = 40"):
        w8a8.scaled_mm(a, b, sa, sb, backend="cutlass")
    with pytest.warns(RuntimeWarning, match="CUTLASS cannot take K = 40"):
        out = w8a8.scaled_mm(a, b, sa, sb)
    assert_ulp_close(out, reference.scaled_mm(a, b, sa, sb), max_ulp=1)
    # A data pointer off the 16-byte grid: the binding says so.
    wide = rand_int8(4, 64 + 1, device="cuda")
    with pytest.raises(RuntimeError, match="align"):
        torch.ops.w8a8.scaled_mm_cutlass(wide[:, 1:], rand_int8(24, 64, device="cuda"), sa, sb, None, torch.bfloat16)


def test_opcheck_cuda():
    for m in (1, 100):
        args = (rand_int8(m, 256, device="cuda"), rand_int8(128, 256, device="cuda"), rand_scale(m, 1, device="cuda"), rand_scale(128, device="cuda"), None, torch.bfloat16)
        torch.library.opcheck(torch.ops.w8a8.scaled_mm_cutlass, args)


def test_default_backend_on_hopper_is_cutlass():
    assert backends.resolve(None, torch.device("cuda"), "scaled_mm") == "cutlass"


@pytest.mark.parametrize("m", [1, 16, 200])
def test_cuda_graph_capture_of_w8a8linear(m):
    check_w8a8linear_graph("cutlass", m)


def _cuobjdump():
    found = shutil.which("cuobjdump") or next(iter(glob.glob("/usr/local/cuda*/bin/cuobjdump")), None)
    if found is None:
        import triton

        found = next(iter(glob.glob(os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump"))), None)
    return found


def test_built_kernels_use_igmma():
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found")
    import w8a8._C as ext

    sass = subprocess.run([tool, "-sass", ext.__file__], capture_output=True, text=True, check=True).stdout
    assert "IGMMA" in sass, "no IGMMA in the SASS of w8a8._C: the sm90 kernels are not on the wgmma path"
    assert _extension.cutlass_archs() == (90,) or 90 in _extension.cutlass_archs()
