"""W8A8Linear: a drop-in replacement for nn.Linear with int8 weights and activations."""
from __future__ import annotations

import weakref
from typing import NamedTuple

import torch
from torch import nn

from w8a8 import dispatch, ops, reference

__all__ = ["QuantizedActivation", "W8A8Linear"]

ACT_QUANT_MODES = ("dynamic", "static")


class QuantizedActivation(NamedTuple):
    """An activation already quantized per token (``w8a8.ops.quantize_per_token``,
    ``rms_norm_quant``, ``silu_mul_quant``): a dynamic ``W8A8Linear`` given one runs only
    its GEMM. ``codes`` int8 [..., K]; ``scales`` float32 [..., 1]; ``dtype`` the float
    dtype of the output (the model's)."""

    codes: torch.Tensor
    scales: torch.Tensor
    dtype: torch.dtype


def _frozen(t: torch.Tensor) -> nn.Parameter:
    """A parameter that is data, not a trainable weight (int8 codes cannot require grad)."""
    return nn.Parameter(t, requires_grad=False)


# Tensors whose dtype is part of the format: module casts (.half(), .to(dtype), .type()) move
# them but keep their dtype; load_state_dict refuses any other dtype for them.
FIXED_DTYPES = {
    "weight": torch.int8,
    "weight_scale": torch.float32,
    "input_scale": torch.float32,
    "input_zero_point": torch.int8,
}


# --- the folded bias of an input zero point ----------------------------------------------------


def _fold_zero_point(weight, weight_scale, input_scale, input_zero_point, bias) -> torch.Tensor:
    """The fp32 ``bias - input_scale * weight_scale * zp * rowsum(weight)`` (without a bias, the
    negated correction): the one place this is computed."""
    rowsum = weight.sum(dim=1, dtype=torch.int32).float()
    corr = input_scale * weight_scale * (input_zero_point.float() * rowsum)
    return -corr if bias is None else bias.float() - corr


