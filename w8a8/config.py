"""W8A8Config: what ``quantize_model`` and ``from_pretrained(quantize=...)`` do, as one frozen object.

torchao's ``quantize_(model, Int8DynamicActivationInt8WeightConfig(), filter_fn=f)`` is
``w8a8.quantize_model(model, w8a8.W8A8Config(), filter_fn=f)`` here.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from torch import nn

from w8a8.linear import ACT_QUANT_MODES


@dataclasses.dataclass(frozen=True, eq=False)
class W8A8Config:
    """How to quantize a model's ``nn.Linear`` layers to int8 weights x int8 activations.

    Fields (default)
    ----------------
    act_quant ("dynamic") : ``"dynamic"`` (per-token scales at run time) or ``"static"``
        (one calibrated per-tensor scale per layer: from ``input_scales``, else from
        ``calibration``).
    skip (("lm_head",)) : a pattern, or a sequence of them, of the Linears kept in float.
        compressed-tensors' ``ignore`` syntax, matched as it matches it: ``"re:<regex>"``
        (``re.match`` on the layer's name), the exact name, or a class name (the Linear's
        class or a base's); and ours: a name's last components (``"lm_head"`` matches
        ``model.lm_head``) and globs (``"*.mlp.*"``). A pattern matching no Linear warns.
    include (None) : if set, only Linears matching one of these patterns are
        quantized (same matching as ``skip``; ``skip`` wins over ``include``).
    filter_fn (None) : ``filter_fn(module, name) -> bool``, called for each ``nn.Linear``
        left after ``skip`` / ``include`` (torchao's convention); False keeps it in float.
    calibration (None) : model inputs for static scales and SmoothQuant: an iterable of
        batches, each a Tensor, a tuple (positional) or a dict (keyword arguments).
        Read twice when SmoothQuant is on (materialised as a list).
    smoothquant_alpha (None) : run ``w8a8.calibrate.smooth`` with this migration strength in [0, 1]
        on ``calibration`` before calibrating and quantizing (0.5 is the paper's default).
    smoothquant_mappings (None) : norm name -> Linear names it feeds, for SmoothQuant
        (None: ``w8a8.calibrate.llama_mappings(model)``).
    input_scales (None) : layer name -> static input scale (``w8a8.calibrate.calibrate``'s output);
        with ``act_quant="static"`` these are used as given, ``calibration`` is not run.
    backend (None) : kernel for every new layer (None: the fastest available).
    report (True) : compute each layer's weight SQNR (dB, fp32 on the layer's device)
        into ``QuantizationReport.sqnr_db``; False skips it (the report still lists the
        replaced and skipped layers).
    fuse (True) : ``w8a8.fusion.fuse_model`` after quantizing: layers that read one activation
        share its quantization and (``merge``) run as one GEMM; RMSNorm and
        SiLU-and-mul producers quantize their output. Found from one recorded forward
        (a probe for a transformers model, else the model's first eager forward); the
        outputs are those of the separate layers. False: every layer on its own.
    merge (True) : with ``fuse``, concatenate the weights of layers that read one
        activation (q/k/v, gate/up) so that one GEMM runs; their parameters become views
        of it (the state dict keeps one tensor per layer).
    """

    act_quant: str = "dynamic"
    skip: Any = ("lm_head",)
    include: Any = None
    filter_fn: Callable[[nn.Module, str], bool] | None = None
    calibration: Any = None
    smoothquant_alpha: float | None = None
    smoothquant_mappings: dict[str, list[str]] | None = None
    input_scales: dict[str, float] | None = None
    backend: str | None = None
    report: bool = True
    fuse: bool = True
    merge: bool = True

    def __post_init__(self) -> None:
        from w8a8.quantize_model import skip_patterns

        if self.act_quant not in ACT_QUANT_MODES:
            raise ValueError(f"W8A8Config: act_quant must be one of {ACT_QUANT_MODES}, got {self.act_quant!r}")
        object.__setattr__(self, "skip", skip_patterns(self.skip, "W8A8Config", "skip"))
        if self.include is not None:
            object.__setattr__(self, "include", skip_patterns(self.include, "W8A8Config", "include"))
        if self.filter_fn is not None and not callable(self.filter_fn):
            raise TypeError(f"W8A8Config: filter_fn must be callable(module, name) -> bool, got {self.filter_fn!r}")
        if self.smoothquant_alpha is not None:
            a = self.smoothquant_alpha
            if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 <= a <= 1.0:
                raise ValueError(f"W8A8Config: smoothquant_alpha must be a number in [0, 1] or None, got {a!r}")
            if self.calibration is None:
                raise ValueError("W8A8Config: smoothquant_alpha needs calibration batches (calibration=...)")
        if self.smoothquant_mappings is not None and self.smoothquant_alpha is None:
            raise ValueError("W8A8Config: smoothquant_mappings is only used with smoothquant_alpha")
        if self.input_scales is not None and self.act_quant != "static":
            raise ValueError("W8A8Config: input_scales is only used with act_quant='static'")
        if self.calibration is not None and self.act_quant != "static" and self.smoothquant_alpha is None:
            raise ValueError(
                "W8A8Config: calibration is used for act_quant='static' scales or SmoothQuant "
                "(smoothquant_alpha); with act_quant='dynamic' and no SmoothQuant it would be ignored"
            )
        if self.calibration is not None and not isinstance(self.calibration, (list, tuple)):
            object.__setattr__(self, "calibration", list(self.calibration))  # a generator is read more than once
        for name in ("report", "fuse", "merge"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"W8A8Config: {name} must be True or False, got {getattr(self, name)!r}")

    def replace(self, **changes) -> "W8A8Config":
        """A copy with ``changes`` applied (and checked again)."""
        return dataclasses.replace(self, **changes)

    @property
    def quant_method(self) -> str:
        """``"w8a8"``: the transformers quantization method of this config. transformers asks for it
        first in ``from_pretrained(..., quantization_config=config)``; answering registers the method
        with transformers (``w8a8.checkpoint.hf_quantizer``, imported only then)."""
        from w8a8.checkpoint.hf_quantizer import METHOD, register

        register()
        return METHOD

    def to_dict(self) -> dict:
        """The JSON fields (``quant_method`` and every field but ``filter_fn`` and ``calibration``,
        which are code and data), as transformers prints and serialises a quantization config."""
        out = {"quant_method": "w8a8"}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name not in ("filter_fn", "calibration"):
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


FIELDS = tuple(f.name for f in dataclasses.fields(W8A8Config))
DEFAULTS = {f.name: f.default for f in dataclasses.fields(W8A8Config)}
