"""Bad inputs to the public ops, on every backend available here (issue 11, point 3).

A table of cases over ``w8a8.scaled_mm``, ``w8a8.quantize_per_token``,
``w8a8.quantize_static`` and ``W8A8Linear.forward``, each run on every backend of the
device (and ``backend=None``, "auto"). A case either gives the exact result (the
reference on the same inputs; the reference itself is checked against integer math in
test_reference.py) or raises an error whose message starts with the op's name
(``w8a8.<op>:``, or ``w8a8.<op>(backend='...')`` from the C++ bindings) and holds both the
expected and the actual value.

Covered elsewhere, not repeated here: test_ops.py (dtype / rank / shape errors of
scaled_mm on the default backend, a K-strided ``a`` on Triton, an unavailable backend on
the CPU, split_k values), test_triton_kernels.py and test_cuda_quant.py (special rows and
extreme magnitudes per kernel), test_fuzz.py (row-strided ``a``, special rows, every
backend against exact math), test_cutlass_sm90.py (K % 16 routing).

Documented behaviour for special values. The ops never read data on the host (no
synchronisation), so no value is refused: the math of w8a8/reference.py is applied in
IEEE fp32 as stated.

* quantize_per_token: a row holding NaN or +-Inf gives q = 0 and scale = NaN, so that
  row's outputs downstream are NaN, never finite garbage; an all-zero row gives q = 0 and
  scale = 0; other rows are unaffected. K = 0 (a row of no values, with no amax) is refused.
* quantize_static: +Inf -> 127, -Inf -> -128, NaN -> zero_point (int8 cannot carry NaN,
  so on the static path a NaN activation counts as 0). The scale is used as given: NaN ->
  every code is zero_point; +Inf -> zero_point for every finite x; 0 -> 127 / -128 by
  the sign of x (and zero_point for x = 0); a negative scale gives the codes of -x.
* scaled_mm: NaN in a_scale[m] (b_scale[n], bias[n]) makes output row m (column n) NaN;
  an Inf scale gives +-Inf, and NaN where the int32 product is 0 (Inf * 0); a zero scale
  gives exactly the bias; a negative scale negates the product.
* W8A8Linear: the composition. Dynamic: a token holding NaN or Inf gives a NaN output row,
  the other tokens are unaffected. Static: as quantize_static (W8A8Linear.from_linear
  refuses a non-finite or non-positive input_scale when it is given as a number).

There is no out= variant among the public ops (checked below), so there is no
overlapping-output case.
"""
from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Callable

import pytest
import torch

import w8a8
from w8a8 import backends, checks, reference
from helpers import assert_ulp_close, plant_special_rows, rand_int8, rand_scale

CUDA = torch.cuda.is_available()
TWO_GPUS = CUDA and torch.cuda.device_count() >= 2
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])
FLOATS = r"\(torch\.float16, torch\.bfloat16, torch\.float32\)"
M, N, K = 5, 24, 32  # N % 8 == 0 and K % 16 == 0: every backend takes the base shape


# --- targets: (device, backend) ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Target:
    device: str
    backend: str | None  # None: "auto", the backend the op picks

    @property
    def device_name(self) -> str:  # as tensors print it: "cpu", "cuda:0"
        return str(torch.empty(0, device=self.device).device)

    @property
    def other_device(self) -> str:
        """A device the op's other tensors are not on: meta beside the CPU, the CPU beside a GPU."""
        return "meta" if self.device == "cpu" else "cpu"

    def chosen(self, op: str) -> str:
        """The backend that runs ``op`` here (before any routing of a shape CUTLASS cannot take)."""
        return backends.resolve(self.backend, torch.device(self.device), "scaled_mm" if op == "linear" else op)


def _candidates(op: str) -> list[str]:
    if op in ("scaled_mm", "linear"):
        return [b for b in backends.BACKENDS if b != "cuda"]  # "cuda" holds the quantizers only
    return [b for b in backends.BACKENDS if not b.startswith("cutlass")]  # no CUTLASS quantizer


def _targets(op: str):
    params = []
    for device in DEVICES:
        params.append(pytest.param(Target(device, None), id=f"{device}-auto"))
        for b in _candidates(op):
            reason = backends.unavailable_reason(b, torch.device(device), "scaled_mm" if op == "linear" else op)
            marks = [pytest.mark.skip(reason=f"backend {b!r} on {device}: {reason}")] if reason else []
            params.append(pytest.param(Target(device, b), id=f"{device}-{b}", marks=marks))
    return params


# Which targets refuse a case.
def ALL(t: Target, op: str) -> bool:
    return True


def KERNELS(t: Target, op: str) -> bool:
    """Every backend but the reference (which reads any strides)."""
    return t.chosen(op) != "reference"


def CUTLASS(t: Target, op: str) -> bool:
    """CUTLASS named explicitly (backend=None routes what it cannot take to Triton)."""
    return (t.backend or "").startswith("cutlass")


