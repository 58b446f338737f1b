"""What the fused modules (``modules.py``) check at every call, cheaply (identity and
attribute compares, no tensor op), and the record their checks read:

* that the plan still holds: no forward hook would run (``_hooked``), the children and plain
  attributes are the objects the plan saw (``fixed_objects``, ``_same_objects``);
* whether torch.export is tracing the call (``_exporting``);
* that what was computed from a tensor (``_Computed``: its codes and scales, or a merged
  GEMM's outputs) is still valid for the tensor read now: the very tensor object, its version
  counter and the CUDA stream.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.modules import module as _module

from w8a8.linear import _stream_id


# --- the plan still holds ---------------------------------------------------------------------


def _hooked(modules) -> bool:
    """Whether a forward hook or pre-hook would run for any of ``modules`` (their own or global)."""
    if _module._global_forward_hooks or _module._global_forward_pre_hooks:
        return True
    for m in modules:
        if m._forward_hooks or m._forward_pre_hooks:
            return True
    return False


def _exporting() -> bool:
    """Whether torch.export is tracing the call: the flag ``torch.compiler.is_exporting()``
    returns, read directly, since Dynamo in torch 2.11 folds ``is_exporting()`` to True in every
    trace, torch.compile's too (a fused module would then compile its model's own code)."""
    return getattr(torch.compiler, "_is_exporting_flag", False)


def _capturing(x: torch.Tensor) -> bool:
    return x.is_cuda and torch.cuda.is_current_stream_capturing()


def _same_objects(module: nn.Module, fixed: tuple) -> bool:
    """Whether the children and plain attributes the plan saw are still the module's."""
    modules, attrs = module._modules, module.__dict__
    try:
        for name, value, is_child in fixed:
            if (modules[name] if is_child else attrs[name]) is not value:
                return False
    except KeyError:
        return False
    return True


def fixed_objects(module: nn.Module, read_now=()) -> tuple:
    """(name, object, is a child) for every child and plain public attribute of ``module``
    but those in ``read_now`` (the plan reads them at each call): what the fused forward
    checks is unchanged."""
    fixed = [(name, child, True) for name, child in module._modules.items()]
    for name, value in module.__dict__.items():
        if not name.startswith("_") and name != "training" and name not in read_now:
            fixed.append((name, value, False))
    return tuple(fixed)


# --- what was computed from one tensor --------------------------------------------------------


def _version(x: torch.Tensor) -> int:
    """x's version counter, or -1 for an inference tensor (which has none)."""
    return -1 if x.is_inference() else x._version


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
