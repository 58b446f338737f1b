"""quantize_model: swap the eligible nn.Linear layers of a model for W8A8Linear, in place."""
from __future__ import annotations

import dataclasses
import fnmatch
import math

import torch
from torch import nn

from w8a8.linear import W8A8Linear


@dataclasses.dataclass
class QuantizationReport:
    """What ``quantize_model`` did: replaced layers, skipped ones with the reason, and weight SQNR."""

    replaced: list[str] = dataclasses.field(default_factory=list)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    sqnr_db: dict[str, float] = dataclasses.field(default_factory=dict)

    def summary(self) -> str:
        lines = [f"replaced {len(self.replaced)} Linear layers, skipped {len(self.skipped)}"]
        if self.sqnr_db:
            vals = list(self.sqnr_db.values())
            lines.append(f"weight SQNR: min {min(vals):.1f} dB, mean {sum(vals) / len(vals):.1f} dB")
        lines += [f"  skipped {name}: {why}" for name, why in self.skipped.items()]
        return "\n".join(lines)


def _matches(name: str, patterns) -> bool:
    """A layer matches a pattern by full name, by its last components, or by glob."""
    return any(name == p or name.endswith("." + p) or fnmatch.fnmatchcase(name, p) for p in patterns)


def weight_sqnr_db(weight: torch.Tensor, layer: W8A8Linear) -> float:
    """10 log10(|W|^2 / |W - dequant(Q(W))|^2), in float64."""
    w = weight.detach().double()
    err = (w - layer.dequantized_weight().double()).pow(2).sum().item()
    sig = w.pow(2).sum().item()
    if err == 0.0:
        return math.inf
    return 10.0 * math.log10(sig / err) if sig > 0 else -math.inf


def quantize_model(
    model: nn.Module,
    skip=("lm_head",),
    act_quant: str = "dynamic",
    progress: bool = True,
    input_scales: dict[str, float] | None = None,
    backend: str | None = None,
) -> QuantizationReport:
    """Replace every eligible ``nn.Linear`` in ``model`` by a ``W8A8Linear``, in place.

    Parameters
    ----------
    model : the float model; its Linears must hold real (not meta) weights.
    skip : layer names or globs to keep in float (``"lm_head"`` matches ``model.lm_head``).
    act_quant : ``"dynamic"`` (per token) or ``"static"`` (per tensor; needs ``input_scales``).
    progress : show a tqdm progress bar.
    input_scales : for ``"static"``: layer name -> calibrated activation scale.
    backend : passed to every new layer (None: the fastest available).

    Returns
    -------
    QuantizationReport with the replaced names, the skipped ones and why, and
    each replaced layer's weight-quantization SQNR in dB.
    """
    from tqdm.auto import tqdm

    report = QuantizationReport()
    candidates = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        if _matches(name, skip):
            report.skipped[name] = "matches skip"
        elif not module.weight.dtype.is_floating_point:
            report.skipped[name] = f"weight dtype {module.weight.dtype} is not floating point"
        elif module.weight.is_meta:
            report.skipped[name] = "weight is on the meta device (load it first)"
        else:
            candidates.append(name)
    if act_quant == "static":
        missing = [n for n in candidates if n not in (input_scales or {})]
        if missing:
            raise ValueError(
                f"quantize_model: act_quant='static' needs input_scales for every layer; missing {missing[:5]}"
                + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            )
    for name in tqdm(candidates, desc="w8a8: quantizing", disable=not progress, unit="layer"):
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        linear = getattr(parent, child)
        scale = (input_scales or {}).get(name) if act_quant == "static" else None
        layer = W8A8Linear.from_linear(linear, act_quant=act_quant, input_scale=scale, backend=backend)
        report.sqnr_db[name] = weight_sqnr_db(linear.weight, layer)
        setattr(parent, child, layer)
        report.replaced.append(name)
    return report
