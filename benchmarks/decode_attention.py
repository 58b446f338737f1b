"""Decode attention (one-token queries over a static KV cache): w8a8's split-KV Triton kernel
against SDPA as the Generator ran it before (queries packed per KV head, the whole static
cache read under a mask), and the kernel's launch settings.

    python -m benchmarks.decode_attention --out decode_attention_h100.json

Llama-3-8B heads (32 query heads, 8 KV heads, head dim 128, bf16). Each point: batch B, a
static cache of L positions of which n are filled. Timing: ``harness.time_graph``, one CUDA
graph of calls each on its own copy of the cache (copies to more than 2 x the 50 MB L2, so
every call reads HBM), median of REPEATS replays, per call. ``gbps``: the filled keys and
values (what must be read) over the time; ``pct_hbm``: that against HBM_GBPS.
"""
from __future__ import annotations

import argparse
import json

import torch

HBM_GBPS = 3000.0  # the H100's measured HBM read rate (docs/PERFORMANCE.md)
HEADS, KV_HEADS, DIM = 32, 8, 128
POINTS = [(b, n, length) for b in (1, 4, 16, 64) for n, length in ((200, 256), (2112, 2304), (8000, 8192))]
# (PROGRAMS_PER_SM, DECODE_BLOCK_N, DECODE_WARPS, DECODE_STAGES)
CONFIGS = [(2, 64, 4, 2), (4, 64, 4, 3), (2, 128, 4, 2), (2, 128, 8, 2), (4, 128, 2, 2), (1, 128, 8, 2)]
REPEATS = 15


def main(argv=None) -> int:
    from benchmarks.harness import environment, time_graph
    from w8a8.generation import kernels

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    dev = torch.device("cuda")
    defaults = (kernels.PROGRAMS_PER_SM, kernels.DECODE_BLOCK_N, kernels.DECODE_WARPS, kernels.DECODE_STAGES)
    rows = []
    for batch, n, length in POINTS:
        cache_bytes = 2 * batch * KV_HEADS * length * DIM * 2
        copies = max(1, min(16, -(-100_000_000 // cache_bytes)))
        caches = [(torch.randn(batch, KV_HEADS, length, DIM, device=dev, dtype=torch.bfloat16),
                   torch.randn(batch, KV_HEADS, length, DIM, device=dev, dtype=torch.bfloat16)) for _ in range(copies)]
        q = torch.randn(batch, 1, HEADS, DIM, device=dev, dtype=torch.bfloat16).transpose(1, 2)
        mask = (torch.arange(length, device=dev) < n)[None, None, None].expand(batch, 1, 1, length)
        filled = torch.tensor(n, device=dev)
        read_gb = 2 * batch * KV_HEADS * n * DIM * 2 / 1e9
        packed = q.reshape(batch, KV_HEADS, HEADS // KV_HEADS, DIM)
        impls = {"sdpa packed (masked, whole cache)": lambda i: torch.nn.functional.scaled_dot_product_attention(
            packed, *caches[i], attn_mask=mask)}
        for cfg in CONFIGS:
            def run(i, cfg=cfg):
                (kernels.PROGRAMS_PER_SM, kernels.DECODE_BLOCK_N, kernels.DECODE_WARPS,
                 kernels.DECODE_STAGES) = cfg
                return kernels.decode_attention(q, *caches[i], mask, filled)
            impls[f"w8a8 split-KV {cfg}" + (" (default)" if cfg == defaults else "")] = run
        for name, fn in impls.items():
            us = time_graph([lambda i=i, fn=fn: fn(i) for i in range(copies)], replays=REPEATS).us
            rows.append({"impl": name, "batch": batch, "filled": n, "cache_len": length, "us": round(us, 2),
                         "gbps": round(read_gb / us * 1e6, 1), "pct_hbm": round(read_gb / us * 1e8 / HBM_GBPS, 1)})
            print(f"B{batch:3d} n{n:5d}/{length:5d} {name:45s} {us:8.1f} us {rows[-1]['gbps']:7.0f} GB/s", flush=True)
        (kernels.PROGRAMS_PER_SM, kernels.DECODE_BLOCK_N, kernels.DECODE_WARPS, kernels.DECODE_STAGES) = defaults
        del caches
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"environment": environment(dev), "heads": HEADS, "kv_heads": KV_HEADS, "dim": DIM,
                       "configs": "(PROGRAMS_PER_SM, DECODE_BLOCK_N, DECODE_WARPS, DECODE_STAGES)",
                       "hbm_gbps": HBM_GBPS, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
