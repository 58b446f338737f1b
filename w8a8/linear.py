"""W8A8Linear: a drop-in replacement for nn.Linear with int8 weights and activations."""
from __future__ import annotations

import functools

import torch
from torch import nn

from w8a8 import backends, checks, ops, reference

ACT_QUANT_MODES = ("dynamic", "static")


# Up to this many tokens W8A8Linear runs as the single op w8a8::linear_cutlass (CUDA
# quantizer + CUTLASS GEMM in one C++ call): decode, where host time dominates (H100:
# 41 us host time per layer call composed of Python ops vs 36 us as one op; the CUDA and
# Triton quantizers both take 4-8 us of GPU time at M <= 128). Above it the Triton
# quantizer is faster on the GPU (M = 8192: 81% vs 61% of HBM at K = 4096) and the
# layer runs the composed path.
FUSED_MAX_TOKENS = 64


@torch.compiler.assume_constant_result
def _fused_route(device: torch.device, dtype: torch.dtype, backend: str | None, k: int, n: int) -> bool:
    """Whether W8A8Linear's forward may run as the single op ``w8a8::linear_cutlass``: the
    layer's GEMM backend is CUTLASS on this device, the CUDA quantizer is built for it, and
    the shape and dtype are ones CUTLASS takes (otherwise the composed path routes or
    raises with the usual messages). A constant under torch.compile."""
    return _fused_route_cached(device.type, device.index, dtype, backend, k, n)


@functools.lru_cache(maxsize=None)
def _fused_route_cached(device_type, device_index, dtype, backend, k, n) -> bool:
    if device_type != "cuda" or backend not in (None, "cutlass"):
        return False
    device = torch.device(device_type, device_index)
    return (
        backends.resolve(backend, device, "scaled_mm") == "cutlass"
        and backends.cutlass_kernel_family(device) == "sm90"
        and backends.unavailable_reason("cuda", device, "quantize_per_token") is None
        and checks.cutlass_shape_reason(k, n, dtype) is None
    )


class W8A8Linear(nn.Module):
    """``y = x @ W^T + b`` with W int8 per output channel and x quantized to int8.

    Buffers
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

    (fp32; the correction is recomputed from the buffers in every forward, an
    int8 [N, K] row sum, so it always agrees with them).

    ``split_k`` / ``scheduler`` steer how the CUTLASS kernel spreads K over the
    SMs (see ``w8a8.scaled_mm``); both are attributes that may be changed later
    and are checked when set.

    ``act_quant="dynamic"`` quantizes each token (row) with its own scale at run
    time; ``"static"`` uses the calibrated per-tensor ``input_scale``. forward
    accepts any leading dims, returns the input's dtype, and neither
    synchronises with the host nor branches on data, so it captures in CUDA
    graphs and compiles with ``fullgraph=True``.
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
        split_k: int | None = None,
        scheduler: str = "auto",
    ) -> None:
        super().__init__()
        if act_quant not in ACT_QUANT_MODES:
            raise ValueError(f"W8A8Linear: act_quant must be one of {ACT_QUANT_MODES}, got {act_quant!r}")
        if input_zero_point and act_quant != "static":
            raise ValueError(f"W8A8Linear: input_zero_point needs act_quant='static', got {act_quant!r}")
        self.in_features = in_features
        self.out_features = out_features
        self.act_quant = act_quant
        self.backend = backend
        checks.check_split("W8A8Linear", split_k, scheduler, backend, k=in_features)
        self._split_k, self._scheduler = split_k, scheduler
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.int8, device=device))
        self.register_buffer("weight_scale", torch.ones(out_features, dtype=torch.float32, device=device))
        if act_quant == "static":
            self.register_buffer("input_scale", torch.ones(1, dtype=torch.float32, device=device))
        else:
            self.input_scale = None
        if input_zero_point:
            self.register_buffer("input_zero_point", torch.zeros(1, dtype=torch.int8, device=device))
        else:
            self.input_zero_point = None
        if bias:
            bias_dtype = dtype if dtype is not None else torch.get_default_dtype()
            self.register_buffer("bias", torch.zeros(out_features, dtype=bias_dtype, device=device))
        else:
            self.bias = None

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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        checks.check_linear_input("W8A8Linear", x, self.in_features, self.weight)
        if x.stride(-1) != 1:
            x = x.contiguous()  # e.g. a transposed input: the kernels read rows with unit stride
        # The route first: a constant, so the token-count test (a guard on M under
        # torch.compile) is only reached where the single op exists.
        if (
            _fused_route(x.device, x.dtype, self.backend, self.in_features, self.out_features)
            and self.input_zero_point is None
            and x.numel() <= FUSED_MAX_TOKENS * self.in_features
        ):
            # One C++ op (quantize + CUTLASS GEMM): the inputs are checked there.
            return torch.ops.w8a8.linear_cutlass.default(
                x, self.weight, self.weight_scale, self.folded_bias(), self.input_scale, self._split_k, self._scheduler
            )
        return self.forward_composed(x)

    def forward_composed(self, x: torch.Tensor) -> torch.Tensor:
        """forward as separate public ops (quantize, then scaled_mm), each validated in
        Python: the path of every device and dtype the single op does not serve."""
        x2 = x.reshape(-1, self.in_features)
        if self.act_quant == "dynamic":
            q, a_scale = ops.quantize_per_token(x2, backend=self._quant_backend())
        else:
            q = ops.quantize_static(x2, self.input_scale, self.input_zero_point, backend=self._quant_backend())
            a_scale = self.input_scale
        out = ops.scaled_mm(
            q, self.weight, a_scale, self.weight_scale, self.folded_bias(), x.dtype,
            backend=self.backend, split_k=self._split_k, scheduler=self._scheduler,
        )
        return out.reshape(*x.shape[:-1], self.out_features)

    @property
    def split_k(self) -> int | None:
        return self._split_k

    @split_k.setter
    def split_k(self, value: int | None) -> None:
        checks.check_split("W8A8Linear", value, self._scheduler, self.backend, k=self.in_features)
        self._split_k = value

    @property
    def scheduler(self) -> str:
        return self._scheduler

    @scheduler.setter
    def scheduler(self, value: str) -> None:
        checks.check_split("W8A8Linear", self._split_k, value, self.backend, k=self.in_features)
        self._scheduler = value

    def folded_bias(self) -> torch.Tensor | None:
        """The bias the epilogue adds: ``bias``, or with an input zero point the fp32
        ``bias - input_scale * weight_scale * zp * rowsum(weight)`` (see the class docstring)."""
        if self.input_zero_point is None:
            return self.bias
        rowsum = self.weight.sum(dim=1, dtype=torch.int32).float()
        corr = self.input_scale * self.weight_scale * (self.input_zero_point.float() * rowsum)
        return -corr if self.bias is None else self.bias.float() - corr

    def _quant_backend(self) -> str | None:
        # Quantization has no CUTLASS kernel: with a CUTLASS backend the activations go
        # through the default quantizer (see backends._PREFERENCE).
        return None if self.backend in checks.CUTLASS_BACKENDS else self.backend

    def dequantized_weight(self) -> torch.Tensor:
        """The float32 weight this layer represents: ``weight * weight_scale``."""
        return self.weight.float() * self.weight_scale.reshape(-1, 1)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, act_quant={self.act_quant!r}, backend={self.backend!r}"
            + (", input_zero_point=True" if self.input_zero_point is not None else "")
            + (f", split_k={self._split_k}" if self._split_k is not None else "")
            + (f", scheduler={self._scheduler!r}" if self._scheduler != "auto" else "")
        )
