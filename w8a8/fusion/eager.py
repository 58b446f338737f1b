"""Model-level fusion: one quantization per activation, merged sibling projections, and the
quantization done by the producer of the activation (RMSNorm, SiLU(gate) * up).

Found from the running model, without editing its code and without layer names:

1. **Discovery**: one forward is recorded. ``quantize_model`` records a short probe forward
   of a transformers model (8 token ids); any other model records its first eager forward
   (or call ``fuse_model(model, *example_args)``). Hooks note the tensor object each
   ``W8A8Linear`` reads, the output of each RMSNorm-like module and the input of each
   module that owns Linears and a SiLU.
2. **Groups**: the dynamic ``W8A8Linear`` that read one tensor object, each called once in
   that forward, the tensor unchanged between the first and the last read (checked from two
   fp64 sums). The first member called quantizes; the others reuse its int8 codes and scales.
3. **Merged** (``merge=True``): a group's weights, weight scales and biases concatenated
   into one ``[sum N, K]`` tensor; the members' parameters become views of it, so the state
   dict and checkpoints keep one tensor per projection. The first member called runs one
   GEMM and the others get their column slices: the same int32 sums and the same
   per-channel epilogue, so bit-identical outputs.
4. **Producers**: an RMSNorm-like module (a 1-D ``weight``, an ``eps`` or
   ``variance_epsilon``, no children; its output checked against ``w8a8.ops.rms_norm_quant``'s
   on a random input) whose output a group reads runs ``rms_norm_quant`` and hands the
   group its codes. A module whose forward is ``down(silu(gate(x)) * up(x))`` (checked
   against its own forward on a random input, both ways round) runs the gate/up group,
   then ``silu_mul_quant``, and hands ``down`` the codes (``QuantizedActivation``).

At run time a member reuses codes or an output only for the very tensor object the group
computed them from, on the same stream, and (outside ``torch.inference_mode``, where
tensors carry a version counter) unmodified since; anything else is computed afresh.
Under ``torch.compile`` the module-level paths step aside (``w8a8.fusion.inductor``'s graph pass
does the same work on the graph); merged members then read their weights as slices of the
group's tensor, which is how that pass recognises them.

Moving or casting a member (``.to()``, ``.half()``) or loading with ``assign=True`` leaves
its parameters outside the group's tensor: the group is rebuilt at its next eager call.
"""
from __future__ import annotations

import types
import weakref
from dataclasses import dataclass

import torch
from torch import nn

from w8a8 import ops
from w8a8.linear import QuantizedActivation, W8A8Linear, _frozen

# Above this many tokens a merged group runs one GEMM per member (on row slices of the merged
# weight, sharing the codes): the merged GEMM pays while the GEMMs are short, the separate ones
# are faster at thousands of tokens. [evidence fusion.merge-max-tokens]
MERGE_MAX_TOKENS = 4096

# --- the per-call state a group shares between its members ---------------------------------


def _version(x: torch.Tensor) -> int:
    """x's version counter, or -1 for an inference tensor (which has none)."""
    return -1 if x.is_inference() else x._version


def _stream_id(x: torch.Tensor) -> int:
    return torch.cuda.current_stream(x.device).cuda_stream if x.is_cuda else 0


@dataclass
class _Computed:
    """What was computed from one tensor object: its codes and scales, and (merged) every member's output."""

    source: weakref.ref
    version: int
    stream: int
    pending: list[bool]  # members that have not read it yet
    codes: torch.Tensor | None = None
    scales: torch.Tensor | None = None
    outputs: list | None = None

    def valid_for(self, x: torch.Tensor) -> bool:
        return self.source() is x and _version(x) == self.version and _stream_id(x) == self.stream


def _computed(x: torch.Tensor, pending: list[bool], **fields) -> _Computed:
    return _Computed(weakref.ref(x), _version(x), _stream_id(x), pending, **fields)


