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


def empty(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype, device: torch.device,
          pad: bool | None = None) -> torch.Tensor:
    """``torch.empty(shape)`` whose storage holds ``padded_rows`` rows: a contiguous view of
    the first ``prod(shape[:-1])`` rows. ``pad`` None pads on a GPU only (the CPU kernels
    gain nothing from it)."""
    shape = tuple(shape)
    if pad is None:
        pad = torch.device(device).type == "cuda"
    m, width = (math.prod(shape[:-1]), shape[-1]) if shape else (1, 1)
    rows = padded_rows(m) if pad and shape else m
    if rows == m:
        return torch.empty(shape, dtype=dtype, device=device)
    return torch.empty(rows * width, dtype=dtype, device=device)[: m * width].view(shape)
