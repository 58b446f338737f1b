"""Loads the compiled extension ``w8a8._C`` once and remembers why it is missing."""
from __future__ import annotations

import functools
import importlib


@functools.lru_cache(maxsize=None)
def load() -> tuple[bool, str]:
    """(loaded, reason). Importing ``w8a8._C`` registers the CUTLASS ops."""
    try:
        importlib.import_module("w8a8._C")
    except ImportError as exc:
        return False, f"w8a8._C is not built or failed to load ({exc})"
    return True, "loaded"


@functools.lru_cache(maxsize=None)
def cutlass_archs() -> tuple[int, ...]:
    """SM architectures (e.g. 90) that the extension holds CUTLASS kernels for."""
    loaded, _ = load()
    if not loaded:
        return ()
    import torch

    return tuple(int(a) for a in torch.ops.w8a8.cutlass_archs())
