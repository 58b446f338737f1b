"""The compressed-tensors ``int-quantized`` format: parse and write ``quantization_config``.

A checkpoint's ``config.json`` holds (older files say ``compression_config``)::

    quantization_config:
      quant_method: compressed-tensors
      format: int-quantized            (also inside each group)
      quantization_status: compressed
      ignore: [lm_head, ...]           (names, "re:<regex>" or class names)
      config_groups:
        group_0:
          targets: [Linear]             (same matching rules as ignore)
          weights:           {num_bits: 8, type: int, symmetric: true, strategy: channel|tensor, dynamic: false}
          input_activations: {num_bits: 8, type: int, symmetric: ..., strategy: token|tensor, dynamic: ...}

Per quantized Linear ``P`` the tensors are ``P.weight`` int8 [N, K],
``P.weight_scale`` [N, 1] (channel) or [1] (tensor) in a float dtype,
``P.input_scale`` [1] (static), ``P.input_zero_point`` int8 [1] (static
asymmetric) and ``P.bias`` unchanged. ``dequant(W) = weight * weight_scale``.
"""
from __future__ import annotations

import dataclasses
import re

from torch import nn

from w8a8.checkpoint.safetensors_io import CheckpointError

QUANT_METHOD = "compressed-tensors"
INT_FORMATS = ("int-quantized", "naive-quantized")
SUPPORTED = (
    "weights int8 symmetric, strategy 'channel' or 'tensor', static; input_activations int8, "
    "either dynamic symmetric per 'token' or static per 'tensor' (symmetric or asymmetric)"
)


@dataclasses.dataclass(frozen=True)
class LayerScheme:
    """What one quantized Linear holds, in the terms of ``W8A8Linear``.

    weight_strategy : ``"channel"`` (scale [N, 1] on disk) or ``"tensor"`` ([1]).
    act_quant : ``"dynamic"`` (per token) or ``"static"`` (per tensor).
    input_zero_point : static asymmetric activations (an int8 [1] zero point on disk).
    """

    weight_strategy: str
    act_quant: str
    input_zero_point: bool


@dataclasses.dataclass
class Group:
    name: str
    targets: list[str]
    raw: dict  # the group as written, for error messages
    scheme: LayerScheme | None  # None: unsupported; ``why`` says what
    why: str = ""


@dataclasses.dataclass
class CheckpointConfig:
    groups: list[Group]
    ignore: list[str]
    where: str = "config.json"

    def scheme_for(self, name: str, module: nn.Module) -> LayerScheme | None:
        """The scheme of the Linear ``name``, None when no group targets it (or it is ignored).

        Raises CheckpointError naming the layer, its scheme and what is supported when
        the first group that targets it holds a scheme ``W8A8Linear`` cannot run.
        """
        if not isinstance(module, nn.Linear) or matches(name, module, self.ignore):
            return None
        for group in self.groups:
            if matches(name, module, group.targets):
                if group.scheme is None:
                    raise CheckpointError(
                        f"w8a8.load_quantized: {self.where}: layer {name!r} ({group.name}) has an unsupported scheme: "
                        f"{group.why}; scheme {group.raw}; supported: {SUPPORTED}"
                    )
                return group.scheme
        return None


def matches(name: str, module: nn.Module, patterns) -> bool:
    """compressed-tensors matching: ``re:<regex>`` (re.match on the name), the exact name, or a class name."""
    for p in patterns or ():
        if p.startswith("re:"):
            if re.match(p[3:], name):
                return True
        elif p == name or any(cls.__name__ == p for cls in type(module).__mro__):
            return True
    return False


def _scheme(group: dict) -> tuple[LayerScheme | None, str]:
    """Map a config group to a LayerScheme, or (None, reason)."""
    fmt = group.get("format")
    if fmt is not None and fmt not in INT_FORMATS:
        return None, f"format {fmt!r} (supported: {INT_FORMATS})"
    w, a = group.get("weights"), group.get("input_activations")
    if group.get("output_activations") is not None:
        return None, "output_activations are quantized (W8A8Linear returns float outputs)"
    if w is None:
        return None, "no weight quantization"
    if (w.get("num_bits"), w.get("type", "int")) != (8, "int"):
        return None, f"weights num_bits={w.get('num_bits')} type={w.get('type')!r} (need 8-bit int)"
    if not w.get("symmetric", True):
        return None, "asymmetric weights"
    if w.get("strategy") not in ("channel", "tensor"):
        return None, f"weight strategy {w.get('strategy')!r}"
    if w.get("dynamic", False):
        return None, "dynamic weights"
    for field in ("group_size", "block_structure", "actorder"):
        if w.get(field) is not None:
            return None, f"weights {field}={w[field]!r} (per-channel or per-tensor weights have none)"
    if a is None:
        return None, "weight-only quantization (no input_activations)"
    if (a.get("num_bits"), a.get("type", "int")) != (8, "int"):
        return None, f"input_activations num_bits={a.get('num_bits')} type={a.get('type')!r} (need 8-bit int)"
    dynamic, strategy, symmetric = a.get("dynamic", False), a.get("strategy"), a.get("symmetric", True)
    if dynamic is True and strategy == "token" and symmetric:
        return LayerScheme(w["strategy"], "dynamic", False), ""
    if dynamic is False and strategy == "tensor":
        return LayerScheme(w["strategy"], "static", not symmetric), ""
    return None, f"input_activations dynamic={dynamic!r} strategy={strategy!r} symmetric={symmetric!r}"


