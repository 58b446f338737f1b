"""The sm80 (mma.sync) CUTLASS kernels over M = 1..512, forced on this GPU.

On an H100 these rows time ``backend="sm80"`` (sm_90 SASS of the Ampere kernels):
they test the config ladder's continuity and give the kernels' rate on this board;
they are not A100 / L40 figures.

Rows (int8 activations in, bf16 out, per-token x per-channel scales, weights rotated
past L2 as in the other suites):
  * ``sm80``                    - the ladder's config (``config`` names it), every M;
    ``x_prev`` = time at M-1 / time at M (below 1 / JUMP_LIMIT is a step too large);
  * ``bf16 F.linear``           - the baseline, same run, at BF16_M;
  * with ``sweep``: ``sm80 <config>`` for every config, every M (to tune the ladder).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from w8a8 import dispatch
from benchmarks import harness

# Llama-3-8B projections: o (4096x4096), qkv (6144x4096), gate_up (28672x4096), down (4096x14336).
SHAPES = [(4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336)]
M_VALUES = list(range(1, 513))
BF16_M = (1, 16, 32, 64, 128, 256, 512)
# Continuity bar of the ladder: time(M) <= 1.3 x time(M - 1) for every M in 1..512.
JUMP_LIMIT = 1.3
PASSES = 3


def bench_shape(n: int, k: int, ms: list[int], ceilings: dict, device="cuda", sweep: bool = False) -> list[dict]:
    m_max = max(ms)
    n_sets = harness.rotation_count(n * k, device)
    w_q = [torch.randint(-128, 128, (n, k), dtype=torch.int8, device=device) for _ in range(n_sets)]
    w_s = [torch.rand(n, device=device) * 1e-3 + 1e-4 for _ in range(n_sets)]
    a_q = torch.randint(-128, 128, (m_max, k), dtype=torch.int8, device=device)
    a_s = torch.rand(m_max, 1, device=device) * 1e-2 + 1e-3
    rows = []
    bf16_us = {}
    bf16_sets = harness.rotation_count(2 * n * k, device)
    w_bf16 = [torch.randn(n, k, device=device, dtype=torch.bfloat16) * k**-0.5 for _ in range(bf16_sets)]
    x = torch.randn(m_max, k, device=device, dtype=torch.bfloat16)
    for m in (m for m in BF16_M if m in ms):
        t = harness.time_calls([lambda i=i: F.linear(x[:m], w_bf16[i]) for i in range(bf16_sets)], device)
        rows.append(harness.gemm_row("bf16 F.linear", m, n, k, t, 2 * (m * k + n * k + m * n), ceilings, t.us,
                                     peak_key="bf16_flops"))
        bf16_us[m] = t.us
    del w_bf16

    def op(m, i, config):
        return torch.ops.w8a8.scaled_mm_sm80(a_q[:m], w_q[i], a_s[:m], w_s[i], None, torch.bfloat16, config)

    for config in [""] + (list(dispatch.config_names("sm80")) if sweep else []):
        name = f"sm80 {config}" if config else "sm80"
        # PASSES sweeps over every M; each M keeps the median of its passes, so a
        # one-off slow graph (seen: single points 30% off their neighbours) is no step.
        timings = {m: [] for m in ms}
        for _ in range(PASSES):
            for m in sorted(ms):
                timings[m].append(harness.time_calls([lambda i=i: op(m, i, config) for i in range(n_sets)],
                                                     device, replays=10))
        prev = None
        for m in sorted(ms):
            t = sorted(timings[m], key=lambda x: x.us)[len(timings[m]) // 2]
            row = harness.gemm_row(name, m, n, k, t, m * k + n * k + 2 * m * n + 4 * (m + n), ceilings,
                                   bf16_us.get(m))
            row["config"] = config or str(torch.ops.w8a8.scaled_mm_sm80_plan(m, n, k))
            row["x_prev"] = round(prev / t.us, 3) if prev is not None and m - 1 in ms else None
            prev = t.us
            rows.append(row)
    return rows


def worst_jumps(rows: list[dict], impl: str = "sm80") -> list[dict]:
    """Per shape, the row with the smallest ``x_prev`` (the largest slowdown from M-1 to M)."""
    worst = {}
    for r in rows:
        if r["impl"] != impl or r.get("x_prev") is None:
            continue
        key = (r["N"], r["K"])
        if key not in worst or r["x_prev"] < worst[key]["x_prev"]:
            worst[key] = r
    return list(worst.values())
