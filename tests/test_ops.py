"""The op layer: opcheck of every registered op, validation errors, backend choice."""
import pytest
import torch

import w8a8
from w8a8 import _extension, backends, reference
from helpers import assert_ulp_close, rand_int8, rand_scale

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _available(backend, device, op="scaled_mm"):
    return backends.unavailable_reason(backend, torch.device(device), op) is None


def _backend_params():
    out = []
    for device in DEVICES:
        for backend in ("reference", "triton", "cutlass", "cuda"):
            out.append(pytest.param(device, backend, id=f"{device}-{backend}"))
    return out


def _scaled_mm_args(m, n, k, device, per_token=True, per_channel=True, bias_dtype=torch.float32):
    a, b = rand_int8(m, k, device=device), rand_int8(n, k, device=device)
    a_scale = rand_scale(m, 1, device=device) if per_token else rand_scale(1, device=device)
    b_scale = rand_scale(n, device=device) if per_channel else rand_scale(1, device=device)
    bias = None if bias_dtype is None else torch.randn(n, device=device).to(bias_dtype)
    return a, b, a_scale, b_scale, bias


@pytest.mark.parametrize("device,backend", [p for p in _backend_params() if p.values[1] != "cuda"])
def test_opcheck_scaled_mm(device, backend):
    if not _available(backend, device):
        pytest.skip(backends.unavailable_reason(backend, torch.device(device)))
    op = getattr(torch.ops.w8a8, f"scaled_mm_{backend}")
    for m, bias_dtype in ((17, torch.float32), (1, None), (32, torch.bfloat16)):
        a, b, sa, sb, bias = _scaled_mm_args(m, 64, 128, device, bias_dtype=bias_dtype)
        torch.library.opcheck(op, (a, b, sa, sb, bias, torch.bfloat16))


@pytest.mark.parametrize("device,backend", [p for p in _backend_params() if p.values[1] != "cutlass"])
def test_opcheck_quantize(device, backend):
    if not _available(backend, device, "quantize_per_token"):
        pytest.skip(backends.unavailable_reason(backend, torch.device(device), "quantize_per_token"))
    x = torch.randn(3, 5, 48, device=device, dtype=torch.bfloat16)
    torch.library.opcheck(getattr(torch.ops.w8a8, f"quantize_per_token_{backend}"), (x,))
    scale = torch.tensor([0.02], device=device)
    zp = torch.tensor([3], dtype=torch.int32, device=device)
    op = getattr(torch.ops.w8a8, f"quantize_static_{backend}")
    torch.library.opcheck(op, (x, scale, None))
    torch.library.opcheck(op, (x, scale, zp))


