"""Loads the compiled extensions once and remembers why one is missing.

``w8a8._C`` holds the sm90 CUTLASS kernels and the CUDA quantizers;
``w8a8._C_sm80`` the sm80 (mma.sync) CUTLASS kernels for Ampere / Ada, which
an H100 can run too when asked (``backend="cutlass_sm80"``).
"""
from __future__ import annotations

import functools
import importlib


@functools.lru_cache(maxsize=None)
def load(module: str = "_C") -> tuple[bool, str]:
    """(loaded, reason). Importing ``w8a8.<module>`` registers its ops."""
    try:
        importlib.import_module(f"w8a8.{module}")
    except ImportError as exc:
        return False, f"w8a8.{module} is not built or failed to load ({exc})"
    return True, "loaded"


@functools.lru_cache(maxsize=None)
def cutlass_archs() -> tuple[int, ...]:
    """SM architectures (e.g. 90) that ``w8a8._C`` holds CUTLASS kernels for."""
    if not load()[0]:
        return ()
    import torch

    return tuple(int(a) for a in torch.ops.w8a8.cutlass_archs())


@functools.lru_cache(maxsize=None)
def cutlass_config_names() -> tuple[str, ...]:
    """The sm90 config table of ``w8a8._C``: entry i names config_id i (empty when not built)."""
    if not load("_C")[0]:
        return ()
    import torch

    return tuple(str(n) for n in torch.ops.w8a8.cutlass_config_names())


@functools.lru_cache(maxsize=None)
def cutlass_sm80_archs() -> tuple[int, ...]:
    """SM architectures that ``w8a8._C_sm80`` holds its mma.sync kernels for."""
    if not load("_C_sm80")[0]:
        return ()
    import torch

    return tuple(int(a) for a in torch.ops.w8a8.cutlass_sm80_archs())


@functools.lru_cache(maxsize=None)
def cutlass_sm80_config_names() -> tuple[str, ...]:
    """The sm80 config table of ``w8a8._C_sm80``: entry i names config_id i (empty when not built)."""
    if not load("_C_sm80")[0]:
        return ()
    import torch

    return tuple(str(n) for n in torch.ops.w8a8.cutlass_sm80_config_names())
