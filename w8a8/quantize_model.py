"""quantize_model: swap the eligible nn.Linear layers of a model for W8A8Linear, in place."""
from __future__ import annotations

import dataclasses
import fnmatch
import math
import re
import warnings
from typing import Any, Callable

import torch
from torch import nn

from w8a8.config import DEFAULTS, FIELDS, W8A8Config
from w8a8.linear import W8A8Linear

__all__ = ["QuantizationReport", "quantize_model"]


@dataclasses.dataclass
class QuantizationReport:
    """What ``quantize_model`` did: replaced layers, skipped ones with the reason, and weight SQNR."""

    replaced: list[str] = dataclasses.field(default_factory=list)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    sqnr_db: dict[str, float] = dataclasses.field(default_factory=dict)
    unmatched_skip: list[str] = dataclasses.field(default_factory=list)  # skip patterns that matched no Linear
    unmatched_include: list[str] = dataclasses.field(default_factory=list)  # include patterns that matched no Linear
    fusion: Any = None  # w8a8.fusion.FusionReport; None: not fused, or fused at the model's first forward

    def summary(self) -> str:
        lines = [f"replaced {len(self.replaced)} Linear layers, skipped {len(self.skipped)}"]
        if self.sqnr_db:
            vals = list(self.sqnr_db.values())
            lines.append(f"weight SQNR: min {min(vals):.1f} dB, mean {sum(vals) / len(vals):.1f} dB")
        lines += [f"  skipped {name}: {why}" for name, why in self.skipped.items()]
        if self.unmatched_skip:
            lines.append(f"  skip patterns that matched no layer: {self.unmatched_skip}")
        if self.unmatched_include:
            lines.append(f"  include patterns that matched no layer: {self.unmatched_include}")
        return "\n".join(lines)


def _match(name: str, p: str, module: nn.Module | None = None) -> bool:
    """compressed-tensors' rules for ``ignore`` / ``targets`` (``re:<regex>`` matched at the start of the
    name, the exact name, the class name of the module or one of its bases; ``format.matches``), and
    ours: the name's last components (``"lm_head"`` matches ``model.lm_head``) and globs (``"*.mlp.*"``).
    Without ``module`` a class name matches nothing."""
    from w8a8.checkpoint.format import matches

    if p.startswith("re:"):
        return re.match(p[3:], name) is not None
    if module is not None and matches(name, module, (p,)):
        return True
    return name == p or name.endswith("." + p) or fnmatch.fnmatchcase(name, p)


def skip_patterns(skip, fn: str = "quantize_model", what: str = "skip") -> tuple[str, ...]:
    """``skip`` as a tuple of patterns: one string is one pattern (never its characters)."""
    if skip is None:
        return ()
    if isinstance(skip, str):
        return (skip,)
    try:
        patterns = tuple(skip)
    except TypeError:
        raise TypeError(f"{fn}: {what} must be a string or a list of strings, got {skip!r}") from None
    if not all(isinstance(p, str) for p in patterns):
        raise TypeError(f"{fn}: {what} must be a string or a list of strings, got {skip!r}")
    from w8a8.checkpoint.format import bad_regexes

    bad = bad_regexes(patterns, what)
    if bad:
        raise ValueError(f"{fn}: {bad}")
    return patterns


def _matches(name: str, patterns, module: nn.Module | None = None) -> bool:
    """A layer matches one of the patterns (``_match``; class names only when ``module`` is given)."""
    return any(_match(name, p, module) for p in skip_patterns(patterns))


