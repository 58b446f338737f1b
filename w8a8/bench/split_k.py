"""Split-K / stream-K benchmark of the CUTLASS kernel: each K decomposition against the
data-parallel config, on the small-M, long-K shapes where splitting matters.

Rows (int8 activations in, bf16 out, per-token x per-channel scales):
  * ``bf16 F.linear``                        - the usual baseline, same run;
  * ``cutlass data-parallel``                - ``split_k=1``: the ladder's config, no split;
  * ``cutlass default``                      - ``split_k=None``: the heuristic (its plan in ``plan``);
  * ``cutlass stream-K``                     - ``scheduler="streamk"``;
  * ``cutlass split_k=S``                    - S in SPLITS (where K has S tiles);
  * with ``sweep``: ``cutlass config C split_k=S`` for the two swap-AB decode tiles, to
    tune the heuristic (docs/TUNING.md).
Each row carries ``x_dp`` (speed-up over the data-parallel row) and ``dp_tiles`` (output
tiles the data-parallel config launches; below the SM count, SMs idle without a split).
"""
from __future__ import annotations

import torch

import w8a8
from w8a8.bench import harness, scaled_mm

# The grid: decode and small-batch shapes of Llama-3 8B/70B down and square projections.
SHAPES = [(4096, 14336), (8192, 28672), (8192, 8192), (4096, 4096)]
M_VALUES = [1, 16, 32, 64, 128]
SPLITS = (2, 4, 8)
SWEEP_SPLITS = (2, 3, 4, 6, 8)
# Swap-AB tile configs (ids of csrc/scaled_mm_sm90_configs.cuh) the sweep splits: 128x16 and 128x64.
SWEEP_CONFIGS = {0: "swap128x16", 1: "swap128x64"}
# Output tile (rows of out along M, columns along N) of the configs the ladder picks at M <= 512.
_DP_TILE = {6: (16, 128), 7: (64, 128), 2: (64, 128), 3: (128, 128), 4: (128, 256)}


def dp_tiles(m: int, n: int, k: int) -> int | None:
    config = w8a8.cutlass_plan(m, n, k, split_k=1)[0]
    if config not in _DP_TILE:
        return None
    tm, tn = _DP_TILE[config]
    return -(-m // tm) * -(-n // tn)


def bench_shape(m: int, n: int, k: int, ceilings: dict, device="cuda", sweep: bool = False) -> list[dict]:
    ops = scaled_mm.operands(m, n, k, device)
    k_tiles = -(-k // 128)
    bf16, bf16_us = scaled_mm.bf16_row(ops, m, n, k, ceilings, device)
    rows = [bf16]

    def op(i, config_id=-1, split_k=None, scheduler="auto"):
        return torch.ops.w8a8.scaled_mm_cutlass(ops.a_q, ops.w_q[i], ops.a_s, ops.w_s[i], None, torch.bfloat16,
                                                config_id, split_k, scheduler)

    variants = [("cutlass data-parallel", {"split_k": 1}), ("cutlass default", {}),
                ("cutlass stream-K", {"scheduler": "streamk"})]
    variants += [(f"cutlass split_k={s}", {"split_k": s}) for s in SPLITS if s <= k_tiles]
    if sweep:
        variants += [(f"cutlass config {c} ({name}) split_k={s}", {"config_id": c, "split_k": s})
                     for c, name in SWEEP_CONFIGS.items() for s in SWEEP_SPLITS if s <= k_tiles]
        variants += [(f"cutlass config {c} ({name}) stream-K", {"config_id": c, "scheduler": "streamk"})
                     for c, name in SWEEP_CONFIGS.items()]
    tiles = dp_tiles(m, n, k)
    dp_us = None
    for name, kwargs in variants:
        t = harness.time_calls([lambda i=i, kw=kwargs: op(i, **kw) for i in range(ops.n_sets)], device)
        row = harness.gemm_row(name, m, n, k, t, ops.int8_bytes, ceilings, bf16_us)
        config, mode, splits = w8a8.cutlass_plan(m, n, k, kwargs.get("split_k"), kwargs.get("scheduler", "auto"),
                                                 kwargs.get("config_id", -1))
        dp_us = dp_us or t.us  # the data-parallel row is timed first
        row.update(plan=f"config {config} {mode} x{splits}", x_dp=round(dp_us / t.us, 3), dp_tiles=tiles)
        rows.append(row)
    return rows
