"""Calibration: static activation scales (``calibrate``) and SmoothQuant (``smooth``).

``calibrate`` records each Linear's per-tensor input abs-max. ``smooth``
(SmoothQuant, Xiao et al. 2023) moves activation outliers into the weights
before quantization: for a norm feeding Linears, per input channel ``j``::

    s[j] = amax|X[:, j]| ** alpha / amax|W[:, j]| ** (1 - alpha)
    norm.weight /= s,  W[:, j] *= s[j]          (the float model computes the same function)
"""
from __future__ import annotations

from collections.abc import Mapping

import dataclasses

import torch
from torch import nn

from w8a8 import reference

__all__ = ["calibrate", "llama_mappings", "smooth"]

from w8a8.quantize_model import _matches


def _record(model: nn.Module, names, batches, reduce, progress: bool, desc: str) -> dict[str, torch.Tensor]:
    """Run ``batches`` with forward pre-hooks on the modules ``names``: name -> running max of ``reduce(input)``."""
    from tqdm.auto import tqdm

    seen: dict[str, torch.Tensor] = {}

    def hook(name):
        def record(module, args):
            a = reduce(args[0].detach()).float()
            seen[name] = a if name not in seen else torch.maximum(seen[name], a)

        return record

    handles = [model.get_submodule(n).register_forward_pre_hook(hook(n)) for n in names]
    try:
        for batch in tqdm(batches, desc=desc, unit="batch", disable=not progress):
            _run(model, batch)
    finally:
        for h in handles:
            h.remove()
    return seen


def _run(model: nn.Module, batch) -> None:
    if isinstance(batch, Mapping):  # a dict, or a tokenizer's BatchEncoding (a UserDict)
        model(**batch)
    elif isinstance(batch, (tuple, list)):
        model(*batch)
    else:
        model(batch)


@torch.no_grad()
def calibrate(model: nn.Module, batches, skip=("lm_head",), progress: bool = True) -> dict[str, float]:
    """Run ``batches`` through ``model`` and return each Linear's static input scale.

    Parameters
    ----------
    model : a float model; it is run, not changed (forward pre-hooks are removed after).
    batches : an iterable of model inputs: a Tensor, a tuple (positional) or a dict (keyword).
    skip : layer names or globs not to calibrate (as in ``quantize_model``).
    progress : a tqdm bar over the batches.

    Returns
    -------
    Layer name -> ``amax(|x|) / 127`` over every token of every batch (fp32
    arithmetic, the ``input_scale`` of ``W8A8Linear`` with ``act_quant="static"``);
    pass it as ``quantize_model(model, act_quant="static", input_scales=...)``.

    Raises
    ------
    ValueError naming the layer when its inputs held Inf/NaN, or only zeros.
    Layers the batches never reached are absent (``quantize_model`` then names them).
    """
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and not _matches(n, skip)]
    amax = _record(model, names, batches, lambda x: x.abs().amax(), progress, "w8a8: calibrating")
    scales = {}
    for name, a in amax.items():
        if not torch.isfinite(a) or a.item() == 0.0:
            raise ValueError(f"w8a8.calibrate.calibrate: layer {name!r} saw input abs-max {a.item()}; needs a finite value > 0")
        scales[name] = (a / torch.tensor(127.0)).item()
    return scales


def llama_mappings(model: nn.Module) -> dict[str, list[str]]:
    """SmoothQuant mappings of Llama-style decoders: each norm -> the Linears it feeds.

    ``*.input_layernorm -> self_attn.{q,k,v}_proj`` and
    ``*.post_attention_layernorm -> mlp.{gate,up}_proj``.
    """
    feeds = {"input_layernorm": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
             "post_attention_layernorm": ("mlp.gate_proj", "mlp.up_proj")}
    names = dict(model.named_modules())
    out = {}
    for name in names:
        parent, _, leaf = name.rpartition(".")
        if leaf in feeds:
            targets = [f"{parent}.{t}" if parent else t for t in feeds[leaf]]
            if all(t in names for t in targets):
                out[name] = targets
    return out


@dataclasses.dataclass
class SmoothReport:
    """What ``smooth`` did: the factors per norm, and per Linear the relative L2 error of
    a static W8A8 simulation (per-tensor activation scale, per-channel weights; the exact
    reference quantizers) on the first calibration batch, before and after smoothing."""

    factors: dict[str, torch.Tensor]
    error_before: dict[str, float]
    error_after: dict[str, float]

    def summary(self) -> str:
        lines = ["SmoothQuant: static W8A8 relative error on the first calibration batch (before -> after)"]
        lines += [f"  {n}: {self.error_before[n]:.4f} -> {self.error_after[n]:.4f}" for n in self.error_before]
        return "\n".join(lines)


