"""The w8a8 ops: every schema defined once, the fakes beside them, typed public wrappers.

One public op per operation, each with a CPU implementation (the exact reference) and a
CUDA implementation: where ``w8a8._C`` is built, the C++ router (``csrc/torch/sm90/routes.cpp``),
which picks the kernel for the device and the operands and launches the fused producers' Triton
kernels (their only GPU kernels) from C++ once Python has launched them; the Triton kernels for
every op where ``w8a8._C`` is not built:

    w8a8::quantize_per_token(Tensor x) -> (Tensor, Tensor)
    w8a8::quantize_static(Tensor x, Tensor scale, Tensor? zero_point) -> Tensor
    w8a8::scaled_mm(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, Tensor? bias, ScalarType out_dtype) -> Tensor
    w8a8::linear(Tensor x, Tensor weight, Tensor weight_scale, Tensor? bias, Tensor? input_scale,
                 Tensor? input_zero_point) -> Tensor
    w8a8::rms_norm_quant(Tensor x, Tensor weight, float eps) -> (Tensor codes, Tensor scales, Tensor normed)
    w8a8::add_rms_norm_quant(Tensor x, Tensor residual, Tensor weight, float eps)
        -> (Tensor codes, Tensor scales, Tensor normed, Tensor sum)
    w8a8::silu_mul_quant(Tensor gate, Tensor up) -> (Tensor codes, Tensor scales)

A traced or exported graph names these (and ``w8a8::fold_zero_point``, the folded bias of a
layer with an input zero point, ``w8a8.linear``), so an exported program runs on whatever
device it is loaded on. The kernels are ops of their own (``w8a8::scaled_mm_sm90``,
``scaled_mm_sm80``, ``scaled_mm_triton``, ``quantize_*_cuda``, ``quantize_*_triton``,
``linear_sm90``, ``*_quant_triton``), each validating its inputs at its entry with the words of
``w8a8.validate``; tests and benchmarks reach them through ``backend=`` (``w8a8.dispatch``).
The math is stated in ``w8a8.reference``.
"""
from __future__ import annotations

import os
import sys
import warnings
from typing import Literal

import torch

from w8a8 import dispatch, validate

__all__ = ["linear", "quantize_per_token", "quantize_static", "rms_norm_quant", "scaled_mm", "silu_mul_quant"]

_lib = torch.library.Library("w8a8", "FRAGMENT")

_QUANTIZE_PER_TOKEN = "(Tensor x) -> (Tensor, Tensor)"
_QUANTIZE_STATIC = "(Tensor x, Tensor scale, Tensor? zero_point) -> Tensor"
_SCALED_MM = "(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, Tensor? bias, ScalarType out_dtype) -> Tensor"
_LINEAR = (
    "(Tensor x, Tensor weight, Tensor weight_scale, Tensor? bias, Tensor? input_scale, "
    "Tensor? input_zero_point) -> Tensor"
)
_RMS_NORM_QUANT = "(Tensor x, Tensor weight, float eps) -> (Tensor codes, Tensor scales, Tensor normed)"
_ADD_RMS_NORM_QUANT = (
    "(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor codes, Tensor scales, Tensor normed, Tensor sum)"
)
_SILU_MUL_QUANT = "(Tensor gate, Tensor up) -> (Tensor codes, Tensor scales)"
# The public ops, and the Triton kernels (Python-defined); the compiled kernels' schemas
# are in csrc/torch/.
for _suffix in ("", "_triton"):
    _lib.define(f"quantize_per_token{_suffix}{_QUANTIZE_PER_TOKEN}")
    _lib.define(f"quantize_static{_suffix}{_QUANTIZE_STATIC}")
    _lib.define(f"scaled_mm{_suffix}{_SCALED_MM}")
    _lib.define(f"rms_norm_quant{_suffix}{_RMS_NORM_QUANT}")
    _lib.define(f"add_rms_norm_quant{_suffix}{_ADD_RMS_NORM_QUANT}")
    _lib.define(f"silu_mul_quant{_suffix}{_SILU_MUL_QUANT}")
_lib.define(f"linear{_LINEAR}")
# The C++ router's fallback warnings (csrc/torch/sm90/routes.cpp) reach Python's warnings module
# through this op: C++ calls it through the dispatcher, since a TORCH_WARN inside a torch.ops
# call goes to stderr instead.
_lib.define("_warn(str message) -> ()")