@pytest.mark.parametrize("device,backend", [p for p in _backend_params() if p.values[1] != "cuda"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_scaled_mm_backends_match_reference(device, backend, out_dtype):
    if not _available(backend, device):
        pytest.skip(backends.unavailable_reason(backend, torch.device(device)))
    if backend == "cutlass" and out_dtype == torch.float32:
        with pytest.raises(ValueError, match=r"backend='cutlass' writes .* got out_dtype=torch.float32"):
            w8a8.scaled_mm(*_scaled_mm_args(4, 16, 32, device), torch.float32, backend="cutlass")
        return
    for m, n, k, per_token, per_channel, bias_dtype in (
        (1, 32, 64, True, True, torch.float32),
        (3, 48, 32, False, True, None),
        (17, 16, 48, True, False, out_dtype),
        (33, 64, 128, False, False, torch.float32),
    ):
        a, b, sa, sb, bias = _scaled_mm_args(m, n, k, device, per_token, per_channel, bias_dtype)
        out = w8a8.scaled_mm(a, b, sa, sb, bias, out_dtype, backend=backend)
        ref = reference.scaled_mm(a.cpu(), b.cpu(), sa.cpu(), sb.cpu(), None if bias is None else bias.cpu(), out_dtype)
        assert_ulp_close(out, ref, max_ulp=1)


def test_scaled_mm_handles_m_zero():
    a, b, sa, sb, bias = _scaled_mm_args(0, 16, 32, "cpu")
    out = w8a8.scaled_mm(a, b, sa, sb, bias)
    assert out.shape == (0, 16) and out.dtype == torch.bfloat16


def test_reference_honours_strides():
    wide = rand_int8(9, 96)
    a = wide[:, 10:74]  # row stride 96, not contiguous
    b = rand_int8(40, 64)
    sa, sb = rand_scale(9, 1), rand_scale(40)
    out = w8a8.scaled_mm(a, b, sa, sb, backend="reference")
    assert torch.equal(out, reference.scaled_mm(a.contiguous(), b, sa, sb))


# --- validation: every error names the op, the expectation and the actual value ----------


def _good():
    return dict(a=rand_int8(4, 32), b=rand_int8(16, 32), a_scale=rand_scale(4, 1), b_scale=rand_scale(16))


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(a=torch.randn(4, 32)), r"scaled_mm: a must be int8, got torch.float32"),
        (dict(b=torch.zeros(16, 32, dtype=torch.int32)), r"scaled_mm: b must be int8, got torch.int32"),
        (dict(a=rand_int8(2, 4, 32)), r"a must be 2-D \[M, K\], got shape \(2, 4, 32\)"),
        (dict(b=rand_int8(16, 31)), r"b must be \[N, K\] with K = 32 .* got \(16, 31\)"),
        (dict(a_scale=rand_scale(4, 1).double()), r"a_scale must be float32, got torch.float64"),
        (dict(a_scale=rand_scale(5, 1)), r"a_scale must be \[M, 1\] = \[4, 1\] .* got \(5, 1\)"),
        (dict(a_scale=rand_scale(4)), r"a_scale must be \[M, 1\] = \[4, 1\] .* got \(4,\)"),
        (dict(b_scale=rand_scale(15)), r"b_scale must be \[N\] = \[16\], \[N, 1\] or \[1\], got \(15,\)"),
        (dict(bias=torch.randn(15)), r"bias must be \[N\] = \[16\], got \(15,\)"),
        (dict(bias=torch.randn(16).half()), r"bias must be float32 or out_dtype \(torch.bfloat16\), got torch.float16"),
        (dict(out_dtype=torch.int32), r"out_dtype must be one of .* got torch.int32"),
        (dict(a=torch.randn(4, 32), b=None), r"b must be a tensor, got NoneType"),
    ],
)
def test_scaled_mm_validation_errors(change, match):
    args = {**_good(), "bias": None, "out_dtype": torch.bfloat16, **change}
    with pytest.raises(ValueError, match=r"^w8a8\." + r".*" + match):
        w8a8.scaled_mm(**args)


def test_kernel_backends_refuse_strided_k():
    if not _available("triton", "cpu"):
        pytest.skip("needs TRITON_INTERPRET=1")
    g = _good()
    a = rand_int8(32, 4).t()  # [4, 32] with stride (1, 4)
    with pytest.raises(ValueError, match=r"backend='triton' needs a with unit stride along K, got strides \(1, 4\)"):
        w8a8.scaled_mm(a, g["b"], g["a_scale"], g["b_scale"], backend="triton")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks CPU-only errors")
def test_unavailable_backend_is_an_error_that_says_why():
    g = _good()
    with pytest.raises(RuntimeError, match=r"w8a8.scaled_mm: backend='cutlass' is not available: CUTLASS kernels need a CUDA device \(got cpu\)"):
        w8a8.scaled_mm(**g, backend="cutlass")
    with pytest.raises(RuntimeError, match=r"backend='nope' is not available: unknown backend 'nope'"):
        w8a8.scaled_mm(**g, backend="nope")
    with pytest.raises(RuntimeError, match=r"w8a8.quantize_per_token: backend='cutlass' is not available: there is no CUTLASS kernel"):
        w8a8.quantize_per_token(torch.randn(2, 8), backend="cutlass")


def test_default_backend_on_cpu_is_reference():
    assert backends.resolve(None, torch.device("cpu"), "scaled_mm") == "reference"
    assert backends.resolve(None, torch.device("cpu"), "quantize_per_token") == "reference"