# Under torch.compile / torch.export the fold is this op, opaque to Inductor: Inductor's
# Triton code contracts the multiply and the subtraction into one FMA, a bias one fp32 bit
# off eager's, and so an output one ulp off the reference (test_forced_kernels_equal_the_composition).
@torch.library.custom_op("w8a8::fold_zero_point", mutates_args=())
def _fold_zero_point_op(weight: torch.Tensor, weight_scale: torch.Tensor, input_scale: torch.Tensor,
                        input_zero_point: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return _fold_zero_point(weight, weight_scale, input_scale, input_zero_point, bias)


@_fold_zero_point_op.register_fake
def _(weight, weight_scale, input_scale, input_zero_point, bias):
    return weight.new_empty(weight.shape[:1], dtype=torch.float32)


def _keepable(sources: tuple) -> bool:
    """Whether a folded bias computed from ``sources`` may be kept for later forwards: in plain
    eager only (not traced by torch.compile / torch.export, not captured into a CUDA graph), from
    plain tensors that have version counters (no subclass, proxy or inference tensor), and with
    no gradient to flow into it."""
    if torch.compiler.is_compiling():
        return False
    tensors = [t for t in sources if t is not None]
    if any(type(t) not in ops.PLAIN_TENSORS or t.is_inference() for t in tensors):
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    return not (sources[0].is_cuda and torch.cuda.is_current_stream_capturing())


def _stamp(t: torch.Tensor | None) -> tuple | None:
    """What changes with ``t``'s contents: its version counter (every in-place edit bumps it), its
    storage address (``.data =``), device, dtype, shape and strides."""
    return None if t is None else (t._version, t.data_ptr(), t.device, t.dtype, t.shape, t.stride())


def _stream_id(t: torch.Tensor) -> int:
    """The current CUDA stream of t's device (its cudaStream_t, as ``Stream.cuda_stream``), 0 off CUDA.
    Read raw: ``torch.cuda.current_stream`` builds a Stream object, several microseconds per call."""
    return torch._C._cuda_getCurrentRawStream(t.device.index) if t.is_cuda else 0


class _KeptFoldedBias:
    """A folded bias and what it was computed from: weak references to the source tensors (the
    very objects, without keeping them alive), their stamps, and the CUDA stream it ran on (a
    reader on another stream would not be ordered after it)."""

    def __init__(self, sources: tuple) -> None:
        self.refs = tuple(None if t is None else weakref.ref(t) for t in sources)
        self.stamps = tuple(map(_stamp, sources))
        self.stream = _stream_id(sources[0])
        self.value = _fold_zero_point(*sources)

    def valid_for(self, sources: tuple) -> bool:
        return (all(t is None if r is None else r() is t for r, t in zip(self.refs, sources))
                and tuple(map(_stamp, sources)) == self.stamps
                and _stream_id(sources[0]) == self.stream)


class W8A8Linear(nn.Module):
    """``y = x @ W^T + b`` with W int8 per output channel and x quantized to int8.

    Parameters (frozen: ``requires_grad=False``; registered as parameters so that tools that
    walk parameters — counts, device maps, offloading — see them; the state dict is the same)
    -------
    weight : int8 [out_features, in_features]
    weight_scale : float32 [out_features]
    input_scale : float32 [1], only with ``act_quant="static"``
    input_zero_point : int8 [1], only with ``act_quant="static"`` and
        ``input_zero_point=True`` (asymmetric activations, e.g. from a checkpoint)
    bias : [out_features] in the layer's float dtype, or None

    With an input zero point ``zp``, activations quantize as
    ``q = clamp(rint(x / s) + zp)`` and the zero point folds exactly into a
    per-channel bias term::

        out = s * w_scale * ((q - zp) @ W^T) + bias
            = s * w_scale * (q @ W^T) + (bias - s * w_scale * zp * rowsum(W))

    (fp32, ``folded_bias()``). The correction needs an int8 [N, K] row sum, a full read of
    the weight: in eager forwards it is computed once and kept (not a parameter, not in the
    state dict) until ``weight``, ``weight_scale``, ``input_scale``, ``input_zero_point`` or
    ``bias`` is edited in place, replaced, moved or cast, or a forward runs on another CUDA
    stream; under ``torch.compile`` / ``torch.export`` and during CUDA-graph capture it is
    computed inside the graph, so a replay after an in-place edit reads the edited tensors.
    An edit that bypasses the tensor's version counter (through ``.data`` or ``.numpy()``) is
    not seen: edit the parameter itself (``layer.weight.copy_(w)`` under ``torch.no_grad()``),
    reassign it, or use ``load_state_dict``.

    ``act_quant="dynamic"`` quantizes each token (row) with its own scale at run
    time; ``"static"`` uses the calibrated per-tensor ``input_scale``. forward
    accepts any leading dims, returns the input's dtype, and neither
    synchronises with the host nor branches on data, so it captures in CUDA
    graphs and compiles with ``fullgraph=True``.

    Module casts (``.half()``, ``.bfloat16()``, ``.float()``, ``.to(dtype)``) cast the
    bias only: ``weight`` stays int8 and the scales float32, bit for bit; device
    moves move everything. ``load_state_dict`` refuses a state whose ``weight`` /
    ``input_zero_point`` is not int8 or whose scales are not float (bf16 / fp16 scales
    are upcast exactly), naming the key. Inference only: no gradients.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        act_quant: str = "dynamic",
        backend: str | None = None,
        device=None,
        dtype: torch.dtype | None = None,
        input_zero_point: bool = False,
    ) -> None:
        super().__init__()
        if act_quant not in ACT_QUANT_MODES:
            raise ValueError(f"W8A8Linear: act_quant must be one of {ACT_QUANT_MODES}, got {act_quant!r}")
        if input_zero_point and act_quant != "static":
            raise ValueError(f"W8A8Linear: input_zero_point needs act_quant='static', got {act_quant!r}")
        self.in_features = in_features
        self.out_features = out_features
        self.act_quant = act_quant
        if backend is not None and backend not in dispatch.BACKENDS["scaled_mm"]:
            raise ValueError(
                f"W8A8Linear: backend must be None or one of {dispatch.BACKENDS['scaled_mm']}, got {backend!r}"
            )
        self.backend = backend
        # Every name registered, absent ones as None (as nn.Linear's bias): forward reads _parameters directly.
        self.weight = _frozen(torch.zeros(out_features, in_features, dtype=torch.int8, device=device))
        self.weight_scale = _frozen(torch.ones(out_features, dtype=torch.float32, device=device))
        static = act_quant == "static"
        self.register_parameter("input_scale", _frozen(torch.ones(1, dtype=torch.float32, device=device)) if static else None)
        zp = _frozen(torch.zeros(1, dtype=torch.int8, device=device)) if input_zero_point else None
        self.register_parameter("input_zero_point", zp)
        bias_dtype = dtype if dtype is not None else torch.get_default_dtype()
        self.register_parameter("bias", _frozen(torch.zeros(out_features, dtype=bias_dtype, device=device)) if bias else None)

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        act_quant: str = "dynamic",
        input_scale: float | torch.Tensor | None = None,
        backend: str | None = None,
    ) -> "W8A8Linear":
        """Quantize ``linear`` per output channel (symmetric, round half to even).

        ``input_scale`` (the calibrated activation abs-max / 127) is required
        with ``act_quant="static"`` and refused with ``"dynamic"``.
        """
        if act_quant == "static" and input_scale is None:
            raise ValueError("W8A8Linear.from_linear: act_quant='static' needs input_scale (a calibrated float)")
        if act_quant == "dynamic" and input_scale is not None:
            raise ValueError("W8A8Linear.from_linear: input_scale is only used with act_quant='static'")
        w = linear.weight.detach()
        module = cls(
            linear.in_features,
            linear.out_features,
            bias=linear.bias is not None,
            act_quant=act_quant,
            backend=backend,
            device=w.device,
            dtype=w.dtype,
        )
        q, scale = reference.quantize_weight_per_channel(w)
        module.weight.copy_(q)
        module.weight_scale.copy_(scale)
        if linear.bias is not None:
            module.bias.copy_(linear.bias.detach())
        if act_quant == "static":
            s = torch.as_tensor(input_scale, dtype=torch.float32).reshape(1)
            if not (torch.isfinite(s).all() and (s > 0).all()):
                raise ValueError(f"W8A8Linear.from_linear: input_scale must be finite and > 0, got {s.item()}")
            module.input_scale.copy_(s)
        return module

    def _apply(self, fn, recurse=True):
        """Casts keep the int8 / fp32 tensors' dtype and values; device moves move them."""
        fixed = {k: self._parameters.pop(k) for k in FIXED_DTYPES if self._parameters.get(k) is not None}
        try:
            super()._apply(fn, recurse)
        finally:
            moved = {}
            for key, t in fixed.items():
                try:
                    r = fn(t)
                except BaseException:
                    self._parameters.update(fixed)
                    raise
                moved[key] = _frozen(r if r.dtype == t.dtype else t.to(device=r.device))
            self._parameters.update(moved)
        # The kept folded bias would no longer match anyway; dropping it frees the old device's copy now.
        self.__dict__.pop("_w8a8_folded_bias", None)
        return self

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        """Refuse wrong dtypes (a float weight would be truncated to int8, an int32 one wrapped), naming the key;
        upcast bf16 / fp16 scales to float32 exactly and accept [N, 1] weight scales."""
        problems = []
        for name, want in FIXED_DTYPES.items():
            key = prefix + name
            if key not in state_dict or self._parameters.get(name) is None:
                continue
            t = state_dict[key]
            if not isinstance(t, torch.Tensor):
                continue  # torch reports it
            if want == torch.float32:
                if t.dtype not in (torch.float32, torch.bfloat16, torch.float16):
                    problems.append(f"{key}: expected dtype torch.float32 (or bfloat16 / float16), got {t.dtype}")
                    continue
                t = t.float()
                if name == "weight_scale" and t.dim() == 2 and t.shape[1] == 1:
                    t = t.reshape(-1)
                state_dict[key] = t
            elif t.dtype != want:
                problems.append(f"{key}: expected dtype {want}, got {t.dtype} (quantize with W8A8Linear.from_linear)")
        bias = state_dict.get(prefix + "bias")
        if self.bias is not None and isinstance(bias, torch.Tensor) and not bias.dtype.is_floating_point:
            problems.append(f"{prefix}bias: expected a float dtype, got {bias.dtype}")
        if problems:
            error_msgs.extend(f"W8A8Linear: {p}" for p in problems)
            return
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)

    def forward(self, x: torch.Tensor | QuantizedActivation) -> torch.Tensor:
        """``x`` float [..., in_features]: ``w8a8.linear`` (quantize x, then the scaled GEMM); or
        a ``QuantizedActivation`` (dynamic layers only): the GEMM alone (``forward_quantized``)."""
        if isinstance(x, QuantizedActivation):
            return self.forward_quantized(x)
        w, ws, _, s, zp = self._tensors()
        return ops.linear(x, w, ws, self.folded_bias(), s, zp, backend=self.backend)

    def _tensors(self) -> tuple:
        """``(weight, weight_scale, bias, input_scale, input_zero_point)``, read from ``_parameters``
        directly: nn.Module.__getattr__ costs about 1 us a name, on every call."""
        p = self._parameters
        try:
            return p["weight"], p["weight_scale"], p["bias"], p["input_scale"], p["input_zero_point"]
        except KeyError:  # a name deleted, or a layer pickled before every name was registered
            return self.weight, self.weight_scale, self.bias, self.input_scale, self.input_zero_point

    def forward_quantized(self, x: QuantizedActivation) -> torch.Tensor:
        """The GEMM on an activation quantized per token elsewhere: ``scaled_mm(codes, weight,
        scales, weight_scale, bias, dtype)``, shaped [..., out_features]."""
        if self.act_quant != "dynamic":
            raise ValueError(
                "W8A8Linear: a QuantizedActivation needs act_quant='dynamic' (per-token scales); this layer "
                f"quantizes with its calibrated input_scale (act_quant={self.act_quant!r}): pass the float activation"
            )
        codes, scales = x.codes, x.scales
        k = self.in_features
        if codes.dim() < 1 or codes.shape[-1] != k:
            raise ValueError(f"W8A8Linear: QuantizedActivation codes must have last dim {k}, got shape {list(codes.shape)}")
        if scales.shape != (*codes.shape[:-1], 1):
            raise ValueError(
                f"W8A8Linear: QuantizedActivation scales must have shape {[*codes.shape[:-1], 1]}, got {list(scales.shape)}"
            )
        out = ops.scaled_mm(codes.reshape(-1, k), self.weight, scales.reshape(-1, 1), self.weight_scale, self.bias,
                            x.dtype, backend=self.backend)
        return out.view(*codes.shape[:-1], self.out_features)

    def folded_bias(self) -> torch.Tensor | None:
        """The bias the epilogue adds: ``bias``, or with an input zero point the fp32
        ``bias - input_scale * weight_scale * zp * rowsum(weight)`` (see the class docstring).

        With a zero point, in eager, the value is kept and returned again while the five
        tensors it is made from are the same objects with the same version counters, storage
        address, device, dtype, shape and strides, and the current CUDA stream is the one it
        was computed on; otherwise it is computed again (the same expression, bit for bit).
        It is computed on every call and never kept under ``torch.compile`` / ``torch.export``
        (version counters cannot be traced: the graph calls ``w8a8::fold_zero_point``, the
        same expression, kept out of Inductor's code generation so it rounds as in eager), during
        CUDA-graph capture (the graph computes it on each replay, so replays see in-place
        edits), for inference tensors and tensor subclasses (no version counter to watch),
        and when a gradient would flow into it. The returned tensor is shared, like ``bias``:
        read it, do not edit it in place.
        """
        weight, weight_scale, bias, input_scale, zero_point = self._tensors()
        if zero_point is None:
            return bias
        sources = (weight, weight_scale, input_scale, zero_point, bias)
        if torch.compiler.is_compiling():
            return _fold_zero_point_op(*sources)
        if not _keepable(sources):
            return _fold_zero_point(*sources)
        kept = self.__dict__.get("_w8a8_folded_bias")
        if kept is None or not kept.valid_for(sources):
            kept = self.__dict__["_w8a8_folded_bias"] = _KeptFoldedBias(sources)
        return kept.value

    def __getstate__(self):
        """A copy or pickle leaves the kept folded bias out (it holds weak references); the copy
        computes its own."""
        state = super().__getstate__()
        state.pop("_w8a8_folded_bias", None)
        return state

    def dequantized_weight(self) -> torch.Tensor:
        """The float32 weight this layer represents: ``weight * weight_scale``."""
        return self.weight.float() * self.weight_scale.reshape(-1, 1)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, act_quant={self.act_quant!r}, backend={self.backend!r}"
            + (", input_zero_point=True" if self.input_zero_point is not None else "")
        )
