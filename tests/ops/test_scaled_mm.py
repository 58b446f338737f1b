"""Every scaled_mm kernel available here against the exact reference, bit for bit
(``KERNEL_ULP`` in helpers.py): odd M, alignment edges, scalar and vector scales, bias
none / fp32 / out dtype, every output dtype the kernel writes, poisoned outputs,
row-strided operands. The sm90 and sm80 config tables: test_sm90.py, test_sm80.py.

On the CPU the Triton kernel runs in Triton's interpreter: its shapes here stay small.
"""
import pytest
import torch

import w8a8
from helpers import (assert_ulp_close, max_ulp, call_scaled_mm, kernel_params, mm_operands, poison_allocator, requires_sm90,
                     rand_int8, rand_scale, ref_scaled_mm)

CUTLASS = ("sm90", "sm80")
# A named CUTLASS kernel refuses what its TMA / cp.async rows cannot take (ValueError from the
# binding; the wording is the C++ side's, matched loosely).
REFUSED = r"^w8a8\.scaled_mm: the sm[89]0 kernels"


def _run(backend, a, b, sa, sb, bias, out_dtype):
    poison_allocator(a.shape[0] * b.shape[0] * 4, a.device)
    out = call_scaled_mm(backend, a, b, sa, sb, bias, out_dtype)
    assert out.shape == (a.shape[0], b.shape[0]) and out.dtype == out_dtype and out.device == a.device
    assert out.is_contiguous()
    return out


def _check(backend, *operands, out_dtype=torch.bfloat16):
    out = _run(backend, *operands, out_dtype)
    assert_ulp_close(out, ref_scaled_mm(*operands, out_dtype), max_ulp(backend, out.device, out_dtype))
    return out


@pytest.mark.parametrize("device,backend", kernel_params("scaled_mm"))
@pytest.mark.parametrize("m", [1, 3, 17, 33, 100])
def test_odd_m(device, backend, m):
    # N % 8 == 0 and K % 16 == 0: every kernel takes these; scale layouts rotate with M.
    _check(backend, *mm_operands(m, 48, 64, device, per_token=m % 2 == 1, per_channel=m != 3))


@pytest.mark.parametrize("device,backend", kernel_params("scaled_mm"))
@pytest.mark.parametrize("n,k", [(8, 16), (24, 48), (136, 272)])
def test_alignment_edges_that_every_kernel_takes(device, backend, n, k):
    _check(backend, *mm_operands(5, n, k, device))


@pytest.mark.parametrize("device,backend", kernel_params("scaled_mm"))
@pytest.mark.parametrize("n,k", [(7, 16), (8, 15), (1, 1), (100, 33), (24, 40)])
def test_alignment_edges_only_the_portable_kernels_take(device, backend, n, k):
    operands = mm_operands(3, n, k, device)
    if backend in CUTLASS:
        with pytest.raises(ValueError, match=REFUSED):
            call_scaled_mm(backend, *operands, torch.bfloat16)
        return
    _check(backend, *operands)


@pytest.mark.parametrize("device,backend", kernel_params("scaled_mm"))
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("per_token,per_channel", [(True, True), (False, True), (True, False), (False, False)])
@pytest.mark.parametrize("bias_kind", [None, "fp32", "out"])
def test_epilogue_variants(device, backend, out_dtype, per_token, per_channel, bias_kind):
    bias_dtype = {None: None, "fp32": torch.float32, "out": out_dtype}[bias_kind]
    operands = mm_operands(19, 40, 48, device, per_token, per_channel, bias_dtype)
    if backend in CUTLASS and out_dtype == torch.float32:  # they write bf16 / fp16 only
        with pytest.raises(ValueError, match=REFUSED):
            call_scaled_mm(backend, *operands, out_dtype)
        return
    _check(backend, *operands, out_dtype=out_dtype)