def _static_w8a8_error(x: torch.Tensor, w: torch.Tensor) -> float:
    """||Q(x) Q(W)^T - x W^T|| / ||x W^T|| with the reference per-tensor / per-channel quantizers."""
    x, w = x.float(), w.float()
    ref = x @ w.t()
    x_scale = (x.abs().amax() / reference.SYMMETRIC_QMAX).reshape(1)
    xq = reference.quantize_static(x, x_scale).float() * x_scale
    wq, w_scale = reference.quantize_weight_per_channel(w)
    out = xq @ (wq.float() * w_scale[:, None]).t()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


@torch.no_grad()
def smooth(
    model: nn.Module,
    batches,
    mappings: dict[str, list[str]],
    alpha: float = 0.5,
    progress: bool = True,
) -> dict[str, torch.Tensor]:
    """SmoothQuant: rescale each norm and the Linears it feeds, in place, before quantization.

    Parameters
    ----------
    model : a float model.
    batches : calibration inputs (as for ``calibrate``).
    mappings : norm name -> names of the Linears it feeds (``llama_mappings(model)``
        for Llama-style models). The norm's output must be ``x * norm.weight``
        (+ ``norm.bias``), e.g. LayerNorm or RMSNorm.
    alpha : migration strength in [0, 1]; 0.5 is the paper's default.
    progress : a tqdm bar over the batches.

    Returns
    -------
    SmoothReport: ``factors`` (norm name -> smoothing factors ``s``, float32 [K])
    and each Linear's static W8A8 error before and after (``summary()`` prints
    them). Calibrate the input scales after smoothing (``calibrate``), then
    ``quantize_model``.

    Raises
    ------
    ValueError naming the layer, before anything changes, when its inputs held Inf/NaN
    (as ``calibrate``) or its weight is not finite.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"w8a8.calibrate.smooth: alpha must be in [0, 1], got {alpha}")
    batches = list(batches)  # read twice: the statistics, then the first batch for the report
    linears = [n for targets in mappings.values() for n in targets]
    for n in linears:
        if not isinstance(model.get_submodule(n), nn.Linear):
            raise ValueError(f"w8a8.calibrate.smooth: {n!r} is a {type(model.get_submodule(n)).__name__}, expected nn.Linear")
    act = _record(model, linears, batches, lambda x: x.reshape(-1, x.shape[-1]).abs().amax(0), progress, "w8a8: smoothing")
    first = _first_inputs(model, linears, batches)
    before = {t: _static_w8a8_error(first[t], model.get_submodule(t).weight) for t in linears if t in first}
    missing = [t for t in linears if t not in act]
    if missing:  # checked before any norm is rescaled
        raise ValueError(f"w8a8.calibrate.smooth: the batches never reached {missing}")
    for t in linears:
        # as calibrate: an Inf/NaN token would give all-ones factors and a NaN report
        if not torch.isfinite(act[t]).all():
            bad = int((~torch.isfinite(act[t])).sum())
            raise ValueError(
                f"w8a8.calibrate.smooth: layer {t!r} saw non-finite inputs (Inf/NaN in {bad} of {act[t].numel()} "
                f"input channels' abs-max); needs finite calibration data"
            )
        if not torch.isfinite(model.get_submodule(t).weight).all():
            raise ValueError(f"w8a8.calibrate.smooth: layer {t!r} has a non-finite weight")
    factors = {}
    for norm_name, targets in mappings.items():
        norm = model.get_submodule(norm_name)
        a = torch.stack([act[t] for t in targets]).amax(0)
        w = torch.stack([model.get_submodule(t).weight.abs().amax(0).float() for t in targets]).amax(0)
        s = (a.pow(alpha) / w.pow(1 - alpha)).clamp(min=1e-5)
        s = torch.where(torch.isfinite(s) & (a > 0) & (w > 0), s, torch.ones_like(s))
        norm.weight.div_(s.to(norm.weight.dtype))
        if getattr(norm, "bias", None) is not None:
            norm.bias.div_(s.to(norm.bias.dtype))
        for t in targets:
            lin = model.get_submodule(t)
            lin.weight.mul_(s.to(lin.weight.dtype))
        factors[norm_name] = s
    # The smoothed Linear sees x / s: its first-batch input after smoothing.
    scale_of = {t: factors[n] for n, targets in mappings.items() for t in targets}
    after = {t: _static_w8a8_error(first[t] / scale_of[t], model.get_submodule(t).weight) for t in before}
    report = SmoothReport(factors, before, after)
    if progress:
        print(report.summary())
    return report


def _first_inputs(model: nn.Module, names, batches) -> dict[str, torch.Tensor]:
    """Each named module's input on the first batch, as [tokens, K] (empty if there is no batch)."""
    if not batches:
        return {}
    seen: dict[str, torch.Tensor] = {}

    def hook(name):
        def record(module, args):
            seen.setdefault(name, args[0].detach().reshape(-1, args[0].shape[-1]).clone())

        return record

    handles = [model.get_submodule(n).register_forward_pre_hook(hook(n)) for n in names]
    try:
        _run(model, batches[0])
    finally:
        for h in handles:
            h.remove()
    return seen