# Frames of torch and of this package: a warning points at the first frame outside them (the user's call).
_INTERNAL_FRAMES = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(os.path.abspath(__file__)) + os.sep)


def _warn(message: str) -> None:
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL_FRAMES):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, UserWarning, stacklevel=level)


_lib.impl("_warn", _warn, "CompositeExplicitAutograd")


# --- fakes: output shapes, stated once, shared by each op and its kernels ------------------
# No checks here: each implementation validates its inputs.


def _fake_quantize_per_token(x, rows=0):
    q = torch.empty_like(x, dtype=torch.int8, memory_format=torch.contiguous_format)
    return q, x.new_empty((*x.shape[:-1], 1), dtype=torch.float32)


def _fake_quantize_static(x, scale, zero_point):
    return torch.empty_like(x, dtype=torch.int8, memory_format=torch.contiguous_format)


def _fake_scaled_mm(a, b, a_scale, b_scale, bias, out_dtype, config="", split_k=None, scheduler="auto"):
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


def _fake_linear(x, weight, weight_scale, bias, input_scale, input_zero_point, rows=0, config=""):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _fake_rms_norm_quant(x, weight, eps):
    return (*_fake_quantize_per_token(x), torch.empty_like(x, memory_format=torch.contiguous_format))


def _fake_add_rms_norm_quant(x, residual, weight, eps):
    return (*_fake_rms_norm_quant(x, weight, eps), torch.empty_like(x, memory_format=torch.contiguous_format))


def _fake_silu_mul_quant(gate, up):
    return _fake_quantize_per_token(gate)


_FAKES = {
    "quantize_per_token": _fake_quantize_per_token,
    "quantize_static": _fake_quantize_static,
    "scaled_mm": _fake_scaled_mm,
    "linear": _fake_linear,
    "rms_norm_quant": _fake_rms_norm_quant,
    "add_rms_norm_quant": _fake_add_rms_norm_quant,
    "silu_mul_quant": _fake_silu_mul_quant,
}
for _name, _fake in _FAKES.items():
    torch.library.register_fake(f"w8a8::{_name}", _fake)
    if _name != "linear":
        torch.library.register_fake(f"w8a8::{_name}_triton", _fake)
if dispatch.load("_C")[0]:
    for _name in ("scaled_mm_sm90", "quantize_per_token_sm90", "quantize_static_sm90", "linear_sm90"):
        torch.library.register_fake(f"w8a8::{_name}", _FAKES[_name.rsplit("_", 1)[0]])
if dispatch.load("_C_sm80")[0]:
    torch.library.register_fake("w8a8::scaled_mm_sm80", _fake_scaled_mm)


# --- implementations --------------------------------------------------------------------


def _reference_linear(x, weight, weight_scale, bias, input_scale, input_zero_point):
    return dispatch.linear_composed(x, weight, weight_scale, bias, input_scale, input_zero_point,
                                    mm_backend="reference", quant_backend="reference")


def _triton_linear(x, weight, weight_scale, bias, input_scale, input_zero_point):
    return dispatch.linear_composed(x, weight, weight_scale, bias, input_scale, input_zero_point,
                                    mm_backend="triton", quant_backend="triton")


def _triton():
    # Imported on first use: TRITON_INTERPRET is read when the kernels are decorated. Kept after
    # that: an import statement costs microseconds on every producer call.
    if not _TRITON_KERNELS:
        from w8a8 import triton as triton_kernels

        _TRITON_KERNELS.append(triton_kernels)
    return _TRITON_KERNELS[0]


_TRITON_KERNELS: list = []


def _triton_scaled_mm(a, b, a_scale, b_scale, bias, out_dtype):
    validate.scaled_mm(a, b, a_scale, b_scale, bias, out_dtype)
    return _triton().scaled_mm(a, b, a_scale, b_scale, bias, out_dtype)


def _triton_quantize_per_token(x):
    validate.quantize_per_token(x)
    return _triton().quantize_per_token(x)


def _triton_quantize_static(x, scale, zero_point):
    validate.quantize_static(x, scale, zero_point)
    return _triton().quantize_static(x, scale, zero_point)


def _triton_rms_norm_quant(x, weight, eps):
    validate.rms_norm_quant(x, weight, eps)
    return _triton().rms_norm_quant(x, weight, eps)


