"""An Inductor graph pass: what the fused modules cannot do alone, done on the graph.

The fused modules (``w8a8.fusion.modules``) compile to the fused ops themselves: a
``QuantizingRMSNorm`` to ``w8a8.rms_norm_quant``, a ``QuantizingGatedMLP`` to the gate/up
linears, ``w8a8.silu_mul_quant`` and a ``w8a8.scaled_mm`` for ``down`` on its codes, and the
members of a merged ``SharedInput`` to ``w8a8.linear`` on row slices of the merged weights.
What crosses module boundaries, and so cannot be written inside one module's forward, is
joined here. ``install()`` adds the pass to ``torch._inductor.config.post_grad_custom_post_pass``;
every later ``torch.compile`` (Inductor) then gets, in this order:

1. **Merged siblings.** Dynamic ``w8a8.linear`` nodes that read one activation and whose
   weight, weight scale and bias are adjacent row slices (``aten.slice(base, 0, a, b)``, what
   ``narrow`` becomes) of the same base tensors become one ``w8a8.linear`` over the union
   slice; each member gets ``aten.slice(out, -1, ...)`` of its output. The int32 sums and
   the per-channel epilogue are the same, so the outputs are bit-identical. (The layers are
   called by the model's code, one module each: q/k/v from the attention, gate/up from the MLP.)
2. **The residual add into the norm.** ``rms_norm_quant(a + b, ...)``, with the add in the
   model's code before the norm module, becomes ``add_rms_norm_quant(a, b, ...)``; readers
   of the sum after the norm read its ``sum`` output.
3. **The norm's codes to its readers.** Dynamic linears reading (through views) the
   ``normed`` output of ``rms_norm_quant`` / ``add_rms_norm_quant`` become a
   ``w8a8.scaled_mm`` each on the op's codes (the readers are other modules than the norm).
4. **One quantization per activation.** Two or more dynamic linears left reading one
   activation (through views) share one ``w8a8.quantize_per_token``, each running its own
   ``w8a8.scaled_mm``. A linear alone keeps its ``w8a8.linear`` node.

Nothing is matched by its math: a graph without the fused modules' ops (a model that was
not fused) gets (1) where its layers are slices of one tensor and (4).

What each compiled graph got is added to ``torch._dynamo.utils.counters["w8a8"]`` (keys in
``COUNTER_KEYS``) and left in ``last_counts``; a graph served from Inductor's cache runs no
pass and counts nothing.

This file holds the pass (``fuse``), its switch and its installation; the rewrites, and the
graph helpers they share, are in ``inductor_rewrites.py``. The pass's uuid, Inductor's cache
key for the graphs it compiled, hashes both files (``_SOURCES``).

Opt-out: ``W8A8_INDUCTOR_FUSION=0`` in the environment makes ``install()`` do nothing and an
installed pass leave the graphs it is given unchanged (read at each compile).
"""
from __future__ import annotations

import hashlib
import os
from collections import Counter
from pathlib import Path

import torch.fx as fx

from w8a8.fusion import inductor_rewrites
from w8a8.fusion.inductor_rewrites import (
    count_module_producers,
    fold_residual_adds,
    merge_siblings,
    share_quantization,
    use_producer_codes,
)

ENV_VAR = "W8A8_INDUCTOR_FUSION"
COUNTER_KEYS = (
    "merged_groups",  # (1) GEMMs that replaced two or more sibling linears
    "merged_linears",  # (1) linears merged into those
    "rms_norm_quant",  # (3) norms whose codes GEMMs read (no residual add) ...
    "add_rms_norm_quant",  # (2, 3) ... and with the residual add before them fused in
    "silu_mul_quant",  # SiLU-and-mul products whose codes GEMMs read (the MLP module's own)
    "producer_linears",  # (3) GEMMs reading a fused producer's codes (down_proj's included)
    "shared_quantizers",  # (4) quantize_per_token nodes serving two or more linears
    "shared_linears",  # (4) linears served by them
)
last_counts: dict[str, int] = {}


# --- the pass ---------------------------------------------------------------------------------


