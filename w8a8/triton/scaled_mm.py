"""Triton int8 x int8 scaled matmul: ``out = a_scale * (b_scale^T * fp32(a @ b^T)) + bias``.

The math is ``reference.scaled_mm``:

    acc = a @ b^T                                  int8 x int8 -> int32, exact
    out = a_scale * (b_scale * fp32(acc)) + bias   fp32, in this order, one rounding to out_dtype

The epilogue is computed with exactly these fp32 operations and the kernel is
compiled with ``enable_fp_fusion=False``, so ``a_scale * t + bias`` is not
contracted into an FMA: the fp32 value equals the reference's bit for bit and the
only rounding left is the final conversion (round to nearest even on GPU).

Layout: a [M, K] and b [N, K] are both K-major (the nn.Linear weight layout), which
is what Hopper's int8 wgmma wants for both operands. Tiles of b are loaded as
[BLOCK_N, BLOCK_K] and fed to ``tl.dot`` through ``tl.trans`` (a view, no shuffle).

Any M, N, K works (rows past M / columns past N are wrapped for the loads and
masked for the store; K is masked unless K % BLOCK_K == 0). Speed needs K and the
row strides to be multiples of 16: only then can Triton use 16-byte cp.async copies
and pipeline the K loop; otherwise the kernel is correct but unpipelined.

Configs are chosen by a heuristic on M (plus one rule on N for small M, below);
there is no autotuning, so a launch never benchmarks and is safe to capture in a
CUDA graph.
"""
from __future__ import annotations

import dataclasses
import functools

import torch
import triton
import triton.language as tl

from w8a8.triton._launch import cdiv, launch

# --- configs -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ScaledMMConfig:
    """One tile config of the scaled-mm kernel and the M range it serves.

    Attributes
    ----------
    name : short label for logs and benchmarks.
    max_m : serves M <= max_m (and M > the previous row's max_m).
    block_m, block_n, block_k : tile sizes (int8 elements).
    group_m : tiles of this many M-blocks are swept along N together (L2 reuse of b).
    num_warps, num_stages : Triton launch parameters (stages of the K pipeline).
    min_block_n : block_n may be halved down to this when the grid would not fill
        the GPU's SMs (see ``select_config``); equal to block_n to disable.
    why : the reason for this row.
    """

    name: str
    max_m: int
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int
    min_block_n: int
    why: str

    @property
    def smem_bytes(self) -> int:
        """Shared memory of the operand pipeline, num_stages x (a tile + b tile) of int8: an
        upper bound (Triton keeps num_stages - 1 buffers on the mma.sync path)."""
        return self.num_stages * (self.block_m + self.block_n) * self.block_k


# Starting points from the usual H100 int8 shapes, not set by a sweep: each row's `why` states
# its rule. [evidence triton.scaled-mm-configs] H100: 132 SMs, 227 KiB of shared memory per
# block; every row stays <= 144 KiB. Compiled offline for sm_90 with Triton 3.6, no row spills
# registers (48 to 200 per thread); the smem figures below are what Triton allocated.
SCALED_MM_CONFIGS: tuple[ScaledMMConfig, ...] = (
    ScaledMMConfig(
        name="decode", max_m=16, block_m=16, block_n=64, block_k=256, group_m=1,
        num_warps=4, num_stages=5, min_block_n=32,
        why="M <= 16: bound by reading b once; one 16-row tile covers M (mma.sync, no padding "
        "rows) and a 256-deep K step keeps many bytes of b in flight per SM. 80 KiB smem.",
    ),
    ScaledMMConfig(
        name="small", max_m=64, block_m=64, block_n=64, block_k=256, group_m=1,
        num_warps=4, num_stages=4, min_block_n=32,
        why="16 < M <= 64: bound by reading b; one 64-row wgmma tile covers M, narrow N tiles "
        "give N / 64 CTAs (N / 32 when that is short of the SM count). 128 KiB smem.",
    ),
    ScaledMMConfig(
        name="medium", max_m=128, block_m=64, block_n=128, block_k=128, group_m=1,
        num_warps=4, num_stages=5, min_block_n=64,
        why="64 < M <= 128: two 64-row M tiles, one wave at N = 4096, so each b tile comes "
        "from HBM once and from L2 for the other M tile. 120 KiB smem.",
    ),
    ScaledMMConfig(
        name="large", max_m=256, block_m=128, block_n=128, block_k=128, group_m=8,
        num_warps=8, num_stages=4, min_block_n=64,
        why="128 < M <= 256: compute starts to matter; 128x128 over two wgmma warpgroups "
        "(64 accumulator registers per thread). 128 KiB smem.",
    ),
    ScaledMMConfig(
        name="xlarge", max_m=1024, block_m=128, block_n=128, block_k=128, group_m=8,
        num_warps=8, num_stages=4, min_block_n=128,
        why="256 < M <= 1024: compute-bound; 128x128 keeps >= 1 tile per SM at N = 4096, "
        "M = 512, where 128x256 would leave half the SMs idle. 128 KiB smem.",
    ),
    ScaledMMConfig(
        name="prefill", max_m=1 << 62, block_m=128, block_n=256, block_k=128, group_m=8,
        num_warps=8, num_stages=3, min_block_n=256,
        why="M > 1024: compute-bound with many tiles; 128x256 loads a quarter less operand data "
        "per MAC than 128x128 (200 registers, no spills). 3 stages = 144 KiB smem.",
    ),
)

