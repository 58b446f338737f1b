"""Activation rows padded to the sm90 GEMM's tile edge: the producers' side.

The rule (which token counts run as how many rows, and why) is stated once, in C++
(``csrc/common/padded_rows.h``), where the sm90 GEMM and the single op use it;
``padded_rows`` asks it. The package's activation producers on such a GPU (the Triton
quantizers and fused norm / SiLU-mul quantizers here, the CUDA quantizers in C++) allocate
their codes and scales with ``padded_rows(M)`` rows and return views of the first M; the
sm90 GEMM runs on the padded rows where the operands' storage holds them.
"""
from __future__ import annotations

import functools
import math

import torch


@functools.lru_cache(maxsize=4096)
def padded_rows(m: int) -> int:
    """The rows the producers allocate for ``m`` tokens on an sm90 GPU (``m`` where the sm90
    kernels are not built: nothing reads the pad rows there)."""
    from w8a8 import dispatch

    return int(torch.ops.w8a8.padded_rows(m)) if dispatch.load("_C")[0] else m


def empty(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype, device: torch.device | str,
          pad: bool | None = None) -> torch.Tensor:
    """``torch.empty(shape)`` whose storage holds ``padded_rows`` rows: a contiguous view of
    the first ``prod(shape[:-1])`` rows. ``pad`` None pads on a GPU only (the CPU kernels
    gain nothing from it). The producers' outputs are allocated here, each call on their host
    path (``_allocate``)."""
    shape = tuple(shape)
    if not isinstance(device, torch.device):
        device = torch.device(device)
    kind = device.type
    if pad is None:
        pad = kind == "cuda"
    m, width = (math.prod(shape[:-1]), shape[-1]) if shape else (1, 1)
    rows = padded_rows(m) if pad and shape else m
    if rows == m:
        return _allocate(shape, _strides(shape), dtype, device, kind)
    return _allocate((rows * width,), (1,), dtype, device, kind).as_strided(shape, _strides(shape))


@functools.lru_cache(maxsize=4096)
def _strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A contiguous tensor's strides for ``shape``."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _allocator(kind: str):
    """torch's allocation without the Python argument parsing of ``torch.empty`` (what
    Inductor's generated code calls: about 1 us against 4 on a CPU core), or None."""
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    return getattr(guards, f"_empty_strided_{kind}", None)


# The direct allocators: the CPU's, and CUDA's, which allocates on the *current* device.
_DIRECT = {"cpu": _allocator("cpu"), "cuda": _allocator("cuda")}


def _allocate(shape: tuple[int, ...], strides: tuple[int, ...], dtype: torch.dtype, device: torch.device,
              kind: str) -> torch.Tensor:
    """An uninitialized tensor of these shape and strides on ``device`` (of type ``kind``): through
    the direct allocator where it serves the device (CUDA: the current device is ``device``),
    else ``torch.empty_strided``."""
    direct = _DIRECT.get(kind)
    if direct is not None and (kind == "cpu" or device.index == torch.cuda.current_device()):
        return direct(shape, strides, dtype)
    return torch.empty_strided(shape, strides, dtype=dtype, device=device)
