"""The fused modules: what ``fuse_model`` turns a model's modules into.

Each is the model's own module object with its class swapped (``module.__class__``), so
the object, its parameters, buffers, children, hooks and state-dict keys stay what they
were; only ``forward`` changes. Three classes, each holding its piece of the plan:

* ``SharedInputLinear`` (a ``W8A8Linear``): one of the layers that read one activation
  (a ``SharedInput``, e.g. q/k/v). The first member called quantizes the activation (or
  takes the codes a fused norm computed for it) and, merged, runs one GEMM over the
  members' concatenated weights; the others reuse the codes or take their output.
* ``QuantizingRMSNorm``: an RMSNorm whose output a ``SharedInput`` reads. It runs
  ``w8a8.ops.rms_norm_quant`` and offers the codes to its readers.
* ``QuantizingGatedMLP``: a module computing ``down(silu(gate(x)) * up(x))``. It runs the
  gate/up ``SharedInput``, ``w8a8.ops.silu_mul_quant``, and ``down`` on the codes.

Every call first checks, cheaply, that its plan still holds (identity and attribute
compares, no tensor op): the call has the planned form, the children and plain
attributes are the objects planned, no hook is registered on a layer the fused path
would not call, the weights and eps are read now, and autograd would record nothing.
Otherwise the module runs the model's own code (``_w8a8_base.forward``): the same
numbers, without the fusion. The checks the classes share are in ``checks.py``.

Run-time reuse between modules (the norm's codes, a merged GEMM's outputs) is keyed on
the very tensor object it was computed from, its version counter and the CUDA stream
(``checks._Computed``); under ``torch.compile`` the modules emit the fused ops and the
per-member linears on slices of the merged weights, and ``w8a8.fusion.inductor`` wires
them together.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules import module as _module

from w8a8 import ops, padding
from w8a8.fusion.checks import _capturing, _computed, _Computed, _exporting, _hooked, _same_objects
from w8a8.fusion.checks import fixed_objects  # noqa: F401  (importable from here too)
from w8a8.linear import QuantizedActivation, W8A8Linear, _frozen

# Above this many tokens a merged group runs one GEMM per member (on row slices of the merged
# weight, sharing the codes): the merged GEMM pays while the GEMMs are short, the separate ones
# are faster at thousands of tokens. [evidence fusion.merge-max-tokens]
MERGE_MAX_TOKENS = 4096


# --- the per-call state a group shares between its members ---------------------------------


class SharedInput:
    """The ``SharedInputLinear`` layers that read one activation (in call order) and what
    they share: the merged weights (``merge``) and, within one round, the codes or outputs
    computed for the tensor they read.

    Merged: ``weight``, ``weight_scale`` and ``bias`` are the members' tensors concatenated,
    and the members' parameters are row slices (views) of them, so the state dict keeps
    one tensor per layer. ``merged`` says whether that held at the last check: at each
    eager round (storage addresses), after a member moved, was cast, loaded or given a new
    parameter. A copy or pickle leaves the merged tensors out; once the copy is whole they
    are taken over from the members' storage when it is still one block (``torch.save``
    keeps it so) or concatenated anew (``pickle``, ``copy.deepcopy``). Under
    ``torch.compile`` the members read slices of the merged tensors when ``merged`` (the
    graph pass merges linears on adjacent slices of one tensor), else their own; a
    parameter edited through ``.data`` after the last eager round is not seen there.
    """

    def __init__(self, members: list[W8A8Linear], merge: bool) -> None:
        self.members = list(members)
        self.merge = merge and len(members) > 1
        self.offsets = [0]
        for m in members:
            self.offsets.append(self.offsets[-1] + m.out_features)
        self.widths = [m.out_features for m in members]
        self.weight = self.weight_scale = self.bias = None
        self.merged = False
        self._rows = None  # per member, the addresses of its weight, weight_scale and bias rows in the merged tensors
        self._state: _Computed | None = None
        self._offered: _Computed | None = None  # codes a fused producer computed for the next read

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.update(weight=None, weight_scale=None, bias=None, merged=False, _rows=None, _state=None, _offered=None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.restored()

    def restored(self) -> None:
        """After a copy or unpickling (the group and its members are restored in any order):
        the merged tensors again, once the group and every member are whole."""
        members = self.__dict__.get("members")
        if members and all("weight" in m.__dict__.get("_parameters", ()) for m in members):
            self.refresh()

    # -- merged weights ------------------------------------------------------------------

    def _kinds(self):
        """(name, the members' tensors, the merged tensor) for weight, weight_scale and bias."""
        ms = self.members
        yield "weight", [m.weight for m in ms], self.weight
        yield "weight_scale", [m.weight_scale for m in ms], self.weight_scale
        if ms[0].bias is not None:
            yield "bias", [m.bias for m in ms], self.bias

    def rows_are_views(self) -> bool:
        """Whether every member's parameters are still the rows of the merged tensors (storage
        addresses compared: one address space for host and devices)."""
        rows = self._rows
        if rows is None:
            return False
        try:
            for m, (w, s, b) in zip(self.members, rows):
                params = m._parameters
                if params["weight"].data_ptr() != w or params["weight_scale"].data_ptr() != s:
                    return False
                if b is not None and params["bias"].data_ptr() != b:
                    return False
        except (KeyError, AttributeError):  # a parameter deleted or set to None
            return False
        return True

    def refresh(self) -> bool:
        """Check the merged tensors; take them over from the members' storage or concatenate
        them anew where they no longer hold. Returns ``merged``."""
        if not self.merge:
            return False
        if self.merged and self.rows_are_views():
            return True
        self.merged, self._rows = False, None
        ms = self.members
        if len({m.bias is None for m in ms}) != 1:
            return False
        kinds = list(self._kinds())
        if any(len({(t.device, t.dtype) for t in parts}) != 1 for _, parts, _ in kinds):
            return False  # mid-move (``.to()`` goes member by member) or mixed dtypes: not mergeable now
        if any(p.requires_grad for _, parts, _ in kinds for p in parts) or _capturing(ms[0].weight):
            return False
        # Normal tensors even when the first forward (the recorded one) runs under inference_mode:
        # the parameters stay editable in place outside it (load_state_dict).
        with torch.no_grad(), torch.inference_mode(False):
            for name, parts, _ in kinds:
                whole = self._adjacent(parts)
                if whole is None:  # concatenated, and the members' parameters become views of it
                    whole = torch.cat([t.detach() for t in parts])
                    for m, a, b in zip(ms, self.offsets, self.offsets[1:]):
                        m._parameters[name] = _frozen(whole[a:b])
                setattr(self, name, whole)
        row_bytes = [t.element_size() * (t.stride(0) if t.dim() > 1 else 1) if t is not None else 0
                     for t in (self.weight, self.weight_scale, self.bias)]
        self._rows = [tuple(None if t is None else t.data_ptr() + a * n for t, n in
                            zip((self.weight, self.weight_scale, self.bias), row_bytes)) for a in self.offsets[:-1]]
        self.merged = self.rows_are_views()
        return self.merged

    def _adjacent(self, parts: list[torch.Tensor]) -> torch.Tensor | None:
        """A tensor over the members' rows when they lie one after the other in one storage, else None."""
        first = parts[0]
        if not (first.is_contiguous() and all(t.is_contiguous() for t in parts)):
            return None
        row = first.element_size() * (first.shape[1] if first.dim() > 1 else 1)
        base = first.data_ptr()
        if any(t.data_ptr() != base + a * row for t, a in zip(parts, self.offsets)):
            return None
        if any(t.untyped_storage().data_ptr() != first.untyped_storage().data_ptr() for t in parts):
            return None
        shape = (self.offsets[-1], *first.shape[1:])
        stride = (first.shape[1], 1) if first.dim() > 1 else (1,)
        return first.detach().as_strided(shape, stride, first.storage_offset())

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

    def _merged_for(self, x: torch.Tensor) -> bool:
        """Whether one GEMM runs for ``x``: merged, the merged tensors still the members' rows
        (or made so now), and at most MERGE_MAX_TOKENS rows."""
        if not self.merge or x.numel() > MERGE_MAX_TOKENS * x.shape[-1]:
            return False
        return (self.merged and self.rows_are_views()) or self.refresh()

    def read(self, member: "SharedInputLinear", x: torch.Tensor) -> torch.Tensor | None:
        """``member(x)`` from what this round computed for this very ``x`` (each member reads it
        once; the state is dropped when all have), or None."""
        state, i = self._state, member._w8a8_index
        if state is None or not state.pending[i] or not state.valid_for(x):
            return None
        state.pending[i] = False
        if not any(state.pending):
            self._state = None
        if state.outputs is not None:
            out, state.outputs[i] = state.outputs[i], None
            return out
        return self._one(member, x, state.codes, state.scales)

    def start(self, member: "SharedInputLinear", x: torch.Tensor) -> torch.Tensor:
        """``member(x)`` as the first read of ``x`` in a round: its codes (the producer's or
        quantized now) and, merged, every member's output, kept for the others."""
        i = member._w8a8_index
        codes, scales = self._quantize(x)
        pending = [j != i for j in range(len(self.members))]
        if self._merged_for(x):
            outs = self._all(x, codes, scales, contiguous=True)
            out, outs[i] = outs[i], None
            self._state = _computed(x, pending, outputs=outs) if any(pending) else None
            return out
        self._state = _computed(x, pending, codes=codes, scales=scales) if any(pending) else None
        return self._one(member, x, codes, scales)

    def outputs(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Every member's output for ``x`` at once (the fused SiLU-and-mul path; column
        slices of one output when merged)."""
        codes, scales = self._quantize(x)
        self._state = None
        if self._merged_for(x):
            return self._all(x, codes, scales, contiguous=False)
        return [self._one(m, x, codes, scales) for m in self.members]

    def _all(self, x, codes, scales, contiguous: bool) -> list[torch.Tensor]:
        """Every member's output from one GEMM over the merged weights: column slices of its
        output, or (``contiguous``, more than one row) contiguous tensors as nn.Linear gives,
        copied out by one op (one kernel on CUDA: the host time of a copy per member, of
        slicing and viewing them, is what a short forward pays for)."""
        m0, lead = self.members[0], x.shape[:-1]
        out = ops.scaled_mm(codes, self.weight, scales, self.weight_scale, self.bias, x.dtype, backend=m0.backend)
        out = out.view(*lead, out.shape[-1])
        if not contiguous or out.numel() == out.shape[-1]:  # (one row: its slices are contiguous)
            return [out[..., a:b] for a, b in zip(self.offsets, self.offsets[1:])]
        outs = [padding.empty((*lead, n), out.dtype, out.device, pad=False) for n in self.widths]
        torch.split_with_sizes_copy(out, self.widths, dim=-1, out=outs)
        return outs

    @staticmethod
    def _one(member: W8A8Linear, x, codes, scales) -> torch.Tensor:
        """One member's GEMM on the shared [M, K] codes, shaped like ``member(x)``."""
        out = member.forward_quantized(QuantizedActivation(codes, scales, x.dtype))
        return out.view(*x.shape[:-1], member.out_features)

    def traced(self, member: W8A8Linear, x: torch.Tensor) -> torch.Tensor:
        """Under torch.compile: the plain op; merged members read slices of the group's tensors
        (the graph pass merges linears whose weights are adjacent slices of one tensor)."""
        if not self.merged:
            return W8A8Linear.forward(member, x)
        a, n = self.offsets[member._w8a8_index], member.out_features
        bias = None if self.bias is None else self.bias.narrow(0, a, n)
        return ops.linear(x, self.weight.narrow(0, a, n), self.weight_scale.narrow(0, a, n), bias,
                          backend=member.backend)


class SharedInputLinear(W8A8Linear):
    """A dynamic ``W8A8Linear`` that reads the same activation as the other layers of its
    ``SharedInput`` (``_w8a8_group``, position ``_w8a8_index``): it shares their quantization
    and, merged, their GEMM. Outputs are those of the layer on its own, bit for bit, and
    contiguous. It runs on its own (``W8A8Linear.forward``) when a hook is registered on any
    member, when autograd would record, or when ``x`` is not a float tensor of its width
    with unit stride along it.
    """

    def forward(self, x: torch.Tensor | QuantizedActivation) -> torch.Tensor:
        group = self._w8a8_group
        if torch.compiler.is_compiling():  # torch.export: the layer on its own (the joins are Inductor's)
            shared = not _exporting() and self._shares(x)
            return group.traced(self, x) if shared else W8A8Linear.forward(self, x)
        out = group.read(self, x)  # x passed the checks below when its round started
        if out is not None:
            return out
        return group.start(self, x) if self._shares(x) else W8A8Linear.forward(self, x)

    def _shares(self, x) -> bool:
        """Whether ``x`` can start a round: a tensor of this width with unit stride along it, no
        autograd recording, no hook on any member."""
        return (isinstance(x, torch.Tensor) and x.shape[-1:] == (self.in_features,) and x.stride(-1) == 1
                and not (torch.is_grad_enabled() and x.requires_grad) and not _hooked(self._w8a8_group.members))

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        group = self.__dict__.get("_w8a8_group")
        if group is not None:
            group.restored()

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        group = self.__dict__.get("_w8a8_group")
        if group is not None:  # a move or cast goes member by member: merged again after the last one
            group.refresh()
        return self

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        group = self.__dict__.get("_w8a8_group")
        if group is not None:  # assign=True replaces the parameters
            group.refresh()

    def register_parameter(self, name: str, param) -> None:
        super().register_parameter(name, param)
        group = self.__dict__.get("_w8a8_group")
        if group is not None and name in ("weight", "weight_scale", "bias"):
            group.refresh()


# --- producers --------------------------------------------------------------------------------


class QuantizingRMSNorm(nn.Module):
    """An RMSNorm (the model's own module, class swapped) whose output a ``SharedInput``
    reads: one ``w8a8.ops.rms_norm_quant`` gives the normed output and its int8 codes, which
    the readers take instead of quantizing it again.

    Plan (instance attributes): ``_w8a8_base`` the module's own class, ``_w8a8_weight`` and
    ``_w8a8_eps`` the names of the attributes holding the weight and eps (read at each
    call), ``_w8a8_readers`` the ``SharedInput``, ``_w8a8_fixed`` the children and plain
    attributes that must stay the same objects. The model's own forward runs instead when
    the call is not ``norm(x)`` with ``x`` a tensor of the weight's dtype, device and
    width, eps is not a finite float >= 0, something else changed, or autograd would
    record. Its codes are offered only when no forward hook could edit its output.
    """

    def forward(self, *args, **kwargs):
        fixed = self._w8a8_fixed
        if len(args) != 1 or kwargs or (fixed and not _same_objects(self, fixed)):
            return self._w8a8_base.forward(self, *args, **kwargs)
        x, w, eps = args[0], self._parameters.get(self._w8a8_weight), getattr(self, self._w8a8_eps)
        if (not isinstance(x, torch.Tensor) or w is None or type(eps) not in (float, int)
                or not 0 <= eps < float("inf") or x.dtype != w.dtype or x.device != w.device
                or x.shape[-1:] != w.shape or x.stride(-1) != 1
                or (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))):
            return self._w8a8_base.forward(self, *args, **kwargs)
        compiling = torch.compiler.is_compiling()
        if compiling and _exporting():  # an exported program gets no graph pass to join the codes
            return self._w8a8_base.forward(self, *args, **kwargs)
        codes, scales, normed = ops.rms_norm_quant(x, w, float(eps))
        if not (compiling or self._forward_hooks or _module._global_forward_hooks):
            self._w8a8_readers.offer(normed, codes, scales)
        return normed

    def extra_repr(self) -> str:
        base = self._w8a8_base
        own = base.extra_repr(self) if base.extra_repr is not nn.Module.extra_repr else ""
        return f"{base.__name__}" + (f": {own}" if own else "")