@pytest.mark.parametrize("device,backend", kernel_params("scaled_mm"))
@pytest.mark.parametrize("m", [1, 33])
def test_row_strided_operands(device, backend, m):
    """Strides are read from the tensors: a row stride K + 16 (16-byte rows) for every kernel,
    K + 5 (rows off the 16-byte grid) for the portable ones; b row-strided too."""
    k = 64
    a, b, sa, sb, bias = mm_operands(m, 40, k, device, a_pad=16)
    b = rand_int8(40, k + 32, device=device)[:, 16 : 16 + k]
    _check(backend, a, b, sa, sb, bias)
    odd = rand_int8(m, k + 5, device=device)[:, :k]
    if backend in CUTLASS:
        if m > 1:
            with pytest.raises(ValueError, match=REFUSED):
                call_scaled_mm(backend, odd, b, sa, sb, bias, torch.bfloat16)
        return
    _check(backend, odd, b, sa, sb, bias)


@pytest.mark.parametrize("device,backend", kernel_params("scaled_mm"))
def test_scale_and_bias_layouts(device, backend):
    """[M, 1] / [M] / 0-dim a_scale, [N] / [N, 1] / 0-dim b_scale, and scale and bias views
    one element off the 16-byte grid: scales and bias are read element by element."""
    m, n, k = 9, 24, 32
    a, b = rand_int8(m, k, device=device), rand_int8(n, k, device=device)
    bias = torch.randn(n + 1, device=device).to(torch.bfloat16)[1:]
    for sa, sb in [
        (rand_scale(m, 1, device=device), rand_scale(n, 1, device=device)),
        (rand_scale(m, device=device), rand_scale(n, device=device)),
        (rand_scale(device=device), rand_scale(device=device)),
        (rand_scale(m + 1, 1, device=device)[1:], rand_scale(n + 1, device=device)[1:]),
    ]:
        _check(backend, a, b, sa, sb, bias)


@pytest.mark.parametrize("device,backend", kernel_params("scaled_mm"))
def test_full_range_codes_accumulate_exactly(device, backend):
    # -128 * -128 summed over K = 1024 is 2^24: past fp32's exact integers once more is added.
    m, n, k = 5, 16, 1024
    a = torch.full((m, k), -128, dtype=torch.int8, device=device)
    b = torch.full((n, k), -128, dtype=torch.int8, device=device)
    b[1::2] = 127
    a[1, 0] = 127
    sa, sb = torch.ones(m, 1, device=device), torch.ones(n, device=device)
    _check(backend, a, b, sa, sb, None, out_dtype=torch.float16)


@pytest.mark.parametrize("device,backend", kernel_params("scaled_mm"))
def test_empty_problems(device, backend):
    """M = 0 and N = 0: empty outputs; K = 0: an empty sum, so out = bias (cast once)."""
    a, b, sa, sb, bias = mm_operands(5, 24, 32, device)
    assert _run(backend, a[:0], b, sa[:0], sb, bias, torch.bfloat16).shape == (0, 24)
    assert _run(backend, a[:0], b, rand_scale(1, device=device), sb, bias, torch.bfloat16).shape == (0, 24)
    assert _run(backend, a, b[:0], sa, sb[:0], bias[:0], torch.bfloat16).shape == (5, 0)
    out = _run(backend, a[:, :0], b[:, :0], sa, sb, bias, torch.bfloat16)
    assert_ulp_close(out, bias.to(torch.bfloat16).expand(5, 24).contiguous(), max_ulp(backend, device, out.dtype))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=str)
def test_public_op_equals_the_reference(device, out_dtype):
    """The op (backend None): the device's fastest kernel that takes the operands."""
    operands = mm_operands(17, 48, 64, device)
    assert_ulp_close(w8a8.ops.scaled_mm(*operands, out_dtype), ref_scaled_mm(*operands, out_dtype))
    assert_ulp_close(torch.ops.w8a8.scaled_mm(*operands, out_dtype), ref_scaled_mm(*operands, out_dtype))


# --- LLM shapes on the GPU: every CUDA kernel, the M sweep of the old per-kernel suites -----------

M_SWEEP = [1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 256, 1000, 2048, 4096]
NK = [(4096, 4096), (6144, 4096), (4096, 14336), (28672, 4096), (8, 16), (24, 48), (136, 272), (1000, 528)]