# Used where there is no CUDA device to ask (Triton's interpreter): the H100 count.
_DEFAULT_NUM_SMS = 132


@functools.lru_cache(maxsize=None)
def _num_sms(device_index: int | None) -> int:
    if device_index is None or not torch.cuda.is_available():
        return _DEFAULT_NUM_SMS
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def select_config(m: int, n: int, num_sms: int = _DEFAULT_NUM_SMS) -> ScaledMMConfig:
    """The config for an [m, k] x [n, k]^T problem: the first row with m <= max_m.

    For the small-M rows (memory bound: the time is reading b once), a grid of
    fewer tiles than SMs leaves bandwidth unused, e.g. M = 8, N = 4096 with
    BLOCK_N 64 is 64 CTAs on 132 SMs. So block_n is halved, down to the row's
    min_block_n, while the grid has fewer tiles than SMs.
    """
    cfg = next(c for c in SCALED_MM_CONFIGS if m <= c.max_m)
    block_n = cfg.block_n
    while block_n > cfg.min_block_n and cdiv(m, cfg.block_m) * cdiv(n, block_n) < num_sms:
        block_n //= 2
    if block_n != cfg.block_n:
        cfg = dataclasses.replace(cfg, block_n=block_n)
    return cfg


# --- kernel --------------------------------------------------------------------------------