def bad_regexes(patterns, what: str) -> str | None:
    """``"<what> holds a bad regex '<p>' (<why>)"`` for the first ``re:`` pattern that does not compile, else None."""
    for p in patterns:
        if p.startswith("re:"):
            try:
                re.compile(p[3:])
            except (re.error, RecursionError, OverflowError) as exc:
                return f"{what} holds a bad regex {p!r} ({exc})"
    return None


def _patterns(value, what: str, where: str) -> list[str]:
    """A list of target / ignore patterns, each ``re:`` one compiled once to check it."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise CheckpointError(f"w8a8.load_quantized: {where}: {what} must be a list of strings, got {value!r}")
    bad = bad_regexes(value, what)
    if bad:
        raise CheckpointError(f"w8a8.load_quantized: {where}: {bad}")
    return value


def parse_config(config: dict, where: str = "config.json") -> CheckpointConfig:
    """Read ``quantization_config`` (or the older ``compression_config``) from a config dict.

    Raises CheckpointError naming ``where`` when it is absent, malformed, not a
    compressed-tensors int config, or asks for something W8A8Linear would drop
    (a quantized KV cache, sparsity, transforms). Unsupported layer schemes are
    kept and reported when a layer uses them.
    """
    fn = "w8a8.load_quantized"
    if not isinstance(config, dict):
        raise CheckpointError(f"{fn}: {where} must hold a JSON object, got {type(config).__name__}")
    qc = config.get("quantization_config") or config.get("compression_config")
    if qc is None:
        raise CheckpointError(f"{fn}: {where} has no quantization_config (nor compression_config): not a quantized checkpoint")
    if not isinstance(qc, dict):
        raise CheckpointError(f"{fn}: {where}: quantization_config must be an object, got {type(qc).__name__}")
    if "quantization_config" in qc and "config_groups" not in qc:  # old layout: nested one level down
        if qc.get("sparsity_config"):
            raise CheckpointError(f"{fn}: {where}: sparsity_config {qc['sparsity_config']!r} is not supported")
        qc = qc["quantization_config"]
        if not isinstance(qc, dict):
            raise CheckpointError(f"{fn}: {where}: quantization_config must be an object, got {type(qc).__name__}")
    method = qc.get("quant_method", QUANT_METHOD)
    if method != QUANT_METHOD:
        raise CheckpointError(f"{fn}: {where}: quant_method is {method!r}, expected {QUANT_METHOD!r}")
    for field in ("kv_cache_scheme", "sparsity_config", "transform_config"):
        if qc.get(field):  # None or {} when unused
            raise CheckpointError(f"{fn}: {where}: {field} {qc[field]!r} is not supported (W8A8Linear would drop it)")
    top_format = qc.get("format")
    groups = []
    config_groups = qc.get("config_groups") or {}
    if not isinstance(config_groups, dict):
        raise CheckpointError(f"{fn}: {where}: config_groups must be an object, got {type(config_groups).__name__}")
    for gname, g in config_groups.items():
        if not isinstance(g, dict):
            raise CheckpointError(f"{fn}: {where}: config group {gname!r} is a preset {g!r}; expected a scheme")
        for field in ("weights", "input_activations", "output_activations"):
            if g.get(field) is not None and not isinstance(g[field], dict):
                raise CheckpointError(f"{fn}: {where}: config group {gname!r} {field} must be an object, got {g[field]!r}")
        g = dict(g)
        g.setdefault("format", top_format)
        scheme, why = _scheme(g)
        targets = _patterns(g.get("targets"), f"config group {gname!r} targets", where)
        groups.append(Group(gname, targets, g, scheme, why))
    if not groups:
        raise CheckpointError(f"{fn}: {where}: quantization_config has no config_groups")
    return CheckpointConfig(groups, _patterns(qc.get("ignore"), "ignore", where), where)


def _args(act_quant: str | None, symmetric: bool = True, weights: bool = False) -> dict:
    if weights:
        strategy, dynamic = "channel", False
    else:
        strategy, dynamic = ("token", True) if act_quant == "dynamic" else ("tensor", False)
    return {
        "num_bits": 8,
        "type": "int",
        "symmetric": symmetric,
        "strategy": strategy,
        "dynamic": dynamic,
        "group_size": None,
    }


def build_config(groups: dict[LayerScheme, list[str]], ignore: list[str]) -> dict:
    """The ``quantization_config`` entry for layers grouped by scheme.

    One scheme: targets ``["Linear"]`` with the float Linears in ``ignore`` (the
    usual form); several: each group targets its layers by exact name.
    """
    config_groups = {}
    for i, (scheme, names) in enumerate(groups.items()):
        config_groups[f"group_{i}"] = {
            "targets": ["Linear"] if len(groups) == 1 else sorted(names),
            "weights": _args(None, weights=True),
            "input_activations": _args(scheme.act_quant, symmetric=not scheme.input_zero_point),
            "output_activations": None,
            "format": "int-quantized",
        }
    return {
        "quant_method": QUANT_METHOD,
        "format": "int-quantized",
        "quantization_status": "compressed",
        "config_groups": config_groups,
        "ignore": ignore if len(groups) == 1 else [],
        "kv_cache_scheme": None,
        "global_compression_ratio": None,
    }
