"""Which kernel runs where: the defaults per device (the C++ router's rule where w8a8._C is
built, Triton's kernels on a GPU without it), a named unavailable kernel raising with the
reason, the fallback of operands the CUTLASS kernels cannot take (misaligned views, row
strides, K % 16, N % 8, fp32 out) warned once with the reason, and that the public op traces
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


@pytest.mark.skipif(dispatch.load("_C")[0], reason="needs w8a8._C unbuilt")
def test_without_the_library_a_gpu_runs_triton(monkeypatch):
    """Without w8a8._C (no CUDA build, or a GPU it is not built for) every op's default on a
    GPU is its Triton kernel, said without a warning: nothing faster is missing."""
    monkeypatch.setattr(dispatch, "_triton_installed", lambda: True)
    dispatch._best.cache_clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert {op: dispatch._best(op, "cuda", 0) for op in dispatch.BACKENDS} == dict.fromkeys(
                dispatch.BACKENDS, "triton")
    finally:
        dispatch._best.cache_clear()


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


def _offset_by_one(rows, cols, device="cpu"):
    return rand_int8(rows, cols + 16, device=device)[:, 1 : cols + 1]


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


@pytest.mark.sm90
@pytest.mark.parametrize("case", ["one_row", "pitch_48", "single_row_pitch"])
def test_cutlass_takes_16_byte_rows(case):
    """Operands with 16-byte rows run the CUTLASS kernels, no fallback: a single row (its
    pitch is never used), a row pitch of 48 (a multiple of 16, >= K)."""
    if not SM90:
        pytest.skip("needs the sm90 kernels as the default")
    a, b, sa, sb, bias = mm_operands(M, N, K, "cuda")
    if case == "one_row":
        a, sa = a[:1], sa[:1]
    elif case == "pitch_48":
        a = rand_int8(M, K + 16, device="cuda")[:, :K]
    else:
        a, sa = rand_int8(1, K + 8, device="cuda")[:, :K], sa[:1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = w8a8.ops.scaled_mm(a, b, sa, sb, bias, torch.bfloat16)
    assert_exact(out, ref_scaled_mm(a, b, sa, sb, bias, torch.bfloat16))


@pytest.mark.cuda
def test_kernels_built_for_this_gpu():
    """A device the libraries are built for, with a library missing, is a failure, not a skip."""
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) == (9, 0):
        assert dispatch.load("_C")[0], dispatch.load("_C")[1]
    if major in (8, 9):
        assert dispatch.load("_C_sm80")[0], dispatch.load("_C_sm80")[1]


def test_the_routers_warnings_are_python_warnings():
    """The C++ router says its fallbacks through w8a8::_warn (a torch.ops call does not turn a
    C++ TORCH_WARN into a Python warning): a UserWarning that filters see and can make an error."""
    with pytest.warns(UserWarning, match=r"^w8a8\.scaled_mm: a test$") as record:
        torch.ops.w8a8._warn("w8a8.scaled_mm: a test")
    assert record[0].filename == __file__  # the caller's line, not torch's or w8a8's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="a test"):
            torch.ops.w8a8._warn("w8a8.scaled_mm: a test")


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
        a = _offset_by_one(M, K, "cuda")
    torch.ops.w8a8._forget_warnings()  # the router warns once per message and process
    with pytest.warns(UserWarning, match=rf"^w8a8\.scaled_mm: the CUTLASS kernels cannot take .*{expected}.*; "
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