@triton.jit
def _scaled_mm_kernel(
    a_ptr,  # [M, K] int8, row stride stride_am, unit column stride
    b_ptr,  # [N, K] int8, row stride stride_bn, unit column stride
    a_scale_ptr,  # [M] (stride stride_as) or one element, fp32
    b_scale_ptr,  # [N] (stride stride_bs) or one element, fp32
    bias_ptr,  # [N] (stride stride_bias) fp32/fp16/bf16; unused unless HAS_BIAS
    c_ptr,  # [M, N] bf16/fp16, row stride stride_cm, unit column stride
    M,
    N,
    K,
    stride_am,
    stride_bn,
    stride_cm,
    stride_as,
    stride_bs,
    stride_bias,
    A_SCALE_PER_ROW: tl.constexpr,
    B_SCALE_PER_COL: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    EVEN_K: tl.constexpr,  # K % BLOCK_K == 0: the K loop needs no mask
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # Grouped order: GROUP_M consecutive M-blocks walk N together, so the b tiles
    # they share are read from HBM once and from L2 after.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = GROUP_M * tiles_n
    first_m = (pid // tiles_per_group) * GROUP_M
    group_size = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % tiles_per_group) % group_size
    pid_n = (pid % tiles_per_group) // group_size

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Rows past M (columns past N) wrap onto valid ones: the loads need no mask and
    # those rows (columns) are never stored.
    rows_a = (offs_m % M).to(tl.int64)
    rows_b = (offs_n % N).to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows_a[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + rows_b[:, None] * stride_bn + offs_k[None, :]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_mask = offs_k[None, :] < K - k0
            a = tl.load(a_ptrs, mask=k_mask, other=0)
            b = tl.load(b_ptrs, mask=k_mask, other=0)
        acc = tl.dot(a, tl.trans(b), acc, out_dtype=tl.int32)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K

    # Epilogue, fp32, in the reference's order: a_scale * (b_scale * acc) + bias.
    t = acc.to(tl.float32)
    if B_SCALE_PER_COL:
        t = tl.load(b_scale_ptr + rows_b * stride_bs).to(tl.float32)[None, :] * t
    else:
        t = tl.load(b_scale_ptr).to(tl.float32) * t
    if A_SCALE_PER_ROW:
        t = tl.load(a_scale_ptr + rows_a * stride_as).to(tl.float32)[:, None] * t
    else:
        t = tl.load(a_scale_ptr).to(tl.float32) * t
    if HAS_BIAS:
        t = t + tl.load(bias_ptr + rows_b * stride_bias).to(tl.float32)[None, :]

    c_ptrs = c_ptr + offs_m.to(tl.int64)[:, None] * stride_cm + offs_n[None, :]
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, t.to(c_ptr.dtype.element_ty), mask=c_mask)


# --- host wrappers -------------------------------------------------------------------------

_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# Compile options of every launch: no FMA contraction, so a_scale * t + bias rounds twice,
# as the reference does (the tests compile with these and check the PTX has no fma).
KERNEL_OPTIONS = {"enable_fp_fusion": False}


def scaled_mm_out(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    config: ScaledMMConfig | None = None,
) -> None:
    """``scaled_mm`` into a preallocated ``out`` [M, N] (unit column stride, any row stride).

    ``config`` overrides ``select_config`` (the tests run every table row this way).
    """
    m, k = a.shape
    n, kb = b.shape
    assert kb == k, f"w8a8 triton scaled_mm: a is [{m}, {k}] but b is [{n}, {kb}]"
    assert a.dtype == torch.int8 and b.dtype == torch.int8, f"w8a8 triton scaled_mm: {a.dtype}, {b.dtype}"
    assert k <= 1 or (a.stride(1) == 1 and b.stride(1) == 1), "w8a8 triton scaled_mm: a, b: K-contiguous"
    assert a_scale.numel() in (1, m) and b_scale.numel() in (1, n), "w8a8 triton scaled_mm: scale sizes"
    assert bias is None or bias.numel() == n, "w8a8 triton scaled_mm: bias must have N elements"
    assert out.dtype in _OUT_DTYPES and out.shape == (m, n) and (n <= 1 or out.stride(1) == 1)
    if m == 0 or n == 0:
        return
    # [M, 1] / [1, N] scales are views of one strided vector; reshape copies only if they are not.
    sa = a_scale.reshape(-1)
    sb = b_scale.reshape(-1)
    bias_v = bias.reshape(-1) if bias is not None else sb
    cfg = config or select_config(m, n, _num_sms(a.device.index if a.device.type == "cuda" else None))
    grid = (cdiv(m, cfg.block_m) * cdiv(n, cfg.block_n),)
    launch(a, _scaled_mm_kernel, grid,
           a, b, sa, sb, bias_v, out,
           m, n, k,
           a.stride(0), b.stride(0), out.stride(0), sa.stride(0), sb.stride(0), bias_v.stride(0),
           A_SCALE_PER_ROW=sa.numel() != 1,
           B_SCALE_PER_COL=sb.numel() != 1,
           HAS_BIAS=bias is not None,
           EVEN_K=k % cfg.block_k == 0,
           BLOCK_M=cfg.block_m,
           BLOCK_N=cfg.block_n,
           BLOCK_K=cfg.block_k,
           GROUP_M=cfg.group_m,
           num_warps=cfg.num_warps,
           num_stages=cfg.num_stages,
           **KERNEL_OPTIONS)


def scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """Scaled int8 matmul, equal to ``reference.scaled_mm`` (bit-exact fp32 epilogue).

    Parameters
    ----------
    a : [M, K] int8, activations; unit column stride, any row stride.
    b : [N, K] int8, weight (nn.Linear layout); unit column stride, any row stride.
    a_scale : fp32, M elements (per token, e.g. [M, 1]) or one element (per tensor).
    b_scale : fp32, N elements (per channel, e.g. [N] or [N, 1]) or one element.
    bias : None or [N] fp32 / fp16 / bf16.
    out_dtype : torch.bfloat16, torch.float16 or torch.float32.

    Returns
    -------
    out : [M, N] out_dtype, row-major. M = 0 (or N = 0) returns it empty, no launch.
    """
    assert out_dtype in _OUT_DTYPES, f"w8a8 triton scaled_mm: out_dtype must be bf16/fp16/fp32, got {out_dtype}"
    out = torch.empty((a.shape[0], b.shape[0]), dtype=out_dtype, device=a.device)
    scaled_mm_out(a, b, a_scale, b_scale, bias, out)
    return out
