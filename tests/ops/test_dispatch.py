"""What ``w8a8.dispatch`` chooses where: the defaults per device, a named unavailable kernel
raising with the reason, the fallback on a GPU warned once with the reason, the routing
predicate (misaligned views, row strides, K % 16, N % 8, fp32 out), and that it traces
under torch.compile without specialising on M."""
import warnings

import pytest
import torch

import w8a8
from w8a8 import dispatch
from helpers import SM90, assert_exact, mm_operands, rand_int8, ref_scaled_mm

M, N, K = 5, 24, 32


def test_backend_names():
    assert dispatch.BACKENDS == {
        "scaled_mm": ("sm90", "sm80", "triton", "reference"),
        "quantize_per_token": ("sm90", "triton", "reference"),
        "quantize_static": ("triton", "sm90", "reference"),
        "rms_norm_quant": ("triton", "reference"),
        "add_rms_norm_quant": ("triton", "reference"),
        "silu_mul_quant": ("triton", "reference"),
    }
    assert w8a8.dispatch.BACKENDS is dispatch.BACKENDS


@pytest.fixture
def fake_gpu(monkeypatch):
    """A CUDA device of a given compute capability, as the defaults see it (no GPU needed)."""
    monkeypatch.setattr(dispatch, "_triton_installed", lambda: True)

    def set_capability(capability):
        monkeypatch.setattr(dispatch, "_capability", lambda index: capability)
        dispatch._best.cache_clear()
        dispatch._warned.clear()

    yield set_capability
    dispatch._best.cache_clear()
    dispatch._warned.clear()


@pytest.mark.skipif(dispatch.load("_C")[0] or dispatch.load("_C_sm80")[0], reason="needs the libraries unbuilt")
def test_a_family_is_a_default_only_where_it_is_built(fake_gpu):
    """On a GPU a compiled family is not built for, the next kernel is the default without a
    warning; on one it is built for, its absence is a fallback, warned with the reason."""
    for capability in ((8, 0), (10, 0), (12, 0)):
        fake_gpu(capability)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert dispatch._best("quantize_per_token", "cuda", 0) == "triton"
            if capability[0] != 8:
                assert dispatch._best("scaled_mm", "cuda", 0) == "triton"
    fake_gpu((9, 0))
    with pytest.warns(RuntimeWarning, match=r"^w8a8\.quantize_per_token: using the 'triton' kernels on cuda:0: "
                                            r"'sm90' unavailable: w8a8\._C is not built"):
        assert dispatch._best("quantize_per_token", "cuda", 0) == "triton"


@pytest.mark.parametrize("op", list(dispatch.BACKENDS))
def test_the_cpu_runs_the_reference(op):
    assert dispatch.choose(op, torch.device("cpu")) == "reference"  # the interpreter is never a default
    assert dispatch.unavailable_reason(op, "reference", torch.device("cpu")) is None


@pytest.mark.parametrize("op,backend", [("scaled_mm", "sm90"), ("scaled_mm", "sm80"), ("quantize_per_token", "sm90"),
                                        ("quantize_static", "sm90")])
def test_a_named_cuda_kernel_on_the_cpu_raises_with_the_reason(op, backend):
    reason = dispatch.unavailable_reason(op, backend, torch.device("cpu"))
    assert reason == f"the {backend} kernels need a CUDA device (got cpu)"
    with pytest.raises(RuntimeError, match=rf"^w8a8\.{op}: backend='{backend}' is not available on cpu: "
                                           rf"the {backend} kernels need a CUDA device \(got cpu\)$"):
        dispatch.choose(op, torch.device("cpu"), backend)


def test_unknown_names():
    with pytest.raises(RuntimeError, match=r"backend='cutlass' is not available on cpu: unknown backend 'cutlass'"):
        w8a8.ops.scaled_mm(*mm_operands(M, N, K), backend="cutlass")
    with pytest.raises(RuntimeError, match=r"unknown backend 'sm80' for quantize_per_token"):
        w8a8.ops.quantize_per_token(torch.randn(2, 8), backend="sm80")
    with pytest.raises(ValueError, match=r"unknown op 'gemm'"):
        dispatch.unavailable_reason("gemm", "triton", torch.device("cpu"))


