"""Finding what to fuse, and ``fuse_model`` / ``unfuse_model``.

Found from the running model, without its code and without class or attribute names:

1. **Recording**: one forward is recorded. ``quantize_model`` records a short probe forward
   of a transformers model on a GPU (8 token ids); any other model records its first eager
   forward (or call ``fuse_model(model, *example_args)``). Hooks note the tensor object each
   ``W8A8Linear`` reads, the output of each norm-like module (no children, one 1-D float
   parameter) and the input of each module that owns three or more ``W8A8Linear`` layers,
   and whether each was called as ``module(tensor)``.
2. **Groups**: the dynamic ``W8A8Linear`` layers that read one tensor object, each called
   once as ``layer(x)`` in that forward, the tensor unchanged from where it was made to its
   last read (two fp64 sums compared). They become a ``SharedInput`` of ``SharedInputLinear``
   layers, merged (``merge=True``) into one GEMM over their concatenated weights.
3. **Norms**: a norm-like module whose output a group reads is fused when, on a probe input
   of the recorded dtype and a probe weight, its forward equals ``w8a8.reference.rms_norm``
   bit for bit for the value of one of its float attributes, and again after that
   attribute is changed (so that attribute is the eps it reads). It becomes a
   ``QuantizingRMSNorm`` reading the weight and eps by those names at each call.
4. **Gated MLPs**: a module called on the input of a two-member group of its own children,
   with a third child ``down`` reading their product, is fused when on a probe input
   ``down`` receives ``w8a8.reference.silu_mul(gate(x), up(x))`` bit for bit (one way
   round) and the module returns ``down``'s output unchanged. It becomes a
   ``QuantizingGatedMLP``.

The fused modules (``w8a8.fusion.modules``) are the same objects with their class swapped;
each checks at every call that its plan still holds and otherwise runs the model's own code.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field

import torch
from torch import nn

from w8a8 import reference
from w8a8.fusion.checks import fixed_objects
from w8a8.fusion.modules import QuantizingGatedMLP, QuantizingRMSNorm, SharedInput, SharedInputLinear, swap_in, swap_out
from w8a8.linear import W8A8Linear
from w8a8.validate import MAX_K

# --- recording ----------------------------------------------------------------------------------


def _fingerprint(x: torch.Tensor) -> torch.Tensor:
    """Two fp64 sums of x (plain and of squares), accumulated without a copy of x: what the
    recording compares to see a tensor changed between two of its reads."""
    return torch.stack([x.sum(dtype=torch.float64), torch.linalg.vector_norm(x, dtype=torch.float64)])


def _one_tensor(args, kwargs) -> bool:
    return len(args) == 1 and not kwargs and isinstance(args[0], torch.Tensor)


def _norm_like(m: nn.Module) -> bool:
    """No children and one parameter, 1-D and floating: what a norm with a weight looks like."""
    if m._modules or len(m._parameters) != 1:
        return False
    (w,) = m._parameters.values()
    return w is not None and w.dim() == 1 and w.is_floating_point()


class _Recorder:
    """Hooks that note, for one forward, which tensor object each layer read or wrote.

    Tensors are told apart by identity while they live (an id with a weak reference, so a
    dead tensor's id reused by a new one is a new tensor) and are never kept alive: a
    recorded forward costs no more memory than the forward itself, plus two numbers per
    activation to see one change between where it was made and its reads.
    """

    def __init__(self, model: nn.Module) -> None:
        self.linear_calls: list[tuple[W8A8Linear, int]] = []  # (layer, key of its input) in call order
        self.norm_out: dict[int, nn.Module] = {}  # key of an output -> the norm-like module that wrote it
        self.mlp_in: list[tuple[nn.Module, int]] = []
        self.like: dict[int, torch.Tensor] = {}  # key -> an empty tensor of its dtype and device
        self.calls: dict[int, int] = {}
        self.odd: set[int] = set()  # modules called otherwise than module(tensor)
        self.changed: set[int] = set()
        self._ids: dict[int, tuple[weakref.ref, int]] = {}
        self._prints: dict[int, torch.Tensor] = {}
        self.handles = []
        self._pre: dict[int, object] = {}  # module -> its pre-hook
        for m in model.modules():
            if type(m) is W8A8Linear:  # subclasses (tensor-parallel shards) have forwards of their own
                self._pre[id(m)] = self._linear
            elif _norm_like(m):
                self._pre[id(m)] = self._norm_call
                self.handles.append(m.register_forward_hook(self._norm))
            elif sum(type(c) is W8A8Linear for c in m.children()) >= 3:
                self._pre[id(m)] = self._mlp
            if id(m) in self._pre:
                self.handles.append(m.register_forward_pre_hook(self._pre[id(m)], with_kwargs=True))

    def root_called(self, model: nn.Module, args, kwargs) -> None:
        """The model's own call, when the recorder was made inside it (its pre-hooks had started)."""
        hook = self._pre.get(id(model))
        if hook is not None:
            hook(model, args, kwargs)

    def _key(self, x: torch.Tensor) -> int:
        seen = self._ids.get(id(x))
        if seen is not None and seen[0]() is x:
            return seen[1]
        key = len(self.like)
        self._ids[id(x)] = (weakref.ref(x), key)
        self.like[key] = x.new_empty(0)
        return key

    def _print(self, key: int, x: torch.Tensor) -> None:
        """Note x's fingerprint; a key whose tensor differs from its first fingerprint has changed."""
        with torch.no_grad():
            now = _fingerprint(x)
        first = self._prints.setdefault(key, now)
        if first is not now and not torch.allclose(first, now, rtol=0, atol=0, equal_nan=True):
            self.changed.add(key)

    def _call(self, m, args, kwargs) -> bool:
        self.calls[id(m)] = self.calls.get(id(m), 0) + 1
        if _one_tensor(args, kwargs):
            return True
        self.odd.add(id(m))
        return False

    def _norm_call(self, m, args, kwargs) -> None:
        self._call(m, args, kwargs)

    def _linear(self, m, args, kwargs) -> None:
        if self._call(m, args, kwargs):
            key = self._key(args[0])
            self._print(key, args[0])
            self.linear_calls.append((m, key))

    def _norm(self, m, args, out) -> None:
        if isinstance(out, torch.Tensor):
            key = self._key(out)
            self._print(key, out)
            self.norm_out[key] = m

    def _mlp(self, m, args, kwargs) -> None:
        if self._call(m, args, kwargs):
            self.mlp_in.append((m, self._key(args[0])))

    def once(self, m: nn.Module) -> bool:
        """Called exactly once in the recorded forward, as module(tensor)."""
        return self.calls.get(id(m)) == 1 and id(m) not in self.odd

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


# --- the checks on a probe ------------------------------------------------------------------------


def _probe(k: int, like: torch.Tensor, rows: int = 5, scale: float = 3.0) -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(1234)
    return (torch.randn(rows, k, generator=g) * scale).to(device=like.device, dtype=like.dtype)


def _same(a, b) -> bool:
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
            and a.dtype == b.dtype and a.device == b.device and torch.equal(a, b))