class Group:
    """W8A8Linear layers that read one activation (in call order), and what they share."""

    def __init__(self, members: list[W8A8Linear], merge: bool) -> None:
        self.members = members
        self.merge = merge and len(members) > 1
        self.offsets = [0]
        for m in members:
            self.offsets.append(self.offsets[-1] + m.out_features)
        self.weight = self.weight_scale = self.bias = None
        self._state: _Computed | None = None
        self._offered: _Computed | None = None  # codes a fused producer computed for the next read
        for i, m in enumerate(members):
            m._w8a8_group, m._w8a8_index = self, i
        if self.merge:
            self._merge()

    # -- merged weights ------------------------------------------------------------------

    def _merge(self) -> None:
        """Concatenate the members' tensors and make their parameters views of the result."""
        ms = self.members
        self.weight = torch.cat([m.weight.detach() for m in ms])
        self.weight_scale = torch.cat([m.weight_scale.detach().reshape(-1) for m in ms])
        self.bias = None if ms[0].bias is None else torch.cat([m.bias.detach() for m in ms])
        for m, a, b in zip(ms, self.offsets, self.offsets[1:]):
            m.weight = _frozen(self.weight[a:b])
            m.weight_scale = _frozen(self.weight_scale[a:b])
            if m.bias is not None:
                m.bias = _frozen(self.bias[a:b])

    def merged_valid(self) -> bool:
        """Whether every member's parameters are still views of the group's tensors."""
        if self.weight is None:
            return False
        w, k = self.weight, self.weight.shape[1]
        base = w.data_ptr()
        for m, a in zip(self.members, self.offsets):
            if m.weight.device != w.device or m.weight.data_ptr() != base + a * k:
                return False
            if m.weight_scale.data_ptr() != self.weight_scale.data_ptr() + 4 * a:
                return False
            if self.bias is not None and m.bias.data_ptr() != self.bias.data_ptr() + a * self.bias.element_size():
                return False
        return True

    def invalidate(self) -> None:
        """A member was moved, cast or re-assigned: drop the merged tensors (rebuilt on the next eager call)."""
        self.weight = self.weight_scale = self.bias = None
        self._state = self._offered = None

    def _ensure_merged(self, x: torch.Tensor) -> bool:
        """Whether to run one GEMM for ``x``: merged, the merged tensors valid (or rebuilt now), and
        at most MERGE_MAX_TOKENS rows."""
        if not self.merge or x.numel() > MERGE_MAX_TOKENS * x.shape[-1]:
            return False
        if self.merged_valid():
            return True
        capturing = torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
        if capturing or torch.is_grad_enabled() and any(p.requires_grad for p in self.members[0].parameters()):
            return False
        if len({(m.weight.device, None if m.bias is None else m.bias.dtype) for m in self.members}) != 1:
            return False
        with torch.no_grad():
            self._merge()
        return True

    # -- the forward of one member -----------------------------------------------------------

    def offer(self, x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor) -> None:
        """A fused producer computed ``x``'s codes: the group uses them for its next read of ``x``."""
        self._offered = _computed(x, [True], codes=codes, scales=scales)

    def _quantize(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = x.shape[-1]
        offered, self._offered = self._offered, None
        if offered is not None and offered.valid_for(x):
            return offered.codes.reshape(-1, k), offered.scales.reshape(-1, 1)
        return ops.quantize_per_token(x.reshape(-1, k))

    def forward(self, member: W8A8Linear, x: torch.Tensor) -> torch.Tensor:
        """``member(x)``: from what the group computed for this very ``x`` in this round (each
        member reads it once; the state is dropped when all have), or computed now."""
        if torch.compiler.is_compiling():
            return self._traced(member, x)
        i, state = member._w8a8_index, self._state
        if state is not None and state.pending[i] and state.valid_for(x):
            state.pending[i] = False
            if not any(state.pending):
                self._state = None
            if state.outputs is not None:
                out, state.outputs[i] = state.outputs[i], None
                return out
            return self._one(member, x, state.codes, state.scales)
        codes, scales = self._quantize(x)
        pending = [j != i for j in range(len(self.members))]
        if self._ensure_merged(x):
            outs = self._all(x, codes, scales)
            out, outs[i] = outs[i], None
            self._state = _computed(x, pending, outputs=outs) if any(pending) else None
            return out
        self._state = _computed(x, pending, codes=codes, scales=scales) if any(pending) else None
        return self._one(member, x, codes, scales)

    def outputs(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Every member's output for ``x`` at once (the fused SiLU-and-mul path)."""
        codes, scales = self._quantize(x)
        self._state = None
        if self._ensure_merged(x):
            return self._all(x, codes, scales)
        return [self._one(m, x, codes, scales) for m in self.members]

    def _all(self, x, codes, scales) -> list[torch.Tensor]:
        m0 = self.members[0]
        out = ops.scaled_mm(codes, self.weight, scales, self.weight_scale, self.bias, x.dtype, backend=m0.backend)
        out = out.view(*x.shape[:-1], out.shape[-1])
        return [out[..., a:b] for a, b in zip(self.offsets, self.offsets[1:])]

    @staticmethod
    def _one(member: W8A8Linear, x, codes, scales) -> torch.Tensor:
        """One member's GEMM on the shared [M, K] codes, shaped like ``member(x)``."""
        out = member.forward_quantized(QuantizedActivation(codes, scales, x.dtype))
        return out.view(*x.shape[:-1], member.out_features)

    def _traced(self, member: W8A8Linear, x: torch.Tensor) -> torch.Tensor:
        """Under torch.compile: the plain op; merged members read slices of the group's tensors
        (the graph pass merges linears whose weights are slices of one tensor)."""
        if self.weight is None or not self.merge:
            return member.plain_forward(x)
        a, n = self.offsets[member._w8a8_index], member.out_features
        bias = None if self.bias is None else self.bias.narrow(0, a, n)
        return ops.linear(x, self.weight.narrow(0, a, n), self.weight_scale.narrow(0, a, n), bias,
                          backend=member.backend)


# --- producers ------------------------------------------------------------------------------


def _rms_eps(module: nn.Module) -> float | None:
    """The epsilon of an RMSNorm-like module (1-D weight, an eps attribute, no children), else None."""
    if any(True for _ in module.children()) or "rmsnorm" not in type(module).__name__.lower():
        return None
    w = getattr(module, "weight", None)
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    if not isinstance(w, torch.Tensor) or w.dim() != 1 or not isinstance(eps, (int, float)):
        return None
    return float(eps)


def _close(a: torch.Tensor, b: torch.Tensor, rel: float) -> bool:
    a, b = a.float(), b.float()
    return bool(torch.isfinite(a).all()) and float((a - b).norm()) <= rel * float(b.norm()) + 1e-30


def _probe_input(k: int, like: torch.Tensor, rows: int = 5) -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(1234)
    return torch.randn(rows, k, generator=g).to(device=like.device, dtype=like.dtype)


def _norm_matches(module: nn.Module, eps: float, dtype: torch.dtype) -> bool:
    """Whether ``module`` computes transformers' RMSNorm (what rms_norm_quant fuses), on a random input."""
    w = module.weight
    if w.dtype != dtype:
        return False
    x = _probe_input(w.shape[0], w) * 3
    with torch.no_grad():
        want = type(module).forward(module, x)
        _, _, normed = ops.rms_norm_quant(x, w, eps)
    return want.shape == normed.shape and want.dtype == normed.dtype and _close(normed, want, 1e-2)


def _fused_norm_forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """An RMSNorm-like module's forward that also quantizes its output for the group reading it."""
    eps, group = self._w8a8_norm
    if torch.compiler.is_compiling() or x.dtype != self.weight.dtype or x.device != self.weight.device:
        return type(self).forward(self, x)
    codes, scales, normed = ops.rms_norm_quant(x, self.weight, eps)
    group.offer(normed, codes, scales)
    return normed


def _install_norm(module: nn.Module, eps: float, group: Group) -> None:
    # A bound method of a module-level function: a deepcopy of the model binds it to the copy.
    module._w8a8_norm = (eps, group)
    module.forward = types.MethodType(_fused_norm_forward, module)


def _silu_like(module: nn.Module) -> bool:
    return isinstance(module, nn.SiLU) or "silu" in type(module).__name__.lower()


def _fused_mlp_forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """down(silu(gate(x)) * up(x)) with gate/up as one group and the product quantized by silu_mul_quant."""
    group, down, gate_first = self._w8a8_mlp
    if torch.compiler.is_compiling() or not isinstance(x, torch.Tensor):
        return type(self).forward(self, x)
    a, b = group.outputs(x)
    gate, up = (a, b) if gate_first else (b, a)
    codes, scales = ops.silu_mul_quant(gate, up)
    return down(QuantizedActivation(codes, scales, x.dtype))


def _install_mlp(module: nn.Module, group: Group, down: W8A8Linear, gate_first: bool) -> None:
    module._w8a8_mlp = (group, down, gate_first)
    module.forward = types.MethodType(_fused_mlp_forward, module)


def _mlp_order(module: nn.Module, group: Group, down: W8A8Linear, like: torch.Tensor) -> bool | None:
    """True / False: ``module`` is down(silu(first) * second) / down(silu(second) * first); None: neither."""
    x = _probe_input(group.members[0].in_features, like)
    with torch.no_grad():
        want = type(module).forward(module, x)
        for gate_first in (True, False):
            a, b = (m.plain_forward(x) for m in group.members)
            gate, up = (a, b) if gate_first else (b, a)
            codes, scales = ops.silu_mul_quant(gate, up)
            got = down(QuantizedActivation(codes, scales, x.dtype))
            if isinstance(want, torch.Tensor) and got.shape == want.shape and _close(got, want, 2e-2):
                return gate_first
    return None


# --- discovery --------------------------------------------------------------------------------


def _fingerprint(x: torch.Tensor) -> torch.Tensor:
    """Two fp64 sums of x (plain and of squares), accumulated without a copy of x: what the
    recording compares to see a tensor changed between two of its reads."""
    return torch.stack([x.sum(dtype=torch.float64), torch.linalg.vector_norm(x, dtype=torch.float64)])


class _Recorder:
    """Hooks that note, for one forward, which tensor object each layer read or wrote.

    Tensors are told apart by identity while they live (an id with a weak reference, so a
    dead tensor's id reused by a new one is a new tensor) and are never kept alive: a
    recorded forward costs no more memory than the forward itself, plus two numbers per
    activation to see one change between its reads.
    """

    def __init__(self, model: nn.Module) -> None:
        self.linear_calls: list[tuple[W8A8Linear, int]] = []  # (layer, key of its input) in call order
        self.norm_out: dict[int, nn.Module] = {}  # key of an output -> the RMSNorm-like module that wrote it
        self.mlp_in: list[tuple[nn.Module, int]] = []
        self.like: dict[int, torch.Tensor] = {}  # key -> an empty tensor of its dtype and device
        self.calls: dict[int, int] = {}
        self.changed: set[int] = set()
        self._ids: dict[int, tuple[weakref.ref, int]] = {}
        self._prints: dict[int, torch.Tensor] = {}
        self.handles = []
        for m in model.modules():
            if type(m) is W8A8Linear:  # subclasses (tensor-parallel shards) have forwards of their own
                self.handles.append(m.register_forward_pre_hook(self._linear))
            elif _rms_eps(m) is not None:
                self.handles.append(m.register_forward_hook(self._norm))
            elif any(_silu_like(c) for c in m.children()) and sum(isinstance(c, W8A8Linear) for c in m.children()) >= 3:
                self.handles.append(m.register_forward_pre_hook(self._mlp))

    def _key(self, x: torch.Tensor) -> int:
        seen = self._ids.get(id(x))
        if seen is not None and seen[0]() is x:
            return seen[1]
        key = len(self.like)
        self._ids[id(x)] = (weakref.ref(x), key)
        self.like[key] = x.new_empty(0)
        return key

    def _count(self, m) -> None:
        self.calls[id(m)] = self.calls.get(id(m), 0) + 1

    def _linear(self, m, args) -> None:
        self._count(m)
        x = args[0] if args else None
        if not isinstance(x, torch.Tensor):
            return
        key = self._key(x)
        with torch.no_grad():
            now = _fingerprint(x)
        first = self._prints.setdefault(key, now)
        if first is not now and not torch.allclose(first, now, rtol=0, atol=0, equal_nan=True):
            self.changed.add(key)
        self.linear_calls.append((m, key))

    def _norm(self, m, args, out) -> None:
        self._count(m)
        if isinstance(out, torch.Tensor):
            self.norm_out[self._key(out)] = m

    def _mlp(self, m, args) -> None:
        self._count(m)
        if args and isinstance(args[0], torch.Tensor):
            self.mlp_in.append((m, self._key(args[0])))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


@dataclass
class FusionReport:
    """What ``fuse_model`` set up: groups (member names), fused norms and MLPs (module names)."""

    groups: list[list[str]]
    merged: list[list[str]]
    norms: list[str]
    mlps: list[str]

    def summary(self) -> str:
        return (f"{len(self.groups)} groups sharing one quantization ({len(self.merged)} merged into one GEMM), "
                f"{len(self.norms)} norms and {len(self.mlps)} SiLU-and-mul MLPs quantizing their output")


def _plan(model: nn.Module, rec: _Recorder, merge: bool) -> FusionReport:
    names = {id(m): n for n, m in model.named_modules()}
    buckets: dict[int, list[W8A8Linear]] = {}
    for m, key in rec.linear_calls:
        buckets.setdefault(key, []).append(m)
    groups: dict[int, Group] = {}
    report = FusionReport([], [], [], [])
    for key, members in buckets.items():
        fusable = (
            key not in rec.changed
            and all(rec.calls[id(m)] == 1 and m.act_quant == "dynamic" and m.input_zero_point is None for m in members)
            and len({(m.backend, m.in_features, m.bias is None) for m in members}) == 1
        )
        if not fusable or (len(members) < 2 and key not in rec.norm_out):
            continue
        groups[key] = g = Group(members, merge)
        report.groups.append([names.get(id(m), "?") for m in members])
        if g.merge:
            report.merged.append(report.groups[-1])
    for key, g in groups.items():
        norm = rec.norm_out.get(key)
        if norm is None or rec.calls[id(norm)] != 1:
            continue
        eps = _rms_eps(norm)
        if _norm_matches(norm, eps, rec.like[key].dtype):
            _install_norm(norm, eps, g)
            report.norms.append(names.get(id(norm), "?"))
    for mlp, key in rec.mlp_in:
        g = groups.get(key)
        if g is None or rec.calls[id(mlp)] != 1 or len(g.members) != 2:
            continue
        children = list(mlp.children())
        f = g.members[0].out_features
        downs = [c for c in children if type(c) is W8A8Linear and c not in g.members and c.in_features == f
                 and c.act_quant == "dynamic" and c.input_zero_point is None and getattr(c, "_w8a8_group", None) is None]
        if not all(m in children for m in g.members) or g.members[1].out_features != f or len(downs) != 1:
            continue
        order = _mlp_order(mlp, g, downs[0], rec.like[key])
        if order is not None:
            _install_mlp(mlp, g, downs[0], order)
            report.mlps.append(names.get(id(mlp), "?"))
    return report


def unfuse_model(model: nn.Module) -> None:
    """Undo ``fuse_model``: every layer on its own again (parameters keep their values), and
    no forward of ``model`` recorded."""
    for m in model.modules():
        for attr in ("_w8a8_norm", "_w8a8_mlp"):
            if attr in m.__dict__:
                del m.__dict__[attr]
                m.__dict__.pop("forward", None)
        if isinstance(m, W8A8Linear):
            m.clear_group()
    model.__dict__.pop("_w8a8_armed", None)
    model.__dict__.pop("w8a8_fusion", None)


def fuse_model(model: nn.Module, *example_args, merge: bool = True, **example_kwargs) -> FusionReport | None:
    """Share quantizations, merge sibling projections and fuse quantization into producers.

    With example inputs: one forward of ``model`` on them is recorded now (under
    ``torch.inference_mode``; its output is discarded). Without: the model's next eager
    forward (not one being compiled or captured) is recorded and the fusion applies from
    the one after (returns None). The FusionReport is also left in ``model.w8a8_fusion``.
    See the module docstring for what is found and how.
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
        model.register_forward_pre_hook(_record_next_pre)
        model.register_forward_hook(_record_next_post)
        model._w8a8_hooked = True
    return None


# Both hooks test is_compiling() first: a compiled forward reads none of the recording state,
# so recording (or not) never invalidates a compiled graph.
def _record_next_pre(module: nn.Module, args) -> None:
    if torch.compiler.is_compiling():
        return
    if module.__dict__.get("_w8a8_armed") is None or "_w8a8_recorder" in module.__dict__:
        return
    if not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
        module._w8a8_recorder = _Recorder(module)


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
