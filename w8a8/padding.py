"""Activation rows padded to the sm90 GEMM's tile edge.

On the H100 the CUTLASS tiles run slower on a partly filled token tile than on a full
one: the TMA loads of the rows past M (filled with zeros) cost more than reading real
rows. 4096 x 14336 on the 64x64 tile takes 41.8 us at M = 65 and 26.8 us at M = 128;
the 128x128 pingpong tile on 28672 x 4096 80.5 us at M = 129 and 60.1 at 256
(``scaled_mm_steps_h100.json``). Memory-bound GEMMs cost about the same for any M up
to 256, so the padded problem is the faster one; up to 512 the padded problem runs tiles
that the unpadded one would run on a partial last tile (the sm90 ladder's rungs at 384
and 512).

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

# Token counts padded, and to what: 33..47 run the 64-token tiles faster on 48 rows than on
# their own (6144 x 4096: 12.1-12.6 us at 33..39 against 11.6-11.8 on 48 rows; 28672 x 4096
# 45.0-46.1 against 44.9-45.4; 4096 x 14336 22.6-23.8 against 22.1-22.3;
# scaled_mm_continuity_h100.json); the ladder's tile at 65..96 covers 96 tokens
# (64 per tile where N is past two waves of 64-row tiles), those at 97..128 64 or 128 per
# tile (cluster), those at 129..192 96 or 192, those at 193..256 128 or 256, those at
# 257..320 80 or 160 (320 in all), those at 321..384 96 or 192 (384 in all), those at 385..512
# 256 (128-token tiles in 2x1 clusters). The 320-row rung is a sixth less wgmma work than
# padding those rows to 384 (57344 x 8192: 220.4 against 337.6 us, H100,
# scaled_mm_rung384_h100.json). Past 512 the GEMM is compute-bound and padding would cost
# compute.
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