def _unmatched(model: nn.Module, patterns, what: str, fn: str, warn: bool) -> list[str]:
    """The patterns that match no Linear of ``model``, each said in a UserWarning when ``warn``
    (a pattern matching nothing quantizes, or keeps, something the caller did not mean to)."""
    linears = [(n, m) for n, m in model.named_modules() if n and (isinstance(m, nn.Linear) or _is_conv1d(m))]
    unmatched = [p for p in patterns if not any(_match(n, p, m) for n, m in linears)]
    for p in unmatched if warn else ():
        others = [n for n, m in model.named_modules() if n and _match(n, p, m)]
        last = re.escape(others[0].rpartition(".")[2]) if others else ""
        hint = (f"; it matches {others[:3]} (not Linears): like compressed-tensors, a class name is matched "
                f"against each Linear's own class; name the Linears, e.g. 're:.*\\.{last}\\..*'") if others else ""
        warnings.warn(f"{fn}: {what} pattern {p!r} matches no Linear of {type(model).__name__}{hint}",
                      UserWarning, stacklevel=4)
    return unmatched


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
    """10 log10(|W|^2 / |W - dequant(Q(W))|^2), in fp32 on the weight's device.

    Formed in chunks of ~256 K elements (1 MB) in one reused buffer: a whole-tensor
    temporary costs more in fresh pages than the arithmetic on the CPU, and fp32 norms of
    small chunks stay accurate (one norm over 16 M elements drifts by ~0.1%). The chunks'
    sums are added in float64.
    """
    w = weight.detach()
    q, scale = layer.weight.to(w.device), layer.weight_scale.reshape(-1, 1).to(w.device)
    if w.dim() != 2 or w.numel() == 0:
        return math.inf
    n, k = w.shape
    rows = max(1, (1 << 18) // k)
    buf = torch.empty(min(rows, n), k, dtype=torch.float32, device=w.device)
    err, sig = [], []
    for i in range(0, n, rows):
        wc = w[i : i + rows]
        b = buf[: wc.shape[0]]
        b.copy_(q[i : i + rows])
        torch.addcmul(wc, b, scale[i : i + rows], value=-1, out=b)  # W - q * scale, fp32
        err.append(torch.linalg.vector_norm(b))
        sig.append(torch.linalg.vector_norm(wc, dtype=torch.float32))
    err_sum = torch.stack(err).double().square().sum().item()  # one host sync per layer
    sig_sum = torch.stack(sig).double().square().sum().item()
    if err_sum == 0.0:
        return math.inf
    return 10.0 * math.log10(sig_sum / err_sum) if sig_sum > 0 else -math.inf


_UNSET: Any = object()


def resolve_config(config, fn: str = "quantize_model", **keywords) -> W8A8Config:
    """One W8A8Config from ``config`` (a W8A8Config, None, or a legacy positional ``skip``)
    and the keyword arguments given (``_UNSET`` where not given).

    A keyword fills a field the config leaves at its default; a keyword that differs from
    a field the config sets is an error naming both values.
    """
    given = {k: v for k, v in keywords.items() if v is not _UNSET}
    unknown = sorted(set(given) - set(FIELDS))
    if unknown:
        raise TypeError(f"{fn}: unknown keyword arguments {unknown} (W8A8Config fields: {list(FIELDS)})")
    if config is None:
        return W8A8Config(**given)
    if not isinstance(config, W8A8Config):
        if isinstance(config, (str, list, tuple)):  # today's positional skip: quantize_model(model, ["lm_head"])
            if "skip" in given:
                raise TypeError(f"{fn}: skip given both positionally and as a keyword")
            return W8A8Config(skip=config, **given)
        raise TypeError(f"{fn}: config must be a w8a8.W8A8Config, got {type(config).__name__}")
    conflicts = []
    for name, value in given.items():
        ours = getattr(config, name)
        probe = W8A8Config(**{name: value}) if name in ("skip", "include") else None
        value_n = getattr(probe, name) if probe is not None else value  # skip="x" and ("x",) agree
        if _same(ours, value_n):
            continue
        if _same(ours, DEFAULTS[name]):
            continue  # the config leaves it at its default: the keyword fills it
        conflicts.append(f"{name}: config has {_short(ours)}, keyword has {_short(value)}")
    if conflicts:
        raise ValueError(f"{fn}: the config and the keyword arguments disagree ({'; '.join(conflicts)}); set each field once")
    return config.replace(**given) if given else config


def _same(a, b) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # tensors and other objects without a plain ==
        return False


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def select_layers(model: nn.Module, config: W8A8Config, report: QuantizationReport, allow_meta: bool = False) -> list[str]:
    """The names of the Linears ``config`` quantizes; every other Linear (and every
    transformers Conv1D) goes into ``report.skipped`` with the reason.

    ``allow_meta``: meta weights are candidates (``from_pretrained`` fills them layer by layer).
    """
    patterns = config.skip
    fn = "quantize_model"
    report.unmatched_skip = _unmatched(model, patterns, "skip", fn, warn=patterns != DEFAULTS["skip"])
    report.unmatched_include = _unmatched(model, config.include or (), "include", fn, warn=True)
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
        if _matches(name, patterns, module):
            report.skipped[name] = "matches skip"
        elif config.include is not None and not _matches(name, config.include, module):
            report.skipped[name] = "matches no include pattern"
        elif reader is not None:
            report.skipped[name] = reader
        elif not module.weight.dtype.is_floating_point:
            report.skipped[name] = f"weight dtype {module.weight.dtype} is not floating point"
        elif module.weight.is_meta and not allow_meta:
            report.skipped[name] = "weight is on the meta device (load it first)"
        elif config.filter_fn is not None and not config.filter_fn(module, name):
            report.skipped[name] = "filter_fn returned False"
        else:
            candidates.append(name)
    return candidates


def check_static_scales(candidates, input_scales, fn: str = "quantize_model") -> None:
    missing = [n for n in candidates if n not in (input_scales or {})]
    if missing:
        raise ValueError(
            f"{fn}: act_quant='static' needs input_scales for every layer; missing {missing[:5]}"
            + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        )


def quantize_layer(name: str, linear: nn.Linear, config: W8A8Config, input_scales, report: QuantizationReport,
                   fn: str = "quantize_model") -> W8A8Linear:
    """``linear`` quantized as ``config`` says (its SQNR into ``report`` when ``config.report``)."""
    scale = (input_scales or {}).get(name) if config.act_quant == "static" else None
    try:
        layer = W8A8Linear.from_linear(linear, act_quant=config.act_quant, input_scale=scale, backend=config.backend)
    except (ValueError, TypeError, RuntimeError) as exc:
        raise type(exc)(f"{fn}: layer {name!r}: {exc}") from None
    if config.report:
        report.sqnr_db[name] = weight_sqnr_db(linear.weight, layer)
    return layer


def warn_if_empty(report: QuantizationReport, fn: str = "quantize_model", stacklevel: int = 3) -> None:
    if not report.replaced:
        warnings.warn(
            f"{fn}: replaced no layer ({len(report.skipped)} skipped"
            + (f": {dict(list(report.skipped.items())[:3])}" if report.skipped else ", the model holds no nn.Linear")
            + ")",
            UserWarning,
            stacklevel=stacklevel,
        )


def quantize_model(
    model: nn.Module,
    config: W8A8Config | None = None,
    *,
    progress: bool = True,
    skip=_UNSET,
    act_quant: str = _UNSET,
    input_scales: dict[str, float] | None = _UNSET,
    backend: str | None = _UNSET,
    include=_UNSET,
    filter_fn: Callable[[nn.Module, str], bool] | None = _UNSET,
    calibration=_UNSET,
    smoothquant_alpha: float | None = _UNSET,
    smoothquant_mappings: dict[str, list[str]] | None = _UNSET,
    report: bool = _UNSET,
    fuse: bool = _UNSET,
    merge: bool = _UNSET,
) -> QuantizationReport:
    """Replace every eligible ``nn.Linear`` in ``model`` by a ``W8A8Linear``, in place.

    Parameters
    ----------
    model : the float model; its Linears must hold real (not meta) weights.
    config : a ``w8a8.W8A8Config`` (None: the defaults). Every field can also be given
        as a keyword (``skip=``, ``act_quant=``, ``include=``, ``filter_fn=``,
        ``calibration=``, ``smoothquant_alpha=``, ``smoothquant_mappings=``,
        ``input_scales=``, ``backend=``, ``report=``, ``fuse=``, ``merge=``; see
        ``W8A8Config`` for each);
        a keyword fills a field the config leaves at its default, and one that
        disagrees with a field the config sets is a ValueError. (A string or list
        here is today's positional ``skip``.)
    progress : tqdm bars (calibration, SmoothQuant, quantization).

    With ``calibration``: SmoothQuant first when ``smoothquant_alpha`` is set
    (``w8a8.calibrate.smooth``, the model's norms and Linears rescaled in place), then for
    ``act_quant="static"`` the input scales (``w8a8.calibrate.calibrate``) unless ``input_scales``
    are given.

    Returns
    -------
    QuantizationReport with the replaced names, the skipped ones and why (``skip``,
    ``include``, ``filter_fn``, a parent that reads the weight directly such as
    ``nn.MultiheadAttention.out_proj``, transformers ``Conv1D``, meta or non-float
    weights), and (``report=True``) each replaced layer's weight-quantization SQNR in
    dB. A UserWarning when nothing was replaced. A transformers model's
    ``save_pretrained`` then writes the int8 checkpoint.

    Raises
    ------
    ValueError naming the layer (a bad static scale, ...) before any layer is swapped;
    ValueError / TypeError for a bad config or one that disagrees with the keywords.
    """
    from tqdm.auto import tqdm

    config = resolve_config(
        config, skip=skip, act_quant=act_quant, input_scales=input_scales, backend=backend, include=include,
        filter_fn=filter_fn, calibration=calibration, smoothquant_alpha=smoothquant_alpha,
        smoothquant_mappings=smoothquant_mappings, report=report, fuse=fuse, merge=merge,
    )
    result = QuantizationReport()
    candidates = select_layers(model, config, result)
    scales = config.input_scales
    if config.calibration is not None:
        from w8a8.calibrate import calibrate, llama_mappings, smooth

        if config.smoothquant_alpha is not None:
            mappings = config.smoothquant_mappings if config.smoothquant_mappings is not None else llama_mappings(model)
            if not mappings:
                raise ValueError(
                    f"quantize_model: SmoothQuant found no norm -> Linear mappings in {type(model).__name__} "
                    "(llama_mappings knows Llama-style decoders); pass smoothquant_mappings={norm: [linears]}"
                )
            smooth(model, config.calibration, mappings, alpha=config.smoothquant_alpha, progress=progress)
        if config.act_quant == "static" and scales is None:
            scales = calibrate(model, config.calibration, skip=config.skip, progress=progress)
    if config.act_quant == "static":
        check_static_scales(candidates, scales)
    # Every new layer is built (and every per-layer error raised, naming the layer) before any swap.
    new = {}
    for name in tqdm(candidates, desc="w8a8: quantizing", disable=not progress, unit="layer"):
        new[name] = quantize_layer(name, model.get_submodule(name), config, scales, result)
    for name, layer in new.items():
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, layer)
        result.replaced.append(name)
    warn_if_empty(result)
    if result.replaced:
        from w8a8.checkpoint.save import install_save_pretrained

        install_save_pretrained(model)
        if config.fuse:
            result.fusion = apply_fusion(model, merge=config.merge)
    return result


def apply_fusion(model: nn.Module, merge: bool = True):
    """``w8a8.fusion.fuse_model`` on a quantized model, and the torch.compile graph pass installed.

    Recorded from a probe forward (8 token ids) for a transformers model on a GPU; any
    other model, or one on the CPU (where a probe of a large model would take minutes), is
    recorded at its first eager forward. Returns the FusionReport, or None when armed."""
    from w8a8.fusion import inductor, plan

    inductor.install()
    probe = plan.probe_inputs(model)
    if probe is None or probe["input_ids"].device.type == "cpu":
        return plan.fuse_model(model, merge=merge)
    return plan.fuse_model(model, merge=merge, **probe)
