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
    gain nothing from it). The layout is planned once per (shape, pad); the storage comes
    from torch's direct allocator where it serves the device (``_allocate``, which
    ``empty_outputs`` shares)."""
    if not isinstance(shape, tuple):  # (torch.Size is one)
        shape = tuple(shape)
    if type(device) is not torch.device:
        device = torch.device(device)
    kind = device.type
    return _allocate((_plan(shape, kind == "cuda" if pad is None else pad), dtype, shape), device, kind)


def empty_outputs(shape: torch.Size, dtype: torch.dtype, n_float: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """A producer's outputs for an activation of ``shape`` and ``dtype``, uninitialized and
    contiguous: codes int8 ``shape`` and scales fp32 ``shape[:-1] + (1,)``, their storage padded
    as ``empty`` pads on ``device``, then ``n_float`` tensors of ``shape`` and ``dtype``
    (unpadded). ``empty`` of each, planned once per (shape, dtype, n_float, device type)."""
    kind = device.type
    return tuple(_allocate(layout, device, kind) for layout in _output_layouts(shape, dtype, n_float, kind == "cuda"))


@functools.lru_cache(maxsize=4096)
def _output_layouts(shape: tuple[int, ...], dtype: torch.dtype, n_float: int, pad: bool) -> tuple:
    """``empty_outputs``' tensors as ``_allocate`` takes them."""
    shape = tuple(shape)
    scales = (*shape[:-1], 1)
    return ((_plan(shape, pad), torch.int8, shape), (_plan(scales, pad), torch.float32, scales),
            *(((_plan(shape, False), dtype, shape),) * n_float))


def _allocate(layout: tuple, device: torch.device, kind: str) -> torch.Tensor:
    """The tensor of ``layout`` ((size, strides, view strides), dtype, shape) on ``device``: from
    torch's direct allocator where it serves the device (CUDA: the current device is
    ``device``), else ``torch.empty_strided``."""
    (size, strides, view), dtype, shape = layout
    direct = _DIRECT.get(kind)
    if direct is not None and (kind == "cpu" or device.index == torch.cuda.current_device()):
        t = direct(size, strides, dtype)
    else:
        t = torch.empty_strided(size, strides, dtype=dtype, device=device)
    return t if view is None else t.as_strided(shape, view)


@functools.lru_cache(maxsize=4096)
def _plan(shape: tuple[int, ...], pad: bool) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...] | None]:
    """``empty``'s layout for ``shape``: the allocation's size and strides, and the strides of
    the view of its first rows (None: the allocation is the tensor)."""
    shape = tuple(shape)
    strides = _strides(shape)
    m, width = (math.prod(shape[:-1]), shape[-1]) if shape else (1, 1)
    rows = padded_rows(m) if pad and shape else m
    if rows == m:
        return shape, strides, None
    return (rows * width,), (1,), strides


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
