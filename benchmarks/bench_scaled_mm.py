"""Kernel-level benchmark: scaled_mm backends against bf16 F.linear and torch._int_mm, same run.

    python benchmarks/bench_scaled_mm.py --out results/scaled_mm_h100.json

Activations are already int8 here (the kernel alone); bench_linear.py times the
module end to end, activation quantization included.
"""
from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

import harness
import w8a8


def _parse_nk(text: str) -> list[tuple[int, int]]:
    return [tuple(int(v) for v in item.split("x")) for item in text.split(",")]


def bench_shape(m: int, n: int, k: int, impls: list[str], ceilings: dict, config_ids=(-1,)) -> list[dict]:
    dev = "cuda"
    n_sets = harness.rotation_count(2 * n * k)  # by the bf16 weights, the larger of the two
    w_bf16 = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) * k**-0.5 for _ in range(n_sets)]
    w_q = [torch.randint(-128, 128, (n, k), dtype=torch.int8, device=dev) for _ in range(n_sets)]
    w_s = [torch.rand(n, device=dev) * 1e-3 + 1e-4 for _ in range(n_sets)]
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    a_q = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=dev)
    a_s = torch.rand(m, 1, device=dev) * 1e-2 + 1e-3
    rows = []
    bf16 = harness.time_graph([lambda i=i: F.linear(x, w_bf16[i]) for i in range(n_sets)])
    rows.append(harness.gemm_row("bf16 F.linear", m, n, k, bf16, 2 * (m * k + n * k + m * n), ceilings, bf16.us,
                                 peak_key="bf16_flops"))
    int8_bytes = m * k + n * k + 2 * m * n + 4 * (m + n)
    if "int_mm" in impls and m > 16:
        t = harness.time_graph([lambda i=i: torch._int_mm(a_q, w_q[i].t()) for i in range(n_sets)])
        rows.append(harness.gemm_row("torch._int_mm (int32 out, no dequant)", m, n, k, t,
                                     m * k + n * k + 4 * m * n, ceilings, bf16.us))
    for backend in ("cutlass", "triton"):
        if backend not in impls:
            continue
        for cid in config_ids if backend == "cutlass" else (-1,):
            if cid == -1:
                fn = lambda i, b=backend: w8a8.scaled_mm(a_q, w_q[i], a_s, w_s[i], None, torch.bfloat16, backend=b)
                name = f"w8a8 {backend}"
            else:
                fn = lambda i, c=cid: torch.ops.w8a8.scaled_mm_cutlass(a_q, w_q[i], a_s, w_s[i], None, torch.bfloat16, c)
                name = f"w8a8 cutlass config {cid}"
            t = harness.time_graph([lambda i=i, f=fn: f(i) for i in range(n_sets)])
            rows.append(harness.gemm_row(name, m, n, k, t, int8_bytes, ceilings, bf16.us))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--shapes", type=_parse_nk, default=harness.DEFAULT_NK, help="NxK,NxK,...")
    p.add_argument("--m", type=lambda s: [int(v) for v in s.split(",")], default=harness.DEFAULT_M)
    p.add_argument("--backends", default="int_mm,cutlass,triton")
    p.add_argument("--config-ids", default="-1", help="CUTLASS configs to time (comma list; -1 = heuristic)")
    p.add_argument("--out", default=None, help="JSON result file")
    args = p.parse_args(argv)
    impls = args.backends.split(",")
    config_ids = [int(c) for c in args.config_ids.split(",")]
    ceilings = harness.measure_ceilings()
    print({k: f"{v:.3e}" for k, v in ceilings.items()}, flush=True)
    rows = []
    cases = [(m, n, k) for (n, k) in args.shapes for m in args.m]
    for m, n, k in tqdm(cases, desc="scaled_mm", file=sys.stdout, mininterval=5):
        rows += bench_shape(m, n, k, impls, ceilings, config_ids)
        torch.cuda.empty_cache()
    print(harness.markdown_table(rows))
    for impl in sorted({r["impl"] for r in rows} - {"bf16 F.linear"}):
        print(f"geomean x bf16, {impl}: {harness.geomean([r['x_bf16'] for r in rows if r['impl'] == impl]):.3f}")
    if args.out:
        harness.write_results(args.out, rows, ceilings, {"kind": "scaled_mm kernel"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
