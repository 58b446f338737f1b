"""Edge values that are not errors, on every kernel of the op (the ops never read data on
the host, so no value is refused; the math of w8a8/reference.py is applied as stated):

* scaled_mm: NaN in a_scale[m] (b_scale[n], bias[n]) makes output row m (column n) NaN; an
  Inf scale gives +-Inf, and NaN where the int32 product is 0; a zero scale gives exactly
  the bias; a negative scale negates the product exactly.
* W8A8Linear: dynamic: a token holding NaN or Inf gives a NaN output row, the others are
  unaffected; static: NaN counts as 0 and +-Inf saturate (as quantize_static).
Quantizer special rows and scales: test_quantize.py; K = 0, M = 0: test_scaled_mm.py.
"""
import pytest
import torch

import w8a8
from helpers import (assert_ulp_close, call_scaled_mm, kernel_params, max_ulp, mm_operands, ref_linear,
                     ref_scaled_mm)

pytestmark = [pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")]
M, N, K = 5, 24, 32


def _run(backend, a, b, sa, sb, bias, out_dtype=torch.bfloat16):
    out = call_scaled_mm(backend, a, b, sa, sb, bias, out_dtype)
    assert_ulp_close(out, ref_scaled_mm(a, b, sa, sb, bias, out_dtype), max_ulp(backend, a.device, out_dtype))
    return out.cpu()


@pytest.mark.parametrize("device,backend", kernel_params("scaled_mm"))
def test_special_scales_and_bias(device, backend):
    a, b, sa, sb, bias = mm_operands(M, N, K, device)
    sa[1], sb[3] = float("nan"), float("nan")
    out = _run(backend, a, b, sa, sb, bias)
    assert bool(out[1].isnan().all()) and bool(out[:, 3].isnan().all())
    assert bool(out[[0, 2, 3, 4]][:, [i for i in range(N) if i != 3]].isfinite().all())

    a, b, sa, sb, bias = mm_operands(M, N, K, device)
    bias[0], bias[1] = float("nan"), float("inf")
    out = _run(backend, a, b, sa, sb, bias)
    assert bool(out[:, 0].isnan().all()) and bool((out[:, 1] == float("inf")).all())

    a, b, sa, sb, bias = mm_operands(M, N, K, device)
    a[2] = 0
    sa[2], sa[3] = float("inf"), float("inf")
    out = _run(backend, a, b, sa, sb, bias)
    assert bool(out[2].isnan().all()), "Inf scale x zero product is NaN"
    assert not bool(out[3].isfinite().any()), "Inf scale x nonzero product is +-Inf"


@pytest.mark.parametrize("device,backend", kernel_params("scaled_mm"))
def test_zero_scale_gives_the_bias_and_negative_scale_negates(device, backend):
    a, b, sa, sb, bias = mm_operands(M, N, K, device)
    sa[0] = 0.0
    out = _run(backend, a, b, sa, sb, bias)
    assert_ulp_close(out[0], bias.cpu().to(torch.bfloat16), max_ulp(backend, device, torch.bfloat16))
    plus = _run(backend, a, b, sa, sb, None)
    minus = _run(backend, a, b, sa, -sb, None)
    assert torch.equal(minus, -plus), "a negative b_scale negates the output exactly"


@pytest.mark.parametrize("device,backend", kernel_params("linear"))
@pytest.mark.parametrize("act_quant", ["dynamic", "static"])
def test_w8a8linear_nan_and_inf_tokens(device, backend, act_quant):
    kw = {"input_scale": 0.05} if act_quant == "static" else {}
    lin = torch.nn.Linear(K, N, device=device, dtype=torch.bfloat16)
    layer = w8a8.W8A8Linear.from_linear(lin, act_quant=act_quant, backend=backend, **kw)
    x = torch.randn(M, K, device=device, dtype=torch.bfloat16)
    x[1, 3], x[2, 7] = float("nan"), float("inf")
    out = layer(x)
    assert_ulp_close(out, ref_linear(layer, x), max_ulp(backend, device, out.dtype))
    if act_quant == "dynamic":
        assert bool(out[1:3].isnan().all()), "a token holding NaN or Inf gives a NaN output row"
        assert bool(out[[0, 3, 4]].isfinite().all()), "the other tokens stay finite"
    else:
        assert torch.equal(out, layer(x.nan_to_num(nan=0.0, posinf=1e4))), "NaN counts as 0, Inf saturates"
