"""quantize_model: swap the eligible nn.Linear layers of a model for W8A8Linear, in place."""
from __future__ import annotations

import dataclasses
import fnmatch
import math
import warnings

import torch
from torch import nn

from w8a8.linear import W8A8Linear


@dataclasses.dataclass
class QuantizationReport:
    """What ``quantize_model`` did: replaced layers, skipped ones with the reason, and weight SQNR."""

    replaced: list[str] = dataclasses.field(default_factory=list)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    sqnr_db: dict[str, float] = dataclasses.field(default_factory=dict)
    unmatched_skip: list[str] = dataclasses.field(default_factory=list)  # skip patterns that matched no layer

    def summary(self) -> str:
        lines = [f"replaced {len(self.replaced)} Linear layers, skipped {len(self.skipped)}"]
        if self.sqnr_db:
            vals = list(self.sqnr_db.values())
            lines.append(f"weight SQNR: min {min(vals):.1f} dB, mean {sum(vals) / len(vals):.1f} dB")
        lines += [f"  skipped {name}: {why}" for name, why in self.skipped.items()]
        if self.unmatched_skip:
            lines.append(f"  skip patterns that matched no layer: {self.unmatched_skip}")
        return "\n".join(lines)


def _match(name: str, p: str) -> bool:
    return name == p or name.endswith("." + p) or fnmatch.fnmatchcase(name, p)


def skip_patterns(skip, fn: str = "quantize_model") -> tuple[str, ...]:
    """``skip`` as a tuple of patterns: one string is one pattern (never its characters)."""
    if skip is None:
        return ()
    if isinstance(skip, str):
        return (skip,)
    patterns = tuple(skip)
    if not all(isinstance(p, str) for p in patterns):
        raise TypeError(f"{fn}: skip must be a string or a list of strings, got {skip!r}")
    return patterns


def _matches(name: str, patterns) -> bool:
    """A layer matches a pattern by full name, by its last components, or by glob."""
    return any(_match(name, p) for p in skip_patterns(patterns))


def _direct_reader(name: str, module: nn.Module, parents: dict[str, nn.Module]) -> str | None:
    """Why a Linear cannot be swapped because its parent reads its weight directly, or None.

    ``nn.MultiheadAttention`` passes ``out_proj.weight`` to ``F.multi_head_attention_forward``
    without calling ``out_proj`` (torch marks such Linears ``NonDynamicallyQuantizableLinear``);
    ``nn.TransformerEncoderLayer``'s inference fast path does the same with ``linear1`` / ``linear2``.
    """
    parent = parents.get(name.rpartition(".")[0])
    direct = (
        isinstance(module, nn.modules.linear.NonDynamicallyQuantizableLinear)
        or isinstance(parent, nn.MultiheadAttention)
        # its inference fast path hands linear1 / linear2 weights to one fused op
        or isinstance(parent, nn.TransformerEncoderLayer)
    )
    if direct:
        owner = type(parent).__name__ if parent is not None else "its parent"
        return f"{owner} reads its weight directly (not through forward); swapping it would break the parent"
    return None


def _is_conv1d(module: nn.Module) -> bool:
    """transformers' Conv1D (GPT-2 family): a Linear with a transposed [in, out] weight."""
    return type(module).__name__ == "Conv1D" and type(module).__module__.startswith("transformers")


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
    skip : a layer name or glob, or a list of them, to keep in float (``"lm_head"`` matches
        ``model.lm_head``); patterns that match nothing are listed in ``report.unmatched_skip``.
    act_quant : ``"dynamic"`` (per token) or ``"static"`` (per tensor; needs ``input_scales``).
    progress : show a tqdm progress bar.
    input_scales : for ``"static"``: layer name -> calibrated activation scale.
    backend : passed to every new layer (None: the fastest available).

    Returns
    -------
    QuantizationReport with the replaced names, the skipped ones and why (``skip``,
    a parent that reads the weight directly such as ``nn.MultiheadAttention.out_proj``,
    transformers ``Conv1D``, meta or non-float weights), and each replaced layer's
    weight-quantization SQNR in dB. A UserWarning when nothing was replaced. A
    transformers model's ``save_pretrained`` then writes the int8 checkpoint.

    Raises
    ------
    ValueError naming the layer (a bad static scale, ...) before any layer is swapped.
    """
    from tqdm.auto import tqdm

    patterns = skip_patterns(skip)
    report = QuantizationReport()
    report.unmatched_skip = [p for p in patterns if not any(_match(n, p) for n, _ in model.named_modules() if n)]
    modules = dict(model.named_modules())
    candidates = []
    for name, module in modules.items():
        if _is_conv1d(module):
            report.skipped[name] = (
                "transformers Conv1D (a transposed Linear, GPT-2 family) is not quantized: "
                "compressed-tensors checkpoints target nn.Linear"
            )
            continue
        if not isinstance(module, nn.Linear):
            continue
        reader = _direct_reader(name, module, modules)
        if _matches(name, patterns):
            report.skipped[name] = "matches skip"
        elif reader is not None:
            report.skipped[name] = reader
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
    # Every new layer is built (and every per-layer error raised, naming the layer) before any swap.
    new = {}
    for name in tqdm(candidates, desc="w8a8: quantizing", disable=not progress, unit="layer"):
        linear = model.get_submodule(name)
        scale = (input_scales or {}).get(name) if act_quant == "static" else None
        try:
            layer = W8A8Linear.from_linear(linear, act_quant=act_quant, input_scale=scale, backend=backend)
        except (ValueError, TypeError, RuntimeError) as exc:
            raise type(exc)(f"quantize_model: layer {name!r}: {exc}") from None
        new[name] = layer
        report.sqnr_db[name] = weight_sqnr_db(linear.weight, layer)
    for name, layer in new.items():
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, layer)
        report.replaced.append(name)
    if not report.replaced:
        warnings.warn(
            f"quantize_model: replaced no layer ({len(report.skipped)} skipped"
            + (f": {dict(list(report.skipped.items())[:3])}" if report.skipped else ", the model holds no nn.Linear")
            + ")",
            UserWarning,
            stacklevel=2,
        )
    else:
        from w8a8.checkpoint.save import install_save_pretrained

        install_save_pretrained(model)
    return report