def test_quantize_validation_errors():
    with pytest.raises(ValueError, match=r"w8a8.quantize_per_token: x must be one of .* got torch.int8"):
        w8a8.quantize_per_token(rand_int8(2, 8))
    with pytest.raises(ValueError, match=r"w8a8.quantize_per_token: x must have at least 1 dimension"):
        w8a8.quantize_per_token(torch.tensor(1.0))
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match=r"w8a8.quantize_static: scale must be float32, got torch.float16"):
        w8a8.quantize_static(x, torch.tensor([0.1], dtype=torch.float16))
    with pytest.raises(ValueError, match=r"w8a8.quantize_static: scale must hold one value \(shape \[1\]\), got shape \(2,\)"):
        w8a8.quantize_static(x, torch.tensor([0.1, 0.2]))
    with pytest.raises(ValueError, match=r"w8a8.quantize_static: zero_point must be int8 or int32, got torch.float32"):
        w8a8.quantize_static(x, torch.tensor([0.1]), torch.tensor([1.0]))


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_wrappers_match_reference(device):
    x = torch.randn(4, 3, 200, device=device, dtype=torch.bfloat16)
    q, s = w8a8.quantize_per_token(x)
    rq, rs = reference.quantize_per_token(x.cpu())
    assert torch.equal(q.cpu(), rq) and torch.equal(s.cpu(), rs)
    scale = torch.tensor([0.01], device=device)
    zp = torch.tensor([-5], dtype=torch.int8, device=device)
    assert torch.equal(w8a8.quantize_static(x, scale, zp).cpu(), reference.quantize_static(x.cpu(), scale.cpu(), zp.cpu()))


def test_extension_status_is_reported():
    loaded, why = _extension.load()
    assert isinstance(why, str) and why
    if not loaded:
        assert "w8a8._C" in why


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"split_k": 0}, r"split_k must be None \(heuristic\) or an int >= 1, got 0"),
        ({"split_k": -2}, "got -2"),
        ({"split_k": True}, "got True"),
        ({"split_k": 2.0}, "got 2.0"),
        ({"scheduler": "fast"}, r"scheduler must be one of \('auto', 'persistent', 'streamk'\), got 'fast'"),
        ({"split_k": 2, "scheduler": "persistent"}, "split_k=2 needs scheduler='auto'"),
        ({"split_k": 5}, r"split_k must be at most 2 \(one split per 128-wide K tile, K = 160\), got 5"),
    ],
)
def test_split_k_values_are_checked(kwargs, match):
    a, b, sa, sb, bias = _scaled_mm_args(3, 8, 160, "cpu")
    with pytest.raises(ValueError, match=r"w8a8.scaled_mm: .*" + match):
        w8a8.scaled_mm(a, b, sa, sb, bias, **kwargs)


def test_split_k_is_a_cutlass_option():
    a, b, sa, sb, bias = _scaled_mm_args(3, 8, 160, "cpu")
    with pytest.raises(ValueError, match="backend='reference' does not split K"):
        w8a8.scaled_mm(a, b, sa, sb, bias, backend="reference", split_k=2)
    with pytest.raises(ValueError, match="backend='reference' does not split K"):
        w8a8.scaled_mm(a, b, sa, sb, bias, backend="reference", scheduler="streamk")
    # No split asked for: fine on any backend; with the backend chosen automatically the
    # request is a hint the reference path runs unsplit (same bits: int32 partial sums).
    expected = reference.scaled_mm(a, b, sa, sb, bias)
    assert torch.equal(w8a8.scaled_mm(a, b, sa, sb, bias, backend="reference", split_k=1, scheduler="persistent"), expected)
    assert torch.equal(w8a8.scaled_mm(a, b, sa, sb, bias, split_k=2), expected)


def test_w8a8linear_checks_split_settings():
    layer = w8a8.W8A8Linear(256, 16, split_k=2)
    assert layer.split_k == 2 and "split_k=2" in repr(layer)
    with pytest.raises(ValueError, match=r"w8a8.W8A8Linear: split_k must be at most 2"):
        layer.split_k = 3
    with pytest.raises(ValueError, match="split_k=2 needs scheduler='auto'"):
        layer.scheduler = "streamk"
    assert layer.scheduler == "auto"
    with pytest.raises(ValueError, match="backend='triton' does not split K"):
        w8a8.W8A8Linear(256, 16, backend="triton", split_k=2)
