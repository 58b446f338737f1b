"""Model-level fusion: one quantization per activation, merged sibling projections, and the
quantization done by the producer of the activation (RMSNorm, SiLU(gate) * up).

``plan.py`` finds what to fuse from one recorded forward and swaps in the fused modules of
``modules.py`` (``SharedInputLinear``, ``QuantizingRMSNorm``, ``QuantizingGatedMLP``), which
run eagerly and compile to the fused ops; ``inductor.py`` is the graph pass that joins
what crosses module boundaries under ``torch.compile`` (its rewrites in ``inductor_rewrites.py``).
"""
from w8a8.fusion.modules import QuantizingGatedMLP, QuantizingRMSNorm, SharedInput, SharedInputLinear
from w8a8.fusion.plan import FusionReport, fuse_model, unfuse_model

__all__ = [
    "FusionReport",
    "QuantizingGatedMLP",
    "QuantizingRMSNorm",
    "SharedInput",
    "SharedInputLinear",
    "fuse_model",
    "unfuse_model",
]
