"""End-to-end benchmark: W8A8Linear (bf16 in, dynamic per-token quantization, bf16 out) vs bf16 F.linear.

    python benchmarks/bench_linear.py --out results/linear_h100.json
"""
from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

import harness
import w8a8
from bench_scaled_mm import _parse_nk


def bench_shape(m: int, n: int, k: int, backends: list[str], ceilings: dict) -> list[dict]:
    dev = "cuda"
    n_sets = harness.rotation_count(2 * n * k)
    linears = [torch.nn.Linear(k, n, bias=False, device=dev, dtype=torch.bfloat16) for _ in range(n_sets)]
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    rows = []
    bf16 = harness.time_graph([lambda l=l: F.linear(x, l.weight) for l in linears])
    rows.append(harness.gemm_row("bf16 F.linear", m, n, k, bf16, 2 * (m * k + n * k + m * n), ceilings, bf16.us,
                                 peak_key="bf16_flops"))
    # Bytes of the fused path: read x (bf16), write+read q (int8) and scales, read W, write out.
    bytes_e2e = 2 * m * k + 2 * m * k + n * k + 2 * m * n
    for backend in backends:
        layers = [w8a8.W8A8Linear.from_linear(l, backend=backend) for l in linears]
        t = harness.time_graph([lambda q=q: q(x) for q in layers])
        rows.append(harness.gemm_row(f"W8A8Linear {backend}", m, n, k, t, bytes_e2e, ceilings, bf16.us))
        del layers
    del linears
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--shapes", type=_parse_nk, default=harness.DEFAULT_NK, help="NxK,NxK,...")
    p.add_argument("--m", type=lambda s: [int(v) for v in s.split(",")], default=harness.DEFAULT_M)
    p.add_argument("--backends", default="cutlass,triton")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    ceilings = harness.measure_ceilings()
    rows = []
    cases = [(m, n, k) for (n, k) in args.shapes for m in args.m]
    for m, n, k in tqdm(cases, desc="W8A8Linear", file=sys.stdout, mininterval=5):
        rows += bench_shape(m, n, k, args.backends.split(","), ceilings)
        torch.cuda.empty_cache()
    print(harness.markdown_table(rows))
    for impl in sorted({r["impl"] for r in rows} - {"bf16 F.linear"}):
        vals = [r["x_bf16"] for r in rows if r["impl"] == impl]
        print(f"{impl}: geomean x bf16 {harness.geomean(vals):.3f}, min {min(vals):.3f}")
    if args.out:
        harness.write_results(args.out, rows, ceilings, {"kind": "W8A8Linear end to end"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
