"""Activation quantization benchmark: per-token (dynamic) quantization bandwidth against HBM.

    python benchmarks/bench_quant.py --out benchmarks/results/quant_h100.json

Bytes counted: x read once (bf16) + q written (int8) + scales written (fp32).
``--sweep`` also times every launch config candidate, to tune ``per_token_config``.
"""
from __future__ import annotations

import argparse
import sys

import torch

from w8a8.bench import harness
from w8a8.triton import quant


def candidates(k: int) -> list[quant.PerTokenConfig]:
    """The heuristic's pick first, then single-pass variants over warps and rows per program."""
    out = [quant.per_token_config(k)]
    block = max(16, 1 << (k - 1).bit_length())
    if block <= 16384:
        for rows in (1, 2, 4):
            for warps in (4, 8, 16, 32):
                cfg = quant.PerTokenConfig(block, rows, True, warps)
                if cfg not in out and block * rows // (32 * warps) >= 4 and block * rows // (32 * warps) <= 64:
                    out.append(cfg)
    for block_k in (512, 1024, 2048, 4096):  # the two-pass streaming path
        for rows in (1, 2, 4):
            for warps in (1, 2, 4, 8, 16):
                cfg = quant.PerTokenConfig(block_k, rows, False, warps)
                per_thread = block_k * rows // (32 * warps)
                if block_k < k and cfg not in out and 4 <= per_thread <= 64:
                    out.append(cfg)
    return out


def _cuda_quantizer_available() -> bool:
    from w8a8 import dispatch

    return dispatch.unavailable_reason("quantize_per_token", "cuda", torch.device("cuda")) is None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--m", default="1,16,128,2048,8192")
    p.add_argument("--k", default="4096,14336")
    p.add_argument("--sweep", action="store_true")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    ceilings = harness.measure_ceilings()
    rows = []
    for k in [int(v) for v in args.k.split(",")]:
        for m in [int(v) for v in args.m.split(",")]:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            q = torch.empty(m, k, dtype=torch.int8, device="cuda")
            s = torch.empty(m, 1, dtype=torch.float32, device="cuda")
            moved = 2 * m * k + m * k + 4 * m
            if _cuda_quantizer_available():
                t = harness.time_graph([lambda: torch.ops.w8a8.quantize_per_token_cuda(x)] * 8, replays=20)
                rows.append({"op": "quantize_per_token cuda", "M": m, "K": k, "config": "csrc/quantize/quantize.cu",
                             "heuristic": True, "us": round(t.us, 3), "gbps": round(moved / t.us / 1e3, 1),
                             "pct_hbm": round(100 * moved / (t.us * 1e-6) / ceilings["hbm_bytes_per_s"], 1)})
                r = rows[-1]
                print(f"M={m:5d} K={k:5d}   CUDA kernel: {r['us']:8.2f} us {r['gbps']:7.0f} GB/s "
                      f"{r['pct_hbm']:5.1f}% of HBM", flush=True)
            for i, cfg in enumerate(candidates(k) if args.sweep else candidates(k)[:1]):
                t = harness.time_graph([lambda c=cfg: quant.quantize_per_token_out(x, q, s, c)] * 8, replays=20)
                rows.append({"op": "quantize_per_token triton", "M": m, "K": k, "config": repr(cfg),
                             "heuristic": i == 0, "us": round(t.us, 3), "gbps": round(moved / t.us / 1e3, 1),
                             "pct_hbm": round(100 * moved / (t.us * 1e-6) / ceilings["hbm_bytes_per_s"], 1)})
                r = rows[-1]
                print(f"M={m:5d} K={k:5d} {'*' if i == 0 else ' '} {cfg}: {r['us']:8.2f} us "
                      f"{r['gbps']:7.0f} GB/s {r['pct_hbm']:5.1f}% of HBM", flush=True)
    if args.out:
        harness.write_results(args.out, rows, ceilings, {"kind": "activation quantization"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