# --- cases --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """One bad input. ``make(target)`` builds the op's keyword arguments (``layer`` and ``x``
    for W8A8Linear). Targets where ``refused_by`` holds must raise ``error`` = (type, regex
    after the op's name; ``{backend}``, ``{device}``, ``{other}`` are filled in); the others
    must give the reference's result, and ``check(out, kwargs, target)`` states the
    documented property on top."""

    name: str
    make: Callable[[Target], dict]
    error: tuple[type, str] | None = None
    refused_by: Callable[[Target, str], bool] = ALL
    check: Callable[[object, dict, Target], None] | None = None


def _mm(t: Target, **change) -> dict:
    d = t.device
    kw = dict(a=rand_int8(M, K, device=d), b=rand_int8(N, K, device=d), a_scale=rand_scale(M, 1, device=d),
              b_scale=rand_scale(N, device=d), bias=torch.randn(N, device=d), out_dtype=torch.bfloat16)
    kw.update({k: (v(kw, d) if callable(v) else v) for k, v in change.items()})
    return kw


def _offset_by_one(rows: int, cols: int, d: str) -> torch.Tensor:
    """int8 [rows, cols] whose data pointer is one element past a 16-byte boundary (row stride cols + 16)."""
    return rand_int8(rows, cols + 16, device=d)[:, 1 : cols + 1]


def _with(name: str, index, value):
    """A change that sets ``kw[name][index] = value`` (on a clone)."""

    def change(kw, d):
        t = kw[name].clone()
        t[index] = value
        return t

    return change


def _rows_nan(rows):
    def check(out, kw, t):
        assert bool(out[rows].isnan().all()), f"rows {rows} are not all NaN"
    return check


def _cols_nan(cols):
    def check(out, kw, t):
        assert bool(out[:, cols].isnan().all()), f"columns {cols} are not all NaN"
    return check


def _rows_are_bias(rows):
    def check(out, kw, t):  # a zero scale (or K = 0): 0 + bias, rounded once (to the kernels' 1 ulp)
        got = out[rows].cpu()
        assert_ulp_close(got, kw["bias"].cpu().to(out.dtype).expand_as(got).contiguous(), max_ulp=1)
    return check


def _nan_and_inf_bias(out, kw, t):
    assert bool(out[:, 0].isnan().all()), "a NaN bias gives a NaN column"
    assert bool((out[:, 1] == float("inf")).all()), "an +Inf bias gives an +Inf column"


def _negated_by_negative_scale(out, kw, t):
    flipped = dict(kw, b_scale=-kw["b_scale"])  # the case's b_scale is negative: flip it back
    again = w8a8.scaled_mm(**flipped, backend=t.backend)
    assert torch.equal(out, -again), "a negative b_scale must negate the output exactly"


def _inf_rows(out, kw, t):
    assert bool(out[2].isnan().all()), "Inf scale x zero product must be NaN"
    assert not bool(out[3].isfinite().any()), "Inf scale x nonzero product must be +-Inf"


OP_MM = "scaled_mm"
SCALED_MM_CASES = [
    # wrong dtypes, ranks, types (the ones test_ops.py does not already hold)
    Case("a_uint8", lambda t: _mm(t, a=lambda kw, d: kw["a"].view(torch.uint8)), (ValueError, r"a must be int8, got torch\.uint8")),
    Case("b_fp16", lambda t: _mm(t, b=lambda kw, d: kw["b"].half()), (ValueError, r"b must be int8, got torch\.float16")),
    Case("b_scale_fp16", lambda t: _mm(t, b_scale=lambda kw, d: kw["b_scale"].half()),
         (ValueError, r"b_scale must be float32, got torch\.float16")),
    Case("bias_int32", lambda t: _mm(t, bias=lambda kw, d: kw["bias"].int()),
         (ValueError, r"bias must be float32 or out_dtype \(torch\.bfloat16\), got torch\.int32")),
    Case("out_dtype_str", lambda t: _mm(t, out_dtype="bfloat16"),
         (ValueError, r"out_dtype must be one of \(torch\.bfloat16, torch\.float16, torch\.float32\), got bfloat16")),
    Case("a_1d", lambda t: _mm(t, a=lambda kw, d: kw["a"][0]), (ValueError, r"a must be 2-D \[M, K\], got shape \(32,\)")),
    Case("b_3d", lambda t: _mm(t, b=lambda kw, d: kw["b"][None]),
         (ValueError, r"b must be 2-D \[N, K\] \(the nn\.Linear weight layout\), got shape \(1, 24, 32\)")),
    Case("a_scale_3d", lambda t: _mm(t, a_scale=lambda kw, d: kw["a_scale"][..., None]),
         (ValueError, r"a_scale must be \[M, 1\] = \[5, 1\] \(per token\) or \[1\] \(per tensor\), got \(5, 1, 1\)")),
    Case("b_scale_row", lambda t: _mm(t, b_scale=lambda kw, d: kw["b_scale"][None]),
         (ValueError, r"b_scale must be \[N\] = \[24\], \[N, 1\] or \[1\], got \(1, 24\)")),
    Case("bias_row", lambda t: _mm(t, bias=lambda kw, d: kw["bias"][None]), (ValueError, r"bias must be \[N\] = \[24\], got \(1, 24\)")),
    Case("a_none", lambda t: _mm(t, a=None), (ValueError, r"a must be a tensor, got NoneType")),
    Case("bias_float", lambda t: _mm(t, bias=0.5), (ValueError, r"bias must be a tensor or None, got float")),
    # devices (a CUDA backend given CPU tensors: test_cpu_tensors_to_a_cuda_backend; two GPUs: test_two_gpus)
    Case("b_elsewhere", lambda t: _mm(t, b=lambda kw, d: kw["b"].to(t.other_device)),
         (ValueError, r"b must be on {device} like a, got {other}")),
    Case("a_scale_elsewhere", lambda t: _mm(t, a_scale=lambda kw, d: kw["a_scale"].to(t.other_device)),
         (ValueError, r"a_scale must be on {device} like a, got {other}")),
    Case("bias_elsewhere", lambda t: _mm(t, bias=lambda kw, d: kw["bias"].to(t.other_device)),
         (ValueError, r"bias must be on {device} like a, got {other}")),
    # zero-size dimensions: empty outputs; K = 0 is an empty sum, so out = bias
    Case("m_0", lambda t: _mm(t, a=lambda kw, d: kw["a"][:0], a_scale=lambda kw, d: kw["a_scale"][:0])),
    Case("m_0_per_tensor", lambda t: _mm(t, a=lambda kw, d: kw["a"][:0], a_scale=lambda kw, d: rand_scale(1, device=d))),
    Case("n_0", lambda t: _mm(t, b=lambda kw, d: kw["b"][:0], b_scale=lambda kw, d: kw["b_scale"][:0],
                              bias=lambda kw, d: kw["bias"][:0])),
    Case("k_0", lambda t: _mm(t, a=lambda kw, d: kw["a"][:, :0], b=lambda kw, d: kw["b"][:, :0]), check=_rows_are_bias(slice(None))),
    # misaligned data pointers and row strides: TMA's 16-byte rules (explicit CUTLASS refuses,
    # backend=None routes to Triton), any alignment elsewhere
    Case("a_offset_by_one", lambda t: _mm(t, a=lambda kw, d: _offset_by_one(M, K, d)),
         (RuntimeError, r"a's data pointer must be 16-byte aligned \(.*\), got (0x)?[0-9a-f]+ \(storage offset 1\)"), CUTLASS),
    Case("b_offset_by_one", lambda t: _mm(t, b=lambda kw, d: _offset_by_one(N, K, d)),
         (RuntimeError, r"b's data pointer must be 16-byte aligned \(.*\), got (0x)?[0-9a-f]+ \(storage offset 1\)"), CUTLASS),
    Case("a_row_stride_40", lambda t: _mm(t, a=lambda kw, d: rand_int8(M, K + 8, device=d)[:, :K]),
         (RuntimeError, r"a's row stride must be >= K and a multiple of 16 \(.*\), got strides \[40, 1\] for shape \[5, 32\]"), CUTLASS),
    Case("a_expanded_rows", lambda t: _mm(t, a=lambda kw, d: rand_int8(1, K, device=d).expand(M, K)),
         (RuntimeError, r"a's row stride must be >= K and a multiple of 16 \(.*\), got strides \[0, 1\] for shape \[5, 32\]"), CUTLASS),
    Case("scales_and_bias_offset_by_one", lambda t: _mm(
        t, a_scale=lambda kw, d: rand_scale(M + 1, 1, device=d)[1:], b_scale=lambda kw, d: rand_scale(N + 1, device=d)[1:],
        bias=lambda kw, d: torch.randn(N + 1, device=d)[1:])),
    # non-contiguous and transposed operands: the kernels read rows with unit inner stride
    # and contiguous scales (a K-strided a: test_ops.py)
    Case("b_transposed", lambda t: _mm(t, b=lambda kw, d: rand_int8(K, N, device=d).t()),
         (ValueError, r"backend={backend} needs b with unit stride along K, got strides \(1, 24\); "
                      r"call \.contiguous\(\) first"), KERNELS),
    Case("a_scale_strided", lambda t: _mm(t, a_scale=lambda kw, d: rand_scale(M, 2, device=d)[:, :1]),
         (ValueError, r"backend={backend} needs a contiguous a_scale, got strides \(2, 1\)"), KERNELS),
    Case("b_scale_strided", lambda t: _mm(t, b_scale=lambda kw, d: rand_scale(2 * N, device=d)[::2]),
         (ValueError, r"backend={backend} needs a contiguous b_scale, got strides \(2,\)"), KERNELS),
    Case("bias_strided", lambda t: _mm(t, bias=lambda kw, d: torch.randn(2 * N, device=d)[::2]),
         (ValueError, r"backend={backend} needs a contiguous bias, got strides \(2,\)"), KERNELS),
    # special scale and bias values
    Case("a_scale_nan", lambda t: _mm(t, a_scale=_with("a_scale", 1, float("nan"))), check=_rows_nan(1)),
    Case("b_scale_nan", lambda t: _mm(t, b_scale=_with("b_scale", 3, float("nan"))), check=_cols_nan(3)),
    Case("bias_nan_inf", lambda t: _mm(t, bias=lambda kw, d: torch.tensor([float("nan"), float("inf")] + [1.0] * (N - 2), device=d)),
         check=_nan_and_inf_bias),
    Case("a_scale_inf", lambda t: _mm(t, a=_with("a", 2, 0), a_scale=lambda kw, d: _with("a_scale", [2, 3], float("inf"))(kw, d)),
         check=_inf_rows),
    Case("a_scale_zero", lambda t: _mm(t, a_scale=_with("a_scale", 0, 0.0)), check=_rows_are_bias(0)),
    Case("b_scale_negative", lambda t: _mm(t, b_scale=lambda kw, d: -kw["b_scale"], bias=None), check=_negated_by_negative_scale),
]


def _assert(cond: bool, what: str) -> None:
    assert cond, what


def _x(t: Target, rows=6, k=40, dtype=torch.bfloat16) -> torch.Tensor:
    return torch.randn(rows, k, device=t.device).to(dtype)


def _special_rows(out, kw, t):
    q, s = out
    x = kw["x"]
    assert bool((q[:5] == 0).all()), "zero and non-finite rows give q = 0"
    assert float(s[0]) == 0.0, "an all-zero row gives scale 0"
    assert bool(s[1:5].isnan().all()), "a row holding NaN or Inf gives scale NaN"
    assert bool(s[5:].isfinite().all()) and bool((s[5:] > 0).all()) and x.shape[0] > 5


OP_PT = "quantize_per_token"
PER_TOKEN_CASES = [
    Case("x_fp64", lambda t: dict(x=_x(t, dtype=torch.float64)), (ValueError, rf"x must be one of {FLOATS}, got torch\.float64")),
    Case("x_list", lambda t: dict(x=[[1.0, 2.0]]), (ValueError, r"x must be a tensor, got list")),
    Case("k_0", lambda t: dict(x=_x(t, 3, 0)), (ValueError, r"x's last dim \(K\) must be >= 1, got shape \(3, 0\)")),
    Case("k_0_no_rows", lambda t: dict(x=_x(t, 0, 0)), (ValueError, r"x's last dim \(K\) must be >= 1, got shape \(0, 0\)")),
    Case("m_0", lambda t: dict(x=_x(t, 0))),
    Case("empty_middle_dim", lambda t: dict(x=_x(t, 0).reshape(2, 0, 40))),
    Case("one_dim", lambda t: dict(x=_x(t, 1)[0])),
    Case("four_dims", lambda t: dict(x=_x(t).reshape(2, 1, 3, 40))),
    Case("transposed", lambda t: dict(x=_x(t, 40, 6).t()),
         (ValueError, r"backend={backend} needs x with unit stride along its last dim \(K\), got strides \(1, 6\) for shape \(6, 40\); "
                      r"call \.contiguous\(\) first"), KERNELS),
    Case("row_strided", lambda t: dict(x=_x(t, 6, 56)[:, 8:48])),
    Case("offset_by_one", lambda t: dict(x=_x(t, 6, 41)[:, 1:])),
    Case("nan_inf_zero_rows", lambda t: dict(x=plant_special_rows(_x(t, 8))), check=_special_rows),
]


def _static(t: Target, scale=0.02, zp=3, rows=6, k=40, **change) -> dict:
    kw = dict(x=_x(t, rows, k), scale=torch.tensor([scale], device=t.device),
              zero_point=None if zp is None else torch.tensor([zp], dtype=torch.int32, device=t.device))
    kw.update(change)
    return kw


def _static_specials(t: Target) -> dict:
    kw = _static(t)
    kw["x"][0, :3] = torch.tensor([float("inf"), float("-inf"), float("nan")])
    return kw


def _codes_are(expected_fn):
    def check(q, kw, t):
        assert torch.equal(q.cpu(), expected_fn(kw["x"].cpu().float()).to(torch.int8)), "codes differ from the documented ones"
    return check


def _zero_scale_x(t: Target) -> dict:
    kw = _static(t, scale=0.0)
    kw["x"][0, :4] = 0
    return kw


def _negative_scale_codes(q, kw, t):
    positive = reference.quantize_static(kw["x"].cpu(), -kw["scale"].cpu(), None)
    assert torch.equal(q.cpu(), -positive), "a negative scale gives the codes of -x"


OP_ST = "quantize_static"
STATIC_CASES = [
    Case("x_fp64", lambda t: _static(t, x=_x(t, dtype=torch.float64)), (ValueError, rf"x must be one of {FLOATS}, got torch\.float64")),
    Case("scale_float", lambda t: _static(t, scale=0.02) | {"scale": 0.02},
         (ValueError, r"scale must be a float32 tensor of shape \[1\] \(read on the device\), got float")),
    Case("scale_elsewhere", lambda t: _static(t) | {"scale": torch.tensor([0.02], device=t.other_device)},
         (ValueError, r"scale must be on {device} like x, got {other}")),
    Case("zero_point_uint8", lambda t: _static(t) | {"zero_point": torch.tensor([3], dtype=torch.uint8, device=t.device)},
         (ValueError, r"zero_point must be int8 or int32, got torch\.uint8")),
    Case("zero_point_two_values", lambda t: _static(t) | {"zero_point": torch.tensor([3, 4], dtype=torch.int32, device=t.device)},
         (ValueError, r"zero_point must hold one value, got shape \(2,\)")),
    Case("zero_point_int", lambda t: _static(t) | {"zero_point": 3}, (ValueError, r"zero_point must be a tensor or None, got int")),
    Case("scale_0d", lambda t: _static(t) | {"scale": torch.tensor(0.02, device=t.device)}),
    Case("m_0", lambda t: _static(t, rows=0)),
    Case("k_0", lambda t: _static(t, k=0)),
    Case("transposed", lambda t: _static(t) | {"x": _x(t, 40, 6).t()},
         (ValueError, r"backend={backend} needs x with unit stride along its last dim \(K\), got strides \(1, 6\) for shape \(6, 40\); "
                      r"call \.contiguous\(\) first"), KERNELS),
    Case("offset_by_one", lambda t: _static(t) | {"x": _x(t, 6, 41)[:, 1:]}),
    Case("inf_nan_in_x", _static_specials,
         check=lambda q, kw, t: _assert(q[0, :3].tolist() == [127, -128, 3],
                                        f"+Inf, -Inf, NaN -> 127, -128, zero_point; got {q[0, :3].tolist()}")),
    Case("scale_nan", lambda t: _static(t, scale=float("nan")), check=_codes_are(lambda x: torch.full_like(x, 3))),
    Case("scale_inf", lambda t: _static(t, scale=float("inf")), check=_codes_are(lambda x: torch.full_like(x, 3))),
    Case("scale_zero", _zero_scale_x,
         check=_codes_are(lambda x: torch.where(x > 0, 127.0, torch.where(x < 0, -128.0, 3.0)))),
    Case("scale_negative", lambda t: _static(t, scale=-0.05, zp=None), check=_negative_scale_codes),
]


def _layer(t: Target, act_quant="dynamic", dtype=torch.bfloat16) -> w8a8.W8A8Linear:
    lin = torch.nn.Linear(K, N, device=t.device, dtype=dtype)
    kw = {"input_scale": 0.05} if act_quant == "static" else {}
    return w8a8.W8A8Linear.from_linear(lin, act_quant=act_quant, backend=t.backend, **kw)


def _lin(t: Target, x=None, act_quant="dynamic") -> dict:
    return dict(layer=_layer(t, act_quant), x=_x(t, M, K) if x is None else x)


def _same_as_layer_on(x_fn):
    """The output equals the layer applied to a changed input (bit for bit)."""

    def check(out, kw, t):
        assert torch.equal(out, kw["layer"](x_fn(kw["x"].clone()))), "differs from the documented equivalent input"
    return check


def _nan_token_rows(out, kw, t):
    assert bool(out[1:3].isnan().all()), "a token holding NaN or Inf gives a NaN output row"
    assert bool(out[3:].isfinite().all()) and bool(out[:1].isfinite().all()), "the other tokens stay finite"


def _x_specials(t: Target) -> torch.Tensor:
    x = _x(t, M, K)
    x[1, 3] = float("nan")
    x[2, 7] = float("inf")
    return x


OP_LIN = "linear"
LINEAR_CASES = [
    Case("x_0d", lambda t: _lin(t, x=torch.tensor(1.0, device=t.device)), (ValueError, r"expected input \[\.\.\., 32\], got shape \(\)")),
    Case("x_fp64", lambda t: _lin(t, x=_x(t, M, K, torch.float64)),
         (ValueError, rf"x must be one of {FLOATS} \(the output dtype\), got torch\.float64")),
    Case("x_int64", lambda t: _lin(t, x=torch.ones(M, K, dtype=torch.int64, device=t.device)),
         (ValueError, rf"x must be one of {FLOATS} \(the output dtype\), got torch\.int64")),
    Case("x_elsewhere", lambda t: _lin(t, x=torch.randn(M, K, device=t.other_device)),
         (ValueError, r"x must be on {device} \(where the layer's weight is\), got {other}")),
    Case("m_0", lambda t: _lin(t, x=_x(t, 0, K))),
    Case("empty_middle_dim", lambda t: _lin(t, x=_x(t, 0, K).reshape(3, 0, K))),
    Case("transposed", lambda t: _lin(t, x=_x(t, K, M).t()), check=_same_as_layer_on(lambda x: x.contiguous())),
    Case("row_strided", lambda t: _lin(t, x=_x(t, M, K + 24)[:, 8 : 8 + K])),
    Case("offset_by_one", lambda t: _lin(t, x=_x(t, M, K + 1)[:, 1:])),
    Case("nan_inf_tokens", lambda t: _lin(t, x=_x_specials(t)), check=_nan_token_rows),
    Case("nan_inf_static", lambda t: _lin(t, x=_x_specials(t), act_quant="static"),
         check=_same_as_layer_on(lambda x: x.nan_to_num(nan=0.0, posinf=1e4))),
]


# --- running a case ------------------------------------------------------------------------------


def _call(op: str, t: Target, kw: dict):
    if op == OP_LIN:
        return kw["layer"](kw["x"])
    fn = getattr(w8a8, op)
    return fn(**kw, backend=t.backend)


def _cpu(v):
    return v.cpu() if isinstance(v, torch.Tensor) else v


def _reference(op: str, kw: dict):
    if op == OP_MM:
        return reference.scaled_mm(*(_cpu(kw[k]) for k in ("a", "b", "a_scale", "b_scale", "bias")), kw["out_dtype"])
    if op == OP_PT:
        return reference.quantize_per_token(kw["x"].cpu())
    if op == OP_ST:
        return reference.quantize_static(kw["x"].cpu(), kw["scale"].cpu(), _cpu(kw["zero_point"]))
    layer, x = kw["layer"], kw["x"].cpu()
    x2 = x.reshape(-1, layer.in_features)
    if layer.act_quant == "dynamic":
        q, s = reference.quantize_per_token(x2)
    else:
        s = layer.input_scale.cpu()
        q = reference.quantize_static(x2, s, _cpu(layer.input_zero_point))
    bias = _cpu(layer.folded_bias())
    out = reference.scaled_mm(q, layer.weight.cpu(), s, layer.weight_scale.cpu(), bias, x.dtype)
    return out.reshape(*x.shape[:-1], layer.out_features)


def _assert_same_codes(got, expected) -> None:
    q, s = got
    rq, rs = expected
    assert q.dtype == torch.int8 and q.shape == rq.shape, (q.dtype, q.shape, rq.shape)
    assert torch.equal(q.cpu(), rq), f"{int((q.cpu() != rq).sum())} codes differ"
    assert s.dtype == torch.float32 and s.shape == rs.shape, (s.dtype, s.shape, rs.shape)
    s = s.cpu()
    assert torch.equal(s.isnan(), rs.isnan()), "NaN scales differ"  # (any NaN: the sign bit is not part of the contract)
    assert torch.equal(s.nan_to_num(0).view(torch.int32), rs.nan_to_num(0).view(torch.int32)), "scales differ (bit for bit)"


def _assert_exact(op: str, got, expected) -> None:
    if op == OP_PT:
        _assert_same_codes(got, expected)
    elif op == OP_ST:
        assert got.dtype == torch.int8 and got.shape == expected.shape, (got.dtype, got.shape, expected.shape)
        assert torch.equal(got.cpu(), expected)
    else:  # the kernels' bound against the reference: <= 1 ulp (docs/STATUS.md), NaN where it is NaN
        assert_ulp_close(got, expected, max_ulp=1)


def _error_regex(op: str, t: Target, pattern: str) -> str:
    name = "W8A8Linear" if op == OP_LIN and not pattern.startswith("^") else op
    chosen = t.chosen(op)
    body = pattern.format(backend=re.escape(repr(chosen)), device=re.escape(t.device_name), other=re.escape(t.other_device))
    if body.startswith("^"):
        return body
    return rf"^w8a8\.{name}(\(backend='\w+'\))?: " + body


def _run_case(op: str, case: Case, t: Target) -> None:
    kw = case.make(t)
    if case.error is not None and case.refused_by(t, op):
        exc, pattern = case.error
        with pytest.raises(exc, match=_error_regex(op, t, pattern)):
            _call(op, t, kw)
        return
    out = _call(op, t, kw)
    _assert_exact(op, out, _reference(op, kw))
    if case.check is not None:
        case.check(out, kw, t)


def _ids(cases):
    return [pytest.param(c, id=c.name) for c in cases]


# numpy, under Triton's interpreter, warns on Inf * 0 and NaN compares: the NaNs are the point
pytestmark = [
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning"),
]


@pytest.mark.parametrize("t", _targets(OP_MM))
@pytest.mark.parametrize("case", _ids(SCALED_MM_CASES))
def test_scaled_mm(case, t):
    _run_case(OP_MM, case, t)


@pytest.mark.parametrize("t", _targets(OP_PT))
@pytest.mark.parametrize("case", _ids(PER_TOKEN_CASES))
def test_quantize_per_token(case, t):
    _run_case(OP_PT, case, t)


@pytest.mark.parametrize("t", _targets(OP_ST))
@pytest.mark.parametrize("case", _ids(STATIC_CASES))
def test_quantize_static(case, t):
    _run_case(OP_ST, case, t)


@pytest.mark.parametrize("t", _targets(OP_LIN))
@pytest.mark.parametrize("case", _ids(LINEAR_CASES))
def test_w8a8linear(case, t):
    _run_case(OP_LIN, case, t)


@pytest.mark.parametrize("t", _targets(OP_LIN))
def test_w8a8linear_input_of_another_dtype_than_the_layer(t):
    """An fp16 input to a bf16 layer: the bf16 bias is neither fp32 nor the output dtype.
    The error comes from the inner scaled_mm (Python, or the C++ op on the single-op path)."""
    layer = _layer(t, dtype=torch.bfloat16)
    x = torch.randn(M, K, device=t.device, dtype=torch.float16)
    with pytest.raises((ValueError, RuntimeError), match=r"^w8a8\.scaled_mm(\(backend='\w+'\))?: bias must be float32 or out_dtype "
                       r"\((torch\.float16|Half)\), got (torch\.bfloat16|BFloat16)"):
        layer(x)


def test_no_public_out_variant():
    """Overlapping ``out`` (issue 11) needs an out= variant: none of the public ops has one.
    Add the overlap cases to this file with the first one that does."""
    for fn in (w8a8.scaled_mm, w8a8.quantize_per_token, w8a8.quantize_static, w8a8.W8A8Linear.forward):
        assert not {"out", "output"} & set(inspect.signature(fn).parameters), fn.__qualname__


# --- routing a shape CUTLASS cannot take (backend=None on a GPU), checked here on the CPU ----------


def test_cutlass_operand_reason():
    a, b = rand_int8(M, K), rand_int8(N, K)
    assert checks.cutlass_operand_reason(a, b, torch.bfloat16) is None
    assert checks.cutlass_operand_reason(a[:1], b, torch.bfloat16) is None
    assert checks.cutlass_operand_reason(rand_int8(1, K + 8)[:, :K], b, torch.bfloat16) is None  # one row: pitch unused
    assert "storage offset 1" in checks.cutlass_operand_reason(_offset_by_one(M, K, "cpu"), b, torch.bfloat16)
    assert "b's data pointer" in checks.cutlass_operand_reason(a, _offset_by_one(N, K, "cpu"), torch.bfloat16)
    assert "a's row stride 40" in checks.cutlass_operand_reason(rand_int8(M, K + 8)[:, :K], b, torch.bfloat16)
    assert "a's row stride 0" in checks.cutlass_operand_reason(rand_int8(1, K).expand(M, K), b, torch.bfloat16)
    assert "K = 40" in checks.cutlass_operand_reason(rand_int8(M, 40), rand_int8(N, 40), torch.bfloat16)
    assert "out_dtype" in checks.cutlass_operand_reason(a, b, torch.float32)
    # What no kernel takes is left to check_scaled_mm's own message.
    assert checks.cutlass_operand_reason(rand_int8(K, M).t(), b, torch.bfloat16) is None
    assert checks.cutlass_operand_reason(a[0], b, torch.bfloat16) is None
    assert checks.cutlass_operand_reason(None, b, torch.bfloat16) is None
    assert checks.cutlass_operand_reason(a[:0], b, torch.bfloat16) is None  # nothing runs


def test_cutlass_operand_reason_traces_without_specializing_m():
    """The routing runs inside torch.compile(fullgraph=True) on a GPU: no graph break, no
    recompile per M. Traced tensors have no address, so there only the strides route (a
    misaligned pointer reaching CUTLASS is refused by the binding, see a_offset_by_one)."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    counter = CompileCounter()

    def route(a, b):
        ok = checks.cutlass_operand_reason(a, b, torch.bfloat16) is None
        return a.float().sum() + (0.0 if ok else 1.0)

    compiled = torch.compile(route, backend=counter, fullgraph=True, dynamic=True)
    b = rand_int8(N, K)
    for m in (3, 17, 100):
        a = rand_int8(m, K)
        assert float(compiled(a, b)) == float(a.float().sum())
    assert counter.frame_count == 1, counter.frame_count
    strided = rand_int8(9, K + 8)[:, :K]  # row stride 40
    assert float(compiled(strided, b)) == float(strided.float().sum()) + 1.0
    offset = rand_int8(9, K + 16)[:, 1 : K + 1]
    assert float(compiled(offset, b)) == float(offset.float().sum())


# --- devices only a GPU machine has ---------------------------------------------------------------


@pytest.mark.cuda
def test_cpu_tensors_to_a_cuda_backend():
    """On a machine with a GPU, CPU tensors named to a GPU backend (the same check refuses
    them without one: test_ops.py::test_unavailable_backend_is_an_error_that_says_why)."""

    def refused(op: str, backend: str, kind: str):
        return pytest.raises(RuntimeError, match=rf"^w8a8\.{op}: backend='{backend}' is not available: "
                                                 rf"{kind} kernels need a CUDA device \(got cpu\)")

    kw = _mm(Target("cpu", None))
    kw.pop("out_dtype")
    for backend, kind in (("cutlass", "CUTLASS"), ("cutlass_sm80", "CUTLASS"), ("triton", "Triton")):
        if backend in backends.BACKENDS:
            with refused("scaled_mm", backend, kind):
                w8a8.scaled_mm(**kw, backend=backend)
    x = torch.randn(3, 16)
    with refused("quantize_per_token", "cuda", "CUDA"):
        w8a8.quantize_per_token(x, backend="cuda")
    with refused("quantize_static", "cuda", "CUDA"):
        w8a8.quantize_static(x, torch.tensor([0.1]), backend="cuda")
    layer = w8a8.W8A8Linear.from_linear(torch.nn.Linear(16, 8), backend="cutlass")  # a CPU layer asking for CUTLASS
    with refused("scaled_mm", "cutlass", "CUTLASS"):
        layer(x)


def _gpu_backends(device: torch.device, op: str) -> list[str]:
    return [b for b in _candidates(op) if backends.unavailable_reason(b, device, "scaled_mm" if op == "linear" else op) is None]


@pytest.mark.skipif(not TWO_GPUS, reason="needs two CUDA GPUs")
def test_two_gpus_mixed_devices_are_refused():
    d0, d1 = torch.device("cuda", 0), torch.device("cuda", 1)
    for backend in [None, *_gpu_backends(d0, OP_MM)]:
        kw = _mm(Target("cuda:0", backend))
        kw["b"] = kw["b"].to(d1)
        with pytest.raises(ValueError, match=r"^w8a8\.scaled_mm: b must be on cuda:0 like a, got cuda:1"):
            w8a8.scaled_mm(**kw, backend=backend)
    for backend in [None, *_gpu_backends(d0, OP_ST)]:
        x = torch.randn(4, 32, device=d0)
        with pytest.raises(ValueError, match=r"^w8a8\.quantize_static: scale must be on cuda:0 like x, got cuda:1"):
            w8a8.quantize_static(x, torch.tensor([0.02], device=d1), backend=backend)
    layer = _layer(Target("cuda:1", None))
    with pytest.raises(ValueError, match=r"^w8a8\.W8A8Linear: x must be on cuda:1 \(where the layer's weight is\), got cuda:0"):
        layer(torch.randn(M, K, device=d0, dtype=torch.bfloat16))


@pytest.mark.skipif(not TWO_GPUS, reason="needs two CUDA GPUs")
def test_two_gpus_tensors_on_the_second_while_the_first_is_current():
    """Every tensor on cuda:1, cuda:0 current: each backend runs on cuda:1 (Triton launches on
    the current device unless told otherwise: w8a8/triton/_launch.py) and gives the exact result."""
    d1 = torch.device("cuda", 1)
    torch.cuda.set_device(0)
    t1 = Target("cuda:1", None)
    for backend in [None, *_gpu_backends(d1, OP_MM)]:
        kw = _mm(dataclasses.replace(t1, backend=backend))
        _assert_exact(OP_MM, w8a8.scaled_mm(**kw, backend=backend), _reference(OP_MM, kw))
    for backend in [None, *_gpu_backends(d1, OP_PT)]:
        x = _x(t1)
        _assert_exact(OP_PT, w8a8.quantize_per_token(x, backend=backend), reference.quantize_per_token(x.cpu()))
        kw = _static(t1)
        _assert_exact(OP_ST, w8a8.quantize_static(**kw, backend=backend), _reference(OP_ST, kw))
    for backend in [None, *_gpu_backends(d1, OP_LIN)]:
        for rows in (M, 100):  # the single-op path (<= 64 tokens on sm90) and the composed one
            kw = dict(layer=_layer(dataclasses.replace(t1, backend=backend)), x=_x(t1, rows, K))
            _assert_exact(OP_LIN, kw["layer"](kw["x"]), _reference(OP_LIN, kw))
    torch.cuda.synchronize(d1)
    assert torch.cuda.current_device() == 0