@pytest.mark.cuda
@pytest.mark.parametrize("device,backend", kernel_params("scaled_mm", devices=("cuda",)))
@pytest.mark.parametrize("n,k", NK)
@pytest.mark.parametrize("m", M_SWEEP)
def test_m_sweep_llm_shapes(device, backend, m, n, k):
    if m * n * k > 2**40:
        pytest.skip("large reference; covered by smaller N/K at this M")
    if backend == "reference":
        pytest.skip("the reference is the comparison")
    _check(backend, *mm_operands(m, n, k, device))


@pytest.mark.cuda
@pytest.mark.parametrize("device,backend", kernel_params("scaled_mm", devices=("cuda",)))
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("per_token,per_channel", [(True, True), (False, False)])
@pytest.mark.parametrize("m", [1, 17, 64, 129, 1000])
def test_gpu_epilogue_at_tile_sizes(device, backend, out_dtype, per_token, per_channel, m):
    _check(backend, *mm_operands(m, 1024, 512, device, per_token, per_channel, out_dtype), out_dtype=out_dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("device,backend", kernel_params("scaled_mm", devices=("cuda",)))
@pytest.mark.parametrize("m", [1, 33, 300])
def test_gpu_row_strided_activation(device, backend, m):
    _check(backend, *mm_operands(m, 2048, 4096, device, a_pad=64))



# --- the sm90 kernel's K decomposition from the public function ---------------------------------


@pytest.mark.parametrize("kwargs, backend, match", [
    ({"split_k": 2}, None, r"need backend='sm90', got backend=None \(split_k=2, scheduler='auto'\)"),
    ({"scheduler": "stream_k"}, "triton", r"need backend='sm90', got backend='triton'"),
    ({"scheduler": "fast"}, "sm90", r"scheduler must be one of \('auto', 'persistent', 'stream_k'\), got 'fast'"),
    ({"split_k": 2.0}, "sm90", r"split_k must be None or an int >= 1, got 2\.0"),
])
def test_split_k_refused_off_the_sm90_kernels(kwargs, backend, match):
    """split_k / scheduler name the sm90 kernels' decomposition: refused with the reason, before
    anything runs, wherever that kernel is not the one named."""
    with pytest.raises(ValueError, match=r"^w8a8\.scaled_mm: .*" + match):
        w8a8.ops.scaled_mm(*mm_operands(4, 32, 64), torch.bfloat16, backend=backend, **kwargs)


def test_split_k_on_the_cpu_names_the_device():
    with pytest.raises(RuntimeError, match=r"backend='sm90' is not available on cpu: the sm90 kernels need a CUDA"):
        w8a8.ops.scaled_mm(*mm_operands(4, 32, 64), torch.bfloat16, backend="sm90", split_k=2)


@requires_sm90
@pytest.mark.parametrize("m", [1, 16, 77, 300])
@pytest.mark.parametrize("kwargs", [{"split_k": 1}, {"split_k": 3}, {"split_k": 8}, {"scheduler": "stream_k"},
                                    {"scheduler": "persistent"}])
def test_split_k_from_the_public_function(m, kwargs):
    """Every decomposition is the exact reference, bit for bit (the partial sums are int32)."""
    operands = mm_operands(m, 256, 2048, "cuda")
    poison_allocator(m * 256 * 2, "cuda")
    out = w8a8.ops.scaled_mm(*operands, torch.bfloat16, backend="sm90", **kwargs)
    assert out.shape == (m, 256) and out.is_contiguous()
    assert_ulp_close(out, ref_scaled_mm(*operands, torch.bfloat16), 0)


@requires_sm90
def test_split_k_past_the_k_tiles_is_refused_with_the_bound():
    with pytest.raises(ValueError, match=r"split_k must be None \(heuristic\) or in \[1, 2\]"):
        w8a8.ops.scaled_mm(*mm_operands(4, 64, 256, "cuda"), torch.bfloat16, backend="sm90", split_k=3)