class QuantizingGatedMLP(nn.Module):
    """A module computing ``down(silu(gate(x)) * up(x))`` (the model's own module, class
    swapped): gate and up run as their ``SharedInput`` (one quantization, one merged GEMM),
    ``w8a8.ops.silu_mul_quant`` quantizes the product, and ``down`` runs its GEMM on the codes.

    Plan (instance attributes): ``_w8a8_base`` the module's own class, ``_w8a8_group`` the
    gate/up ``SharedInput``, ``_w8a8_gate_first`` (whether the group's first member is the
    gate), ``_w8a8_down``, ``_w8a8_eval_only`` (the module computes something else in
    training mode: dropout), ``_w8a8_fixed`` the children and plain attributes that must stay
    the same objects. The model's own forward runs instead when the call is not ``mlp(x)``,
    a child or attribute changed, a hook is registered on gate, up, down or any other
    child, the module is in training mode and that matters, or autograd would record.
    """

    def forward(self, *args, **kwargs):
        if (len(args) != 1 or kwargs or (self.training and self._w8a8_eval_only)
                or not _same_objects(self, self._w8a8_fixed)):
            return self._w8a8_base.forward(self, *args, **kwargs)
        x, group, down = args[0], self._w8a8_group, self._w8a8_down
        if (not isinstance(x, torch.Tensor) or x.shape[-1:] != (group.members[0].in_features,) or x.stride(-1) != 1
                or (torch.is_grad_enabled() and x.requires_grad) or _hooked(self._modules.values())):
            return self._w8a8_base.forward(self, *args, **kwargs)
        if torch.compiler.is_compiling():
            if _exporting():  # the model's own code: see QuantizingRMSNorm
                return self._w8a8_base.forward(self, *args, **kwargs)
            a, b = (group.traced(m, x) for m in group.members)
        else:
            a, b = group.outputs(x)
        gate, up = (a, b) if self._w8a8_gate_first else (b, a)
        codes, scales = ops.silu_mul_quant(gate, up)
        return down.forward_quantized(QuantizedActivation(codes, scales, x.dtype))

    def extra_repr(self) -> str:
        return self._w8a8_base.__name__


FUSED_CLASSES = (SharedInputLinear, QuantizingRMSNorm, QuantizingGatedMLP)


def swap_in(module: nn.Module, cls: type, **plan) -> None:
    """Make ``module`` an instance of ``cls`` holding ``plan`` (attributes ``_w8a8_<key>``); its
    own class is kept in ``_w8a8_base``."""
    base = type(module)
    for key, value in plan.items():
        module.__dict__[f"_w8a8_{key}"] = value
    if cls is not SharedInputLinear:
        module.__dict__["_w8a8_base"] = base
    module.__class__ = cls


def swap_out(module: nn.Module) -> None:
    """Undo ``swap_in``: the module's own class back, the plan's attributes gone."""
    if not isinstance(module, FUSED_CLASSES):
        return
    base = module.__dict__.get("_w8a8_base", W8A8Linear)
    for key in [k for k in module.__dict__ if k.startswith("_w8a8_") and k != "_w8a8_folded_bias"]:
        del module.__dict__[key]
    module.__class__ = base