def _rms_norm_attrs(module: nn.Module, dtype: torch.dtype) -> tuple[str, str] | None:
    """(weight name, eps name) when ``module``'s forward is ``reference.rms_norm(x, weight, eps)``
    bit for bit on a probe, for a probe weight and two values of that eps attribute; else None."""
    ((wname, w),) = module._parameters.items()
    if w.dtype != dtype or w.shape[0] > MAX_K or w.is_meta:
        return None
    k = w.shape[0]
    x = _probe(k, w)
    probe_w = nn.Parameter(_probe(k, w, rows=1, scale=0.25).reshape(k) + 1, requires_grad=False)
    candidates = [n for n, v in module.__dict__.items()
                  if not n.startswith("_") and type(v) in (float, int) and 0 <= v < math.inf]
    for name in candidates:
        eps = module.__dict__[name]
        try:
            module._parameters[wname] = probe_w
            ok = True
            for e in (eps, 4.0 + 2 * eps):  # the second changes the output: the forward reads this attribute
                module.__dict__[name] = e
                with torch.no_grad():
                    ok = ok and _same(type(module).forward(module, x), reference.rms_norm(x, probe_w, e))
        except Exception:  # a forward that cannot take the probe is not fused
            ok = False
        finally:
            module._parameters[wname] = w
            module.__dict__[name] = eps
        if ok:
            return wname, name
    return None