def _triton_add_rms_norm_quant(x, residual, weight, eps):
    validate.add_rms_norm_quant(x, residual, weight, eps)
    return _triton().rms_norm_quant(x, weight, eps, residual)


def _triton_silu_mul_quant(gate, up):
    validate.silu_mul_quant(gate, up)
    return _triton().silu_mul_quant(gate, up)


_TRITON = {
    "quantize_per_token": _triton_quantize_per_token,
    "quantize_static": _triton_quantize_static,
    "scaled_mm": _triton_scaled_mm,
    "rms_norm_quant": _triton_rms_norm_quant,
    "add_rms_norm_quant": _triton_add_rms_norm_quant,
    "silu_mul_quant": _triton_silu_mul_quant,
}
for _name, _impl in _TRITON.items():
    _lib.impl(_name, dispatch.kernel(_name, "reference"), "CPU")
    for _key in ("CPU", "CUDA"):  # CPU: Triton's interpreter (tests)
        _lib.impl(f"{_name}_triton", _impl, _key)
_lib.impl("linear", _reference_linear, "CPU")
# On a GPU: the C++ router, registered by w8a8._C (the fused producers' Triton kernels launched from
# C++ there), or, without it, the Triton kernels.
_ROUTED = ("scaled_mm", "linear", "quantize_per_token", "quantize_static", "rms_norm_quant", "add_rms_norm_quant",
           "silu_mul_quant")
if not dispatch.load("_C")[0]:
    for _name in _ROUTED:
        _lib.impl(_name, _triton_linear if _name == "linear" else _TRITON[_name], "CUDA")


def _inference_only(op: str):
    def backward(ctx, *grads):
        raise RuntimeError(
            f"w8a8.{op} is inference only: int8 weights have no gradient and the quantizers none that "
            "would be meaningful; keep W8A8 layers out of the autograd graph (torch.inference_mode) or "
            "train the float model"
        )

    return backward


def _no_context(ctx, inputs, output) -> None:
    pass


# Inference only: a backward through the ops (W8A8Linear, the fused producers) raises this, not a
# silent zero or a missing gradient. w8a8._C states the same rule in C++
# (csrc/torch/sm90/autograd.cpp), with no Python per call; without it, this Python kernel.
if not dispatch.load("_C")[0]:
    for _name in ("scaled_mm", "linear", "rms_norm_quant", "add_rms_norm_quant", "silu_mul_quant"):
        torch.library.register_autograd(f"w8a8::{_name}", _inference_only(_name), setup_context=_no_context)


# --- public wrappers -----------------------------------------------------------------------


# Tensor types without a subclass's own dispatch: the ones a shortcut may hand to a kernel directly.
PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


# Where w8a8._C is built, the fused producers' CUDA implementation is C++ and the wrappers call the op.
_PRODUCERS_IN_CXX = bool(dispatch.load("_C")[0])


def _triton_eager(*tensors: torch.Tensor) -> bool:
    """Whether a fused producer's wrapper may call its Triton kernel (the op's only GPU kernel)
    without the dispatcher, where w8a8._C is not built: every input a plain CUDA tensor, none
    asked for a gradient (the op's autograd entry raises inference-only), nothing tracing. The
    op's CUDA implementation is then that same function; the round trip through the dispatcher
    into Python costs more host time than the launch (compile and export see the op)."""
    if _PRODUCERS_IN_CXX or torch.compiler.is_compiling():
        return False
    grad = torch.is_grad_enabled()
    return all(type(t) in PLAIN_TENSORS and t.is_cuda and not (grad and t.requires_grad) for t in tensors)


