"""Activation rows padded to the sm90 GEMM's tile edge.

The CUTLASS tiles run slower on a partly filled token tile than on a full one: the TMA
loads of the rows past M (filled with zeros) cost more than reading real rows, while a
memory-bound GEMM costs about the same for any M up to the tile edge: the padded
problem is the faster one [evidence padding.rows].

So the package's activation producers on a GPU (the quantizers and the fused
norm / SiLU·mul quantizers) allocate their codes and scales with ``padded_rows(M)``
rows and return views of the first M; the pad rows are never written. When the sm90
GEMM gets operands whose storage holds those rows, it runs on the padded rows and
returns the first M rows of its output (``widened``). Output row m depends only on
row m of the codes and of the scales, so the values in the pad rows (uninitialized)
reach only output rows that are dropped. Operands without the room (any tensor not
made by a producer here) run as given.
"""
from __future__ import annotations

import math

import torch

# Token counts padded, and to what: the sm90 ladder's rungs (scaled_mm_sm90_configs.cuh), whose
# tiles cover 96, 128, 192, 256, 320, 384 or 512 tokens; and 33..47 to 48, which the 64-token
# tiles run faster than those rows alone (the cause is not understood). Past 512 the GEMM is
# compute-bound and padding would cost compute. [evidence padding.rows]
_PADDED = ((32, 48), (64, 96), (96, 128), (128, 192), (192, 256), (256, 320), (320, 384), (384, 512))


def padded_rows(m: int) -> int:
    """The rows the producers allocate for ``m`` tokens: 33..47 -> 48, 65..96 -> 96, 97..128 -> 128,
    129..192 -> 192, 193..256 -> 256, 257..320 -> 320, 321..384 -> 384, 385..512 -> 512, otherwise
    ``m``."""
    for low, high in _PADDED:
        if low < m <= high:
            return high
    return m


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


def widened(t: torch.Tensor, rows: int) -> torch.Tensor | None:
    """``t`` (2-D, [M, C]) seen with ``rows`` rows, same strides, where its storage holds
    them; None where it does not."""
    if t.dim() != 2 or rows <= t.shape[0] or t.shape[1] == 0:
        return None
    last = t.storage_offset() + (rows - 1) * t.stride(0) + (t.shape[1] - 1) * t.stride(1)
    if (last + 1) * t.element_size() > t.untyped_storage().nbytes():
        return None
    return t.as_strided((rows, t.shape[1]), t.stride(), t.storage_offset())


def padded_operands(a: torch.Tensor, a_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(a, a_scale) widened to ``padded_rows(M)`` rows, or None where M needs no padding or
    either storage lacks the room. A single scale (static quantization) stays as it is."""
    rows = padded_rows(a.shape[0])
    if rows == a.shape[0]:
        return None
    wide_a = widened(a, rows)
    if wide_a is None:
        return None
    if a_scale.numel() == 1:
        return wide_a, a_scale
    wide_scale = widened(a_scale.reshape(a.shape[0], -1) if a_scale.dim() != 2 else a_scale, rows)
    return None if wide_scale is None else (wide_a, wide_scale)