def _gate_first(mlp: nn.Module, members: list[W8A8Linear], down: W8A8Linear, like: torch.Tensor) -> bool | None:
    """True / False: ``mlp(x)`` is ``down(silu_mul(first(x), second(x)))`` / with the two swapped,
    bit for bit on a probe (down's input and the module's output); None: neither."""
    x = _probe(members[0].in_features, like)
    seen = {id(m): [] for m in (*members, down)}

    def note(m, args):
        seen[id(m)].append(args)

    handles = [m.register_forward_pre_hook(note) for m in (*members, down)]
    try:
        with torch.no_grad():
            want = type(mlp).forward(mlp, x)
    except Exception:
        return None
    finally:
        for h in handles:
            h.remove()
    calls = [seen[id(m)] for m in (*members, down)]
    if any(len(c) != 1 or len(c[0]) != 1 for c in calls) or any(c[0][0] is not x for c in calls[:2]):
        return None
    product = calls[2][0][0]
    with torch.no_grad():
        a, b = (W8A8Linear.forward(m, x) for m in members)
        for gate_first in (True, False):
            p = reference.silu_mul(*((a, b) if gate_first else (b, a)))
            if _same(product, p) and _same(want, W8A8Linear.forward(down, p)):
                return gate_first
    return None


def _mode_matters(module: nn.Module, x: torch.Tensor, want: torch.Tensor) -> bool:
    """Whether ``module`` computes something else on the probe in the other training mode
    (dropout inside it): then the fused path runs in eval mode only."""
    modes = [(m, m.training) for m in module.modules()]
    try:
        module.train(not module.training)
        with torch.no_grad(), torch.random.fork_rng(devices=[x.device] if x.is_cuda else []):
            return not _same(type(module).forward(module, x), want)
    except Exception:
        return True
    finally:
        for m, mode in modes:
            m.training = mode


def _steps_aside(module: nn.Module, x: torch.Tensor, want: torch.Tensor) -> bool:
    """Whether the model's own forward still runs on the swapped module (a forward that
    calls ``super()`` or a method of its class would not)."""
    try:
        with torch.no_grad():
            return _same(module._w8a8_base.forward(module, x), want)
    except Exception:
        return False


# --- the plan ---------------------------------------------------------------------------------------


@dataclass
class FusionReport:
    """What ``fuse_model`` set up: groups (member names), fused norms and MLPs (module names)."""

    groups: list[list[str]] = field(default_factory=list)
    merged: list[list[str]] = field(default_factory=list)
    norms: list[str] = field(default_factory=list)
    mlps: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{len(self.groups)} groups sharing one quantization ({len(self.merged)} merged into one GEMM), "
                f"{len(self.norms)} norms and {len(self.mlps)} SiLU-and-mul MLPs quantizing their output")


def _eligible(members: list[W8A8Linear], rec: _Recorder) -> bool:
    return (all(rec.once(m) and m.act_quant == "dynamic" and m.input_zero_point is None for m in members)
            and len({(m.backend, m.in_features, m.bias is None) for m in members}) == 1)


def _plan(model: nn.Module, rec: _Recorder, merge: bool) -> FusionReport:
    """Find the groups, norms and MLPs of the recorded forward, check them, swap them in."""
    names = {id(m): n for n, m in model.named_modules()}
    buckets: dict[int, list[W8A8Linear]] = {}
    for m, key in rec.linear_calls:
        buckets.setdefault(key, []).append(m)
    groups: dict[int, list[W8A8Linear]] = {}
    norms: dict[int, tuple] = {}  # key -> (norm, weight name, eps name)
    for key, members in buckets.items():
        if key in rec.changed or not _eligible(members, rec):
            continue
        norm = rec.norm_out.get(key)
        attrs = _rms_norm_attrs(norm, rec.like[key].dtype) if norm is not None and rec.once(norm) else None
        if attrs is not None:
            norms[key] = (norm, *attrs)
        if len(members) > 1 or attrs is not None:
            groups[key] = members
    grouped = {id(m) for ms in groups.values() for m in ms}
    mlps = []  # (mlp, key, down, gate_first)
    for mlp, key in rec.mlp_in:
        members = groups.get(key)
        if members is None or len(members) != 2 or not rec.once(mlp):
            continue
        children = list(mlp.children())
        f = members[0].out_features
        downs = [c for c in children if type(c) is W8A8Linear and id(c) not in grouped and c.in_features == f
                 and c.act_quant == "dynamic" and c.input_zero_point is None and rec.once(c)]
        if not all(m in children for m in members) or members[1].out_features != f or len(downs) != 1:
            continue
        gate_first = _gate_first(mlp, members, downs[0], rec.like[key])
        if gate_first is not None:
            mlps.append((mlp, key, downs[0], gate_first))

    report = FusionReport()
    shared = {}
    for key, members in groups.items():
        shared[key] = group = SharedInput(members, merge)
        for i, m in enumerate(members):
            swap_in(m, SharedInputLinear, group=group, index=i)
        group.refresh()
        report.groups.append([names.get(id(m), "?") for m in members])
        if group.merged:
            report.merged.append(report.groups[-1])
    for key, (norm, wname, eps_name) in norms.items():
        x = _probe(getattr(norm, wname).shape[0], rec.like[key])
        want = _own_output(norm, x)
        if _swapped_in(norm, x, want, QuantizingRMSNorm, weight=wname, eps=eps_name, readers=shared[key],
                       fixed=fixed_objects(norm, read_now=(eps_name,))):
            report.norms.append(names.get(id(norm), "?"))
    for mlp, key, down, gate_first in mlps:
        x = _probe(shared[key].members[0].in_features, rec.like[key])
        want = _own_output(mlp, x)
        if _swapped_in(mlp, x, want, QuantizingGatedMLP, group=shared[key], gate_first=gate_first, down=down,
                       eval_only=_mode_matters(mlp, x, want), fixed=fixed_objects(mlp)):
            report.mlps.append(names.get(id(mlp), "?"))
    return report