def quantize_per_token(x: torch.Tensor, backend: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-token (per-row) int8 quantization: ``w8a8::quantize_per_token``.

    Parameters
    ----------
    x : Tensor [..., K], float16 / bfloat16 / float32, unit stride along K, K >= 1.
    backend : None (the op: the device's fastest kernel), or ``"triton"``, ``"sm90"``,
        ``"reference"`` to run that kernel (tests, benchmarks).

    Returns
    -------
    q : Tensor [..., K], int8, contiguous. ``q = clamp(rint(x / scale), -128, 127)``,
        half to even; with this scale only -127..127 occur.
    scale : Tensor [..., 1], float32. ``scale = amax(|x|, dim=-1) / 127``.
        An all-zero row gives q = 0, scale = 0. A row holding Inf or NaN gives
        q = 0 and scale = NaN, so that row of any product is NaN downstream.
        On an sm90 GPU both live in storage padded to the sm90 GEMM's tile edge
        (``w8a8.padding.padded_rows``), which the sm90 ``scaled_mm`` runs on.
    """
    if backend is None:
        return torch.ops.w8a8.quantize_per_token.default(x)
    return dispatch.named_kernel("quantize_per_token", x, backend)(x)


def quantize_static(
    x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None = None, backend: str | None = None
) -> torch.Tensor:
    """Per-tensor static int8 quantization with a calibrated scale: ``w8a8::quantize_static``.

    Parameters
    ----------
    x : Tensor [..., K], float16 / bfloat16 / float32, unit stride along K.
    scale : Tensor of one float32 value, on x's device (read on the device: no host sync).
    zero_point : optional Tensor of one int8 or int32 value: for asymmetric activations.
    backend : as for ``quantize_per_token``.

    Returns
    -------
    q : Tensor [..., K], int8. ``q = clamp(rint(x / scale) + zero_point, -128, 127)``;
        +-Inf saturate, NaN becomes ``zero_point`` (int8 cannot carry it).
    """
    if backend is None:
        return torch.ops.w8a8.quantize_static.default(x, scale, zero_point)
    return dispatch.named_kernel("quantize_static", x, backend)(x, scale, zero_point)


def scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
    backend: str | None = None,
    *,
    split_k: int | None = None,
    scheduler: Literal["auto", "persistent", "stream_k"] = "auto",
) -> torch.Tensor:
    """int8 x int8 matmul with a fused dequantization epilogue: ``w8a8::scaled_mm``.

    ``out = a_scale * (b_scale^T * (a @ b^T)) + bias``: the product is exact in int32,
    the epilogue runs in float32 and is rounded once to ``out_dtype``.

    Parameters
    ----------
    a : Tensor [M, K], int8, unit stride along K (row stride free).
    b : Tensor [N, K], int8: the ``nn.Linear`` weight layout (no transpose).
    a_scale : float32, 1 value (per tensor) or M values ([M, 1], per token), contiguous.
    b_scale : float32, 1 value or N values ([N] or [N, 1], per channel), contiguous.
    bias : optional Tensor [N], float32 or ``out_dtype``.
    out_dtype : torch.bfloat16, torch.float16 or torch.float32.
    backend : None (the op: the device's fastest kernel that takes these operands;
        a fallback on a GPU is warned once), or ``"sm90"``, ``"sm80"``, ``"triton"``,
        ``"reference"`` to run that kernel (tests, benchmarks; raises if unavailable).
    split_k : with ``backend="sm90"`` only: None (the heuristic), 1 (no split) or S > 1, K
        split S ways over as many CTAs (at most one split per 128-wide K tile), the int32
        partial sums reduced in a fixed order (deterministic, bit-identical to no split).
    scheduler : with ``backend="sm90"`` only: ``"auto"`` (the heuristic), ``"persistent"``
        (data-parallel: one CTA per output tile's whole K loop) or ``"stream_k"`` (CUTLASS's
        stream-K: K iterations balanced over the SMs). docs/GUIDE.md says when either pays.

    Returns
    -------
    out : Tensor [M, N], row-major, ``out_dtype``, on a's device.
    """
    if split_k is not None or scheduler != "auto":
        return dispatch.scaled_mm_sm90_decomposed(a, b, a_scale, b_scale, bias, out_dtype, backend, split_k, scheduler)
    if backend is None:
        return torch.ops.w8a8.scaled_mm.default(a, b, a_scale, b_scale, bias, out_dtype)
    return dispatch.named_kernel("scaled_mm", a, backend)(a, b, a_scale, b_scale, bias, out_dtype)


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    input_scale: torch.Tensor | None = None,
    input_zero_point: torch.Tensor | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """A W8A8 linear layer's forward: ``w8a8::linear``, defined as ::

        q, s = quantize_per_token(x)                                  (input_scale None)
        q, s = quantize_static(x, input_scale, input_zero_point), input_scale   (else)
        out  = scaled_mm(q, weight, s, weight_scale, bias, x.dtype)

    with x flattened to [-1, K] and the output shaped [..., N]. ``bias`` is added as
    given: with a zero point, pass the folded bias (``W8A8Linear.folded_bias``).

    Parameters
    ----------
    x : Tensor [..., K], float16 / bfloat16 / float32 (the output dtype), any strides.
    weight : Tensor [N, K], int8, unit stride along K.
    weight_scale : float32, 1 or N values. bias : optional [N], float32 or x's dtype.
    input_scale : None (dynamic per-token activations) or one float32 value (static).
    input_zero_point : None or one int8 / int32 value (static, asymmetric).
    backend : None (the op), or a scaled_mm kernel name (see ``scaled_mm``).
    """
    if backend is None:
        return torch.ops.w8a8.linear.default(x, weight, weight_scale, bias, input_scale, input_zero_point)
    return dispatch.linear_kernel(x, weight, backend)(x, weight, weight_scale, bias, input_scale, input_zero_point)


def rms_norm_quant(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None = None,
    backend: str | None = None,
) -> tuple[torch.Tensor, ...]:
    """RMSNorm, then per-token int8 quantization, in one pass: ``w8a8::rms_norm_quant``, or
    with ``residual`` ``w8a8::add_rms_norm_quant`` (the residual add first). As Hugging Face
    transformers' ``LlamaRMSNorm`` in the model dtype ``dt = x.dtype`` ::

        s      = x, or (x + residual) rounded to dt        (sum: the new residual)
        normed = dt(weight * dt(s * rsqrt(mean(s**2) + eps)))     (fp32 inside)
        codes, scales = quantize_per_token(normed)

    Parameters
    ----------
    x : Tensor [..., K], float16 / bfloat16 / float32, unit stride along K (leading dims
        any strides), 1 <= K <= ``w8a8.validate.MAX_K``.
    weight : Tensor [K], x's dtype, contiguous.
    eps : float, finite, >= 0.
    residual : None, or a Tensor of x's shape and dtype with unit stride along K.
    backend : None (the op: the device's fastest kernel), or ``"triton"``, ``"reference"``
        to run that kernel (tests, benchmarks).

    Returns
    -------
    codes : Tensor [..., K], int8, contiguous (``quantize_per_token`` of normed).
    scales : Tensor [..., 1], float32.
    normed : Tensor [..., K], dt, contiguous: what the layer's unquantized consumers read.
    sum : Tensor [..., K], dt, contiguous (only with ``residual``): x + residual, the new residual.

    The math, and how closely the kernels reproduce normed, are in ``w8a8.reference``.
    """
    if residual is None:
        if backend is None:
            if _triton_eager(x, weight):
                return _triton_rms_norm_quant(x, weight, eps)
            return torch.ops.w8a8.rms_norm_quant.default(x, weight, eps)
        return dispatch.named_kernel("rms_norm_quant", x, backend)(x, weight, eps)
    if backend is None:
        if _triton_eager(x, residual, weight):
            return _triton_add_rms_norm_quant(x, residual, weight, eps)
        return torch.ops.w8a8.add_rms_norm_quant.default(x, residual, weight, eps)
    return dispatch.named_kernel("add_rms_norm_quant", x, backend)(x, residual, weight, eps)


def silu_mul_quant(
    gate: torch.Tensor, up: torch.Tensor, backend: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """SiLU(gate) * up, then per-token int8 quantization, in one pass: ``w8a8::silu_mul_quant``.
    As Hugging Face transformers' ``LlamaMLP`` in the model dtype ``dt = gate.dtype`` ::

        p = dt(dt(silu(gate)) * up)          (fp32 inside; silu(g) = g / (1 + exp(-g)))
        codes, scales = quantize_per_token(p)

    Parameters
    ----------
    gate : Tensor [..., F], float16 / bfloat16 / float32, unit stride along F (leading dims
        any strides: gate and up are often the two halves of one [M, 2F] GEMM output),
        1 <= F <= ``w8a8.validate.MAX_K``.
    up : Tensor of gate's shape and dtype, unit stride along F.
    backend : as for ``rms_norm_quant``.

    Returns
    -------
    codes : Tensor [..., F], int8, contiguous.
    scales : Tensor [..., 1], float32.
    """
    if backend is None:
        if _triton_eager(gate, up):
            return _triton_silu_mul_quant(gate, up)
        return torch.ops.w8a8.silu_mul_quant.default(gate, up)
    return dispatch.named_kernel("silu_mul_quant", gate, backend)(gate, up)