def test_triton_on_the_cpu_only_in_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # (conftest sets it only where there is no GPU)
    assert dispatch.unavailable_reason("scaled_mm", "triton", torch.device("cpu")) is None
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert "set TRITON_INTERPRET=1" in dispatch.unavailable_reason("scaled_mm", "triton", torch.device("cpu"))


def test_report_lists_every_kernel():
    status = dispatch.report()["cpu"]
    assert set(status) == {f"{op}/{b}" for op, names in dispatch.BACKENDS.items() for b in names}
    assert status["scaled_mm/reference"] == "available"


def test_extension_status_is_a_reason():
    for module in ("_C", "_C_sm80"):
        loaded, why = dispatch.load(module)
        assert why == "loaded" if loaded else f"w8a8.{module}" in why
    assert dispatch.config_names("sm90") == () or SM90


# --- the routing predicate ---------------------------------------------------------------------


def _offset_by_one(rows, cols):
    return rand_int8(rows, cols + 16)[:, 1 : cols + 1]


def test_cutlass_operand_reason():
    a, b = rand_int8(M, K), rand_int8(N, K)
    reason = dispatch.cutlass_operand_reason
    assert reason(a, b, torch.bfloat16) is None and reason(a, b, torch.float16) is None
    assert reason(a[:1], b, torch.bfloat16) is None
    assert reason(rand_int8(1, K + 8)[:, :K], b, torch.bfloat16) is None  # one row: its pitch is unused
    assert reason(rand_int8(M, K + 16)[:, :K], b, torch.bfloat16) is None  # pitch 48: 16-byte rows
    assert "storage offset 1" in reason(_offset_by_one(M, K), b, torch.bfloat16)
    assert "b's data pointer" in reason(a, _offset_by_one(N, K), torch.bfloat16)
    assert "a's row stride 40" in reason(rand_int8(M, K + 8)[:, :K], b, torch.bfloat16)
    assert "a's row stride 0" in reason(rand_int8(1, K).expand(M, K), b, torch.bfloat16)
    assert "K = 40" in reason(rand_int8(M, 40), rand_int8(N, 40), torch.bfloat16)
    assert "N = 20" in reason(a, rand_int8(20, K), torch.bfloat16)
    assert "out_dtype torch.float32" in reason(a, b, torch.float32)
    # What no kernel takes is left to the kernels' validation (the op's message).
    assert reason(rand_int8(K, M).t(), b, torch.bfloat16) is None
    assert reason(a[0], b, torch.bfloat16) is None
    assert reason(None, b, torch.bfloat16) is None
    assert reason(a[:0], b, torch.bfloat16) is None  # nothing runs


