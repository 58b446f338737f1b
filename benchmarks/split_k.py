"""Split-K / stream-K benchmark of the sm90 kernels: each K decomposition against the
data-parallel plan, on the small-M, long-K shapes where splitting matters.

Rows (int8 activations in, bf16 out, per-token x per-channel scales):
  * ``bf16 F.linear``              - the usual baseline, same run;
  * ``sm90 data-parallel``         - ``split_k=1``: the ladder's config, no split;
  * ``sm90 default``               - the heuristic (its plan in ``plan``);
  * ``sm90 stream-K``              - ``scheduler="stream_k"``;
  * ``sm90 split_k=S``             - S in SPLITS (where K has S tiles);
  * with ``sweep``: ``sm90 <config> split_k=S`` and stream-K for the two swap-AB tiles.
Each row carries ``x_dp`` (speed-up over the data-parallel row). ``split_k`` and ``scheduler``
are those of ``w8a8.ops.scaled_mm(..., backend="sm90")``; ``config`` (sweeps) that of the kernel
op ``w8a8::scaled_mm_sm90``.
"""
from __future__ import annotations

import torch

from w8a8 import dispatch
from benchmarks import harness, scaled_mm

# Decode and small-batch shapes of the Llama-3 8B/70B down and square projections, and two with few
# output tiles over a long K (a tensor-parallel shard, a narrow head), where a data-parallel grid
# leaves most SMs idle.
SHAPES = [(4096, 14336), (8192, 28672), (8192, 8192), (4096, 4096), (1024, 14336), (2048, 28672)]
M_VALUES = [1, 16, 32, 64, 128]
SPLITS = (2, 4, 8)
SWEEP_SPLITS = (2, 3, 4, 6, 8)


def _sweep_configs() -> list[str]:
    """The swap-AB tiles on the stream-K scheduler (the ones that can split K)."""
    return [c for c in dispatch.config_names("sm90") if c.startswith("swap_") and c.endswith("_streamk")]


def bench_shape(m: int, n: int, k: int, ceilings: dict, device="cuda", sweep: bool = False) -> list[dict]:
    ops = scaled_mm.operands(m, n, k, device)
    k_tiles = -(-k // 128)
    bf16, bf16_us = scaled_mm.bf16_row(ops, m, n, k, ceilings, device)
    rows = [bf16]

    def op(i, config="", split_k=None, scheduler="auto"):
        return torch.ops.w8a8.scaled_mm_sm90(ops.a_q, ops.w_q[i], ops.a_s, ops.w_s[i], None, torch.bfloat16,
                                             config, split_k, scheduler)

    variants = [("sm90 data-parallel", {"split_k": 1}), ("sm90 default", {}),
                ("sm90 stream-K", {"scheduler": "stream_k"})]
    variants += [(f"sm90 split_k={s}", {"split_k": s}) for s in SPLITS if s <= k_tiles]
    if sweep:
        variants += [(f"sm90 {c} split_k={s}", {"config": c, "split_k": s})
                     for c in _sweep_configs() for s in SWEEP_SPLITS if s <= k_tiles]
        variants += [(f"sm90 {c} stream-K", {"config": c, "scheduler": "stream_k"}) for c in _sweep_configs()]
    dp_us = None
    for name, kwargs in variants:
        t = harness.time_calls([lambda i=i, kw=kwargs: op(i, **kw) for i in range(ops.n_sets)], device)
        row = harness.gemm_row(name, m, n, k, t, ops.int8_bytes, ceilings, bf16_us)
        config, mode, splits = torch.ops.w8a8.scaled_mm_sm90_plan(
            m, n, k, kwargs.get("config", ""), kwargs.get("split_k"), kwargs.get("scheduler", "auto"))
        dp_us = dp_us or t.us  # the data-parallel row is timed first
        row.update(plan=f"{config} {mode} x{splits}", x_dp=round(dp_us / t.us, 3))
        rows.append(row)
    return rows
