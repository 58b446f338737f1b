"""Launch configs of the Triton quantizers (``quant.py``), one per row length K."""
from __future__ import annotations

import dataclasses
import functools

import triton

# --- configs -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PerTokenConfig:
    """Launch shape of the per-token kernel for one K.

    Attributes
    ----------
    block_k : columns per tile (power of two).
    rows : rows per program (power of two); > 1 only for short rows.
    single_pass : the whole row fits in one tile, so x is read once and kept in
        registers; otherwise the kernel streams the row twice (amax, then quantize),
        the second read mostly hitting L2.
    num_warps : warps per program.
    """

    block_k: int
    rows: int
    single_pass: bool
    num_warps: int


# Rows up to 8192 columns stay in registers (one read of x), longer rows stream twice in
# 2048-wide tiles over 8 warps: past 8192 a one-tile row runs too few warps per element and
# the two-pass loop (its second read from L2) is faster. [evidence quant.per-token-config]
PER_TOKEN_MAX_SINGLE_PASS_K = 8192
# Tile width and warps of the two-pass loop.
PER_TOKEN_STREAM_BLOCK_K = 2048
PER_TOKEN_STREAM_WARPS = 8
# Elements per program aimed at for short rows (several rows per program), and
# values per thread aimed at: 32 (the optimum at K = 4096).
_TILE_ELEMS = 2048
_VALUES_PER_THREAD = 32


def warps_for(tile_elems: int) -> int:
    return max(1, min(16, tile_elems // (32 * _VALUES_PER_THREAD)))


@functools.lru_cache(maxsize=None)
def per_token_config(k: int) -> PerTokenConfig:
    """The per-token launch config for rows of ``k`` elements (the thresholds above).

    * k <= 8192: one tile holds the row (block_k = next power of two >= k, at least 16);
      short rows are packed several per program so a program handles ~2048 elements.
    * k > 8192: one row per program, streamed in 2048-wide tiles, twice (the second
      read mostly hits L2).
    """
    if k <= PER_TOKEN_MAX_SINGLE_PASS_K:
        block_k = max(16, triton.next_power_of_2(k))
        rows = max(1, _TILE_ELEMS // block_k)
        return PerTokenConfig(block_k, rows, True, warps_for(rows * block_k))
    return PerTokenConfig(PER_TOKEN_STREAM_BLOCK_K, 1, False, PER_TOKEN_STREAM_WARPS)


# The fused producer kernels (norm_quant.py, silu_quant.py) compute more per element than the
# quantizer (the norm or SiLU, two roundings, IEEE divisions), so their shapes are their own:
# * RMSNorm: K <= 8192 stays in registers (one row per program), 16 warps up to
#   FUSED_FEW_ROWS rows, 8 above; K up to FUSED_MAX_SINGLE_PASS_K up to FUSED_SINGLE_PASS_ROWS
#   rows in registers over 32 warps; otherwise the quantizer's two-pass loop.
# * SiLU-mul (op="silu_mul") keeps p of the whole row in registers (as DT) up to
#   FUSED_SILU_MAX_SINGLE_PASS_K columns at every M, so SiLU is computed once per element. Its
#   tiles take any multiple of a power of two: the row is held as BLOCK_K / CHUNK tensors of
#   CHUNK columns (CHUNK the largest power of two dividing BLOCK_K), so BLOCK_K is F rounded up
#   to FUSED_SILU_GRANULE (2048, or a smaller power of two down to FUSED_SILU_MIN_GRANULE where
#   that would mask more than FUSED_SILU_MAX_WASTE of the tile) instead of the next power of
#   two: F = 14336 is 7 chunks of 2048, 11008 is 11 of 1024. Its programs loop over rows,
#   FUSED_SILU_PROGRAMS_PER_SM per SM, loading the next row during this one; 16 warps at every M.
# [evidence quant.fused-config]
FUSED_FEW_ROWS = 264  # two programs per SM of an H100 (132 SMs)
FUSED_SINGLE_PASS_ROWS = 1024
FUSED_MAX_SINGLE_PASS_K = 16384
FUSED_SILU_MAX_SINGLE_PASS_K = 16384
FUSED_SILU_GRANULE = 2048
FUSED_SILU_MIN_GRANULE = 1024
FUSED_SILU_MAX_WASTE = 0.03
FUSED_SILU_FEW_ROWS_WARPS = 16
FUSED_SILU_WARPS = 16
FUSED_SILU_STREAM_BLOCK_K = 2048  # rows longer than FUSED_SILU_MAX_SINGLE_PASS_K (as the quantizer)
FUSED_SILU_STREAM_WARPS = 8
FUSED_SILU_PROGRAMS_PER_SM = 1


def silu_tile_width(k: int, granule: int = FUSED_SILU_GRANULE) -> int:
    """SiLU-mul's tile for rows of k columns: k rounded up to the largest power of two <= granule
    (down to FUSED_SILU_MIN_GRANULE) that masks at most FUSED_SILU_MAX_WASTE of the tile."""
    while True:
        block_k = -(-k // granule) * granule
        if granule <= FUSED_SILU_MIN_GRANULE or block_k - k <= FUSED_SILU_MAX_WASTE * block_k:
            return block_k
        granule //= 2


@functools.lru_cache(maxsize=None)
def fused_config(k: int, rows: int, op: str = "rms_norm") -> PerTokenConfig:
    """The launch config of the fused kernels (op: "rms_norm" or "silu_mul") for ``rows`` rows of
    ``k`` elements (the shapes above); rows shorter than 2048 are packed as the quantizer packs
    them (``per_token_config``)."""
    assert op in ("rms_norm", "silu_mul"), op
    if k < 2048:
        return per_token_config(k)
    if op == "silu_mul":
        warps = FUSED_SILU_FEW_ROWS_WARPS if rows <= FUSED_FEW_ROWS else FUSED_SILU_WARPS
        if k <= FUSED_SILU_MAX_SINGLE_PASS_K:
            return PerTokenConfig(silu_tile_width(k), 1, True, warps)
        return PerTokenConfig(FUSED_SILU_STREAM_BLOCK_K, 1, False, FUSED_SILU_STREAM_WARPS)
    block_k = triton.next_power_of_2(k)
    if k <= PER_TOKEN_MAX_SINGLE_PASS_K:
        return PerTokenConfig(block_k, 1, True, 16 if rows <= FUSED_FEW_ROWS else 8)
    if k <= FUSED_MAX_SINGLE_PASS_K and rows <= FUSED_SINGLE_PASS_ROWS:
        return PerTokenConfig(block_k, 1, True, 32)
    return per_token_config(k)


@dataclasses.dataclass(frozen=True)
class StaticConfig:
    """Launch shape of the static (per-tensor) kernel: a [rows, block_k] tile per program."""

    block_k: int
    rows: int
    num_warps: int


@functools.lru_cache(maxsize=None)
def static_config(k: int) -> StaticConfig:
    """Elementwise: ~4096 elements per program (16 per thread over 8 warps), rows packed when short."""
    block_k = max(16, min(1024, triton.next_power_of_2(k)))
    rows = max(1, 4096 // block_k)
    return StaticConfig(block_k, rows, warps_for(rows * block_k))
