"""The reference path is exact: checked against independent numpy / float64 computations."""
import numpy as np
import pytest
import torch

from w8a8 import reference
from helpers import rand_int8, rand_scale


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (3, 5, 7), (17, 33, 100), (64, 48, 4096)])
def test_int_mm_exact_matches_int64_numpy(m, n, k):
    a, b = rand_int8(m, k), rand_int8(n, k)
    expected = a.numpy().astype(np.int64) @ b.numpy().astype(np.int64).T
    got = reference.int_mm_exact(a, b)
    assert got.dtype == torch.int32
    np.testing.assert_array_equal(got.numpy().astype(np.int64), expected)


def test_int_mm_exact_at_the_extremes():
    # All -128: every product is +16384, the largest partial sums there are.
    k = 8192
    a = torch.full((2, k), -128, dtype=torch.int8)
    b = torch.full((3, k), -128, dtype=torch.int8)
    assert torch.equal(reference.int_mm_exact(a, b), torch.full((2, 3), 16384 * k, dtype=torch.int32))


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("per_token,per_channel,with_bias", [(True, True, True), (False, False, False), (True, False, True)])
def test_scaled_mm_matches_float64_epilogue(out_dtype, per_token, per_channel, with_bias):
    m, n, k = 33, 40, 257
    a, b = rand_int8(m, k), rand_int8(n, k)
    a_scale = rand_scale(m, 1) if per_token else rand_scale(1)
    b_scale = rand_scale(n) if per_channel else rand_scale(1)
    bias = torch.randn(n) if with_bias else None
    acc = a.numpy().astype(np.int64) @ b.numpy().astype(np.int64).T
    ref64 = a_scale.double().numpy().reshape(-1, 1) * b_scale.double().numpy().reshape(1, -1) * acc
    if bias is not None:
        ref64 = ref64 + bias.double().numpy()
    got = reference.scaled_mm(a, b, a_scale, b_scale, bias, out_dtype)
    assert got.dtype == out_dtype and got.shape == (m, n)
    # fp32 epilogue: a few fp32 roundings, then one rounding to out_dtype. That last rounding
    # is relative (eps) for normal results and absolute (half the subnormal spacing) below
    # out_dtype's smallest normal: fp16 outputs of ~1e-6 are subnormal.
    info = torch.finfo(out_dtype)
    eps = info.eps
    subnormal_half_step = info.smallest_normal * eps / 2
    err = np.abs(got.double().numpy() - ref64)
    bound = eps * np.abs(ref64) + subnormal_half_step + 8 * torch.finfo(torch.float32).eps * (np.abs(ref64) + np.abs(ref64 - (bias.double().numpy() if bias is not None else 0)))
    assert (err <= bound + 1e-30).all(), float((err - bound).max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(1, 1), (3, 17), (2, 5, 100), (64, 4096)])
def test_quantize_per_token_error_bound(dtype, shape):
    x = (torch.randn(shape) * 3).to(dtype)
    q, scale = reference.quantize_per_token(x)
    assert q.dtype == torch.int8 and q.shape == x.shape
    assert scale.dtype == torch.float32 and scale.shape == (*shape[:-1], 1)
    xf = x.float()
    assert torch.equal(scale, xf.abs().amax(-1, keepdim=True) / 127)
    err = (xf - q.float() * scale).abs()
    assert (err <= scale * (0.5 + 1e-5)).all()
    # The amax element maps to +-127; nothing reaches -128 with this scale.
    assert torch.equal(q.abs().amax(-1).to(torch.int32), torch.full(shape[:-1], 127, dtype=torch.int32))
    assert q.min() >= -127


def test_quantize_per_token_rounds_half_to_even():
    scale = 0.125  # amax 127 / 8 = 15.875 -> scale exactly 1/8
    k = torch.arange(-20, 20, dtype=torch.float32)
    row = torch.cat([(k + 0.5) * scale, torch.tensor([15.875])])
    q, s = reference.quantize_per_token(row[None])
    assert s.item() == scale
    expected = torch.round(k + 0.5)  # torch.round is half to even
    assert torch.equal(q[0, :-1].float(), expected)
    assert (q[0, :-1].float().remainder(2) == 0).all()


def test_quantize_per_token_zero_and_nonfinite_rows():
    x = torch.randn(5, 64)
    x[1] = 0
    x[2, 7] = float("inf")
    x[3, 0] = float("nan")
    x[4, 9] = -float("inf")
    q, scale = reference.quantize_per_token(x)
    assert scale[0].isfinite().all() and scale[0].item() > 0
    assert scale[1].item() == 0 and (q[1] == 0).all()
    for r in (2, 3, 4):
        assert scale[r].isnan().all() and (q[r] == 0).all()
    # Downstream, a non-finite row ends as a non-finite output row; the others stay finite.
    b = rand_int8(8, 64)
    out = reference.scaled_mm(q, b, scale, rand_scale(8), None, torch.float32)
    assert out[[0, 1]].isfinite().all()
    assert (~out[[2, 3, 4]].isfinite()).all()


def test_quantize_static_saturates_and_uses_zero_point():
    scale = torch.tensor([0.5])
    x = torch.tensor([[0.0, 0.25, 0.75, -0.25, 1e6, -1e6, float("inf"), -float("inf"), float("nan"), -64.0, -64.5]])
    q = reference.quantize_static(x, scale)
    assert q.tolist() == [[0, 0, 2, 0, 127, -128, 127, -128, 0, -128, -128]]
    zp = torch.tensor([10], dtype=torch.int8)
    q = reference.quantize_static(x, scale, zp)
    assert q.tolist() == [[10, 10, 12, 10, 127, -128, 127, -128, 10, -118, -119]]


def test_quantize_static_error_bound():
    x = torch.randn(7, 300)
    scale = x.abs().max().reshape(1) / 127
    q = reference.quantize_static(x, scale)
    assert ((x - q.float() * scale).abs() <= scale * (0.5 + 1e-5)).all()
