"""W8A8Linear: a drop-in replacement for nn.Linear with int8 weights and activations."""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from w8a8 import dispatch, ops, reference

ACT_QUANT_MODES = ("dynamic", "static")


class QuantizedActivation(NamedTuple):
    """An activation already quantized per token (``w8a8.quantize_per_token``,
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

    (fp32; the correction is recomputed from the parameters in every forward, an
    int8 [N, K] row sum, so it always agrees with them).

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
        self.weight = _frozen(torch.zeros(out_features, in_features, dtype=torch.int8, device=device))
        self.weight_scale = _frozen(torch.ones(out_features, dtype=torch.float32, device=device))
        self.input_scale = _frozen(torch.ones(1, dtype=torch.float32, device=device)) if act_quant == "static" else None
        self.input_zero_point = _frozen(torch.zeros(1, dtype=torch.int8, device=device)) if input_zero_point else None
        bias_dtype = dtype if dtype is not None else torch.get_default_dtype()
        self.bias = _frozen(torch.zeros(out_features, dtype=bias_dtype, device=device)) if bias else None

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
        group = self.__dict__.get("_w8a8_group")
        if group is not None:  # the parameters are no longer views of the group's merged tensors
            group.invalidate()
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
        group = self.__dict__.get("_w8a8_group")
        if group is not None and local_metadata.get("assign_to_params_buffers"):
            group.invalidate()  # assigned tensors are no longer views of the group's merged ones

    def forward(self, x: torch.Tensor | QuantizedActivation) -> torch.Tensor:
        """``x`` float [..., in_features], or a ``QuantizedActivation`` (dynamic layers only).
        A layer in a ``w8a8.fuse`` group shares its input's quantization with its siblings."""
        if isinstance(x, QuantizedActivation):
            return self.forward_quantized(x)
        group = self.__dict__.get("_w8a8_group")
        if group is not None:
            return group.forward(self, x)
        return self.plain_forward(x)

    def plain_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The layer on its own: ``w8a8.linear`` (quantize x, then the scaled GEMM)."""
        return ops.linear(x, self.weight, self.weight_scale, self.folded_bias(), self.input_scale,
                          self.input_zero_point, backend=self.backend)

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

    def clear_group(self) -> None:
        """Leave a ``w8a8.fuse`` group: the layer runs on its own again."""
        self.__dict__.pop("_w8a8_group", None)
        self.__dict__.pop("_w8a8_index", None)

    def folded_bias(self) -> torch.Tensor | None:
        """The bias the epilogue adds: ``bias``, or with an input zero point the fp32
        ``bias - input_scale * weight_scale * zp * rowsum(weight)`` (see the class docstring)."""
        if self.input_zero_point is None:
            return self.bias
        rowsum = self.weight.sum(dim=1, dtype=torch.int32).float()
        corr = self.input_scale * self.weight_scale * (self.input_zero_point.float() * rowsum)
        return -corr if self.bias is None else self.bias.float() - corr

    def dequantized_weight(self) -> torch.Tensor:
        """The float32 weight this layer represents: ``weight * weight_scale``."""
        return self.weight.float() * self.weight_scale.reshape(-1, 1)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, act_quant={self.act_quant!r}, backend={self.backend!r}"
            + (", input_zero_point=True" if self.input_zero_point is not None else "")
        )