def fuse(graph: fx.Graph) -> dict[str, int]:
    """Run (1) merge, (2) the residual adds, (3) the norms' codes, (4) shared quantization on
    ``graph`` in place; returns what was done (``COUNTER_KEYS``)."""
    global last_counts
    counts: Counter = Counter()
    traced_args = {n: (n.args, n.kwargs) for n in graph.nodes if n.op == "call_function"}
    merge_siblings(graph, counts)
    fold_residual_adds(graph, counts)
    use_producer_codes(graph, counts)
    share_quantization(graph, counts)
    count_module_producers(graph, counts)
    for node in graph.nodes:
        # Inductor gives a custom op's inputs the strides they had when traced (meta
        # "eager_input_vals"). A node whose inputs the rewrites changed (e.g. silu_mul_quant's
        # gate and up, now column slices of one merged GEMM) would get copies to those strides;
        # without the record its inputs pass as they are, which the ops take (unit stride along
        # the last dim, checked at the call).
        if traced_args.get(node, (node.args, node.kwargs)) != (node.args, node.kwargs):
            node.meta.pop("eager_input_vals", None)
    last_counts = {key: counts[key] for key in COUNTER_KEYS}
    from torch._dynamo.utils import counters

    for key, n in counts.items():
        counters["w8a8"][key] += n
    return last_counts


# Every file whose code the pass runs: a graph Inductor cached is reused only by the pass that
# made it. A module the pass's code moves to is added here.
_SOURCES = (__file__, inductor_rewrites.__file__)


def _source_hash() -> str:
    """sha256 of the _SOURCES' bytes, one after the other (as torch's ``get_hash_for_files``)."""
    digest = hashlib.sha256()
    for path in _SOURCES:
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()


_PASS_CLASS = None


def _pass_class():
    """The CustomGraphPass subclass, built on first use: ``import w8a8`` does not import
    torch._inductor (over a second)."""
    global _PASS_CLASS
    if _PASS_CLASS is None:
        from torch._inductor.custom_graph_pass import CustomGraphPass

        class FusionPass(CustomGraphPass):
            """The w8a8 post-grad pass, after ``before`` (a pass set earlier, on a torch whose
            config holds one pass, not a list). Its uuid is the hash of its source files (``_SOURCES``)."""

            def __init__(self, before=None) -> None:
                self.before = before

            def __call__(self, graph: fx.Graph) -> None:
                if self.before is not None:
                    self.before(graph)
                if enabled():
                    fuse(graph)

            def uuid(self) -> str | None:  # the switch is part of it: a graph cached with the pass off is not reused with it on
                ours = f"w8a8.fusion.inductor:{_source_hash()}:{int(enabled())}"
                if self.before is None:
                    return ours
                theirs = self.before.uuid() if isinstance(self.before, CustomGraphPass) else None
                return None if theirs is None else f"{ours}+{theirs}"  # None: Inductor does not cache

        FusionPass.__module__, FusionPass.__qualname__ = __name__, "FusionPass"
        _PASS_CLASS = FusionPass
    return _PASS_CLASS


def __getattr__(name: str):
    if name == "FusionPass":  # pickling by reference finds the class in any process
        return _pass_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def enabled() -> bool:
    """Whether the pass rewrites graphs: ``W8A8_INDUCTOR_FUSION`` is not ``0`` (read at each compile)."""
    return os.environ.get(ENV_VAR, "1").strip() != "0"


def install() -> bool:
    """Add the pass to ``torch._inductor.config.post_grad_custom_post_pass``, after any pass
    already set there (both run). Idempotent. Returns whether the pass is installed: False
    when ``W8A8_INDUCTOR_FUSION=0``.

    Post-grad *post* pass, not pre: it runs after Inductor's own post-grad passes (no-op
    removal, its pattern rewrites), so it walks a normalised graph and nothing rewrites the
    w8a8 nodes it inserts before lowering.
    """
    if not enabled():
        return False
    from torch._inductor import config, custom_graph_pass

    cls = _pass_class()
    current = config.post_grad_custom_post_pass
    if isinstance(current, cls) or isinstance(current, (list, tuple)) and any(isinstance(p, cls) for p in current):
        return True
    if current is None:
        config.post_grad_custom_post_pass = cls()
    elif hasattr(custom_graph_pass, "get_custom_graph_passes"):  # the config holds a list of passes
        config.post_grad_custom_post_pass = [*(current if isinstance(current, (list, tuple)) else [current]), cls()]
    else:
        config.post_grad_custom_post_pass = cls(before=current)
    return True