def test_the_public_op_is_opaque_under_compile():
    """The op chooses its kernel when it runs (the routing reads data pointers, which traced
    tensors lack): a compiled call holds the op, traces once for every M, equals eager."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(lambda *args: w8a8.ops.scaled_mm(*args), backend=counter, fullgraph=True, dynamic=True)
    for m in (3, 17, 100):
        operands = mm_operands(m, N, K)
        assert torch.equal(compiled(*operands), w8a8.ops.scaled_mm(*operands))
    assert counter.frame_count == 1, counter.frame_count


# --- on a GPU --------------------------------------------------------------------------------------


@pytest.mark.cuda
def test_gpu_defaults():
    dev = torch.device("cuda")
    if SM90:
        assert dispatch.choose("scaled_mm", dev) == "sm90"
    # The CUDA per-token quantizer where it is built (sm_90), Triton's elsewhere; Triton's static one.
    assert dispatch.choose("quantize_per_token", dev) == ("sm90" if SM90 else "triton")
    assert dispatch.choose("quantize_static", dev) == "triton"


@pytest.mark.cuda
@pytest.mark.skipif(not SM90, reason="the single op w8a8::linear_sm90 runs on sm90")
@pytest.mark.parametrize("n,m,single", [(4096, 1, True), (4096, 128, True), (4096, 192, True), (4096, 193, True),
                                        (4096, 256, True), (4096, 257, False), (6144, 129, True),
                                        (57344, 192, True), (6144, 2 * 97, True), (6144, 256, True),
                                        (6144, 2 * 129, False)])
def test_linear_single_op_token_limits(n, m, single):
    """w8a8::linear on sm90 runs the single op up to LINEAR_SM90_MAX_TOKENS tokens (those of
    all leading dimensions), whatever the GEMM's tile; above, quantize + scaled_mm."""
    x = torch.randn(2, m // 2, 4096, device="cuda", dtype=torch.bfloat16) if m % 2 == 0 else \
        torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
    kernel = dispatch.linear_kernel(x, rand_int8(n, 4096, device="cuda"))
    assert (getattr(kernel, "func", None) is torch.ops.w8a8.linear_sm90.default) is single, (n, m)


@pytest.mark.cuda
def test_kernels_built_for_this_gpu():
    """A device the libraries are built for, with a library missing, is a failure, not a skip."""
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) == (9, 0):
        assert dispatch.load("_C")[0], dispatch.load("_C")[1]
    if major in (8, 9):
        assert dispatch.load("_C_sm80")[0], dispatch.load("_C_sm80")[1]


@pytest.mark.sm90
@pytest.mark.parametrize("case,expected", [
    ("k40", r"K = 40, not a multiple of 16"),
    ("n20", r"N = 20, not a multiple of 8"),
    ("fp32", r"out_dtype torch\.float32"),
    ("row_stride", r"a's row stride 40"),
    ("offset", r"storage offset 1"),
])
def test_fallback_is_warned_once_with_the_reason_and_exact(case, expected):
    if not SM90:
        pytest.skip("needs the sm90 kernels as the default")
    a, b, sa, sb, bias = mm_operands(M, N, K, "cuda")
    out_dtype = torch.bfloat16
    if case == "k40":
        a, b = rand_int8(M, 40, device="cuda"), rand_int8(N, 40, device="cuda")
    elif case == "n20":
        b, sb, bias = rand_int8(20, K, device="cuda"), sb[:20].contiguous(), bias[:20].contiguous()
    elif case == "fp32":
        out_dtype = torch.float32
    elif case == "row_stride":
        a = rand_int8(M, K + 8, device="cuda")[:, :K]
    else:
        a = rand_int8(M, K + 16, device="cuda")[:, 1 : K + 1]
    dispatch._warned.clear()
    with pytest.warns(RuntimeWarning, match=rf"^w8a8\.scaled_mm: the CUTLASS kernels cannot take .*{expected}.*; "
                                            rf"using the 'triton' kernel$"):
        out = w8a8.ops.scaled_mm(a, b, sa, sb, bias, out_dtype)
    assert_exact(out, ref_scaled_mm(a, b, sa, sb, bias, out_dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: the second call is silent
        w8a8.ops.scaled_mm(a, b, sa, sb, bias, out_dtype)


@pytest.mark.cuda
def test_cpu_tensors_to_a_cuda_kernel_by_name():
    for op, backend, call in (
        ("scaled_mm", "triton", lambda: w8a8.ops.scaled_mm(*mm_operands(M, N, K), backend="triton")),
        ("quantize_per_token", "sm90", lambda: w8a8.ops.quantize_per_token(torch.randn(3, 16), backend="sm90")),
    ):
        if dispatch.unavailable_reason(op, backend, torch.device("cuda")) is not None:
            continue
        with pytest.raises(RuntimeError, match=rf"^w8a8\.{op}: backend='{backend}' is not available on cpu"):
            call()