def _own_output(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The module's own forward on the probe, before any swap."""
    with torch.no_grad():
        return type(module).forward(module, x)


def _swapped_in(module: nn.Module, x: torch.Tensor, want: torch.Tensor, cls: type, **plan) -> bool:
    """Swap ``cls`` in, and keep it only where the model's own forward still runs on the
    swapped module (``_steps_aside``); returns whether it was kept."""
    swap_in(module, cls, **plan)
    if _steps_aside(module, x, want):
        return True
    swap_out(module)
    return False


# --- fuse_model / unfuse_model -------------------------------------------------------------------


def unfuse_model(model: nn.Module) -> None:
    """Undo ``fuse_model``: every module back to its own class (parameters keep their values),
    and no forward of ``model`` recorded."""
    for m in model.modules():
        swap_out(m)
    model.__dict__.pop("_w8a8_armed", None)
    model.__dict__.pop("w8a8_fusion", None)


def fuse_model(model: nn.Module, *example_args, merge: bool = True, **example_kwargs) -> FusionReport | None:
    """Share quantizations, merge sibling projections and fuse quantization into producers.

    With example inputs: one forward of ``model`` on them is recorded now (under
    ``torch.inference_mode``; its output is discarded). Without: the model's next eager
    forward (not one being compiled or captured) is recorded and the fused modules are in
    place from the one after (returns None). The FusionReport is also left in
    ``model.w8a8_fusion``. See the module docstring for what is found and how, and
    ``w8a8.fusion.modules`` for what the fused modules do.
    """
    unfuse_model(model)
    if example_args or example_kwargs:
        rec = _Recorder(model)
        try:
            with torch.inference_mode():
                model(*example_args, **example_kwargs)
        finally:
            rec.remove()
        model.w8a8_fusion = _plan(model, rec, merge)
        return model.w8a8_fusion
    model._w8a8_armed = merge
    if "_w8a8_hooked" not in model.__dict__:  # module-level functions: deepcopy and pickle keep working
        model.register_forward_pre_hook(_record_next_pre, with_kwargs=True)
        model.register_forward_hook(_record_next_post)
        model._w8a8_hooked = True
    return None


# Both hooks test is_compiling() first: a compiled forward reads none of the recording state,
# so recording (or not) never invalidates a compiled graph.
def _record_next_pre(module: nn.Module, args, kwargs) -> None:
    if torch.compiler.is_compiling():
        return
    if module.__dict__.get("_w8a8_armed") is None or "_w8a8_recorder" in module.__dict__:
        return
    if not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
        module._w8a8_recorder = rec = _Recorder(module)
        rec.root_called(module, args, kwargs)


def _record_next_post(module: nn.Module, args, output) -> None:
    if torch.compiler.is_compiling():
        return
    rec = module.__dict__.pop("_w8a8_recorder", None)
    if rec is None:
        return
    rec.remove()
    merge = module.__dict__.pop("_w8a8_armed")
    module.w8a8_fusion = _plan(module, rec, merge)


def probe_inputs(model: nn.Module) -> dict | None:
    """A short input for a transformers model's forward (8 token ids, no cache), or None."""
    config = getattr(model, "config", None)
    vocab = getattr(config, "vocab_size", None)
    if getattr(model, "main_input_name", None) != "input_ids" or not isinstance(vocab, int) or vocab < 1:
        return None
    try:
        device = next(model.parameters()).device
    except StopIteration:
        return None
    if device.type == "meta":
        return None
    ids = (torch.arange(8, device=device) * 7 % vocab).reshape(1, 8)
    kwargs = {"input_ids": ids}
    if getattr(config, "use_cache", None) is not None:
        kwargs["use_cache"] = False
    return kwargs
