"""Kernel timeline of W8A8Linear calls: where a layer's time goes between its two kernels.

    python -m benchmarks.timeline [--shapes 4096x4096,28672x4096] [--m 2048,8192] [--calls 4] [--out DIR]

For each shape and token count, one CUDA graph of ``--calls`` back-to-back ``W8A8Linear`` calls
(bf16 in, the device's default kernels), warmed up, then replayed once under ``torch.profiler``:
the CUDA kernels' start and end (CUPTI timestamps, us from the first kernel's start) in stream
order, with the gap to the kernel before (negative: it started, launched programmatically, while
the kernel before still ran; its blocks wait for that kernel's end before they read). Per layer
call after the first, the split of its time on the stream: how long the quantizer ran past the
end of the GEMM before it, and how long its GEMM ran past the quantizer's end; their sum is the
call's share of the stream. Needs a CUDA GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from benchmarks import harness

SHAPES = ((4096, 4096), (28672, 4096))
M_VALUES = (2048, 8192)


def is_quantizer(name: str) -> bool:
    # A CUTLASS GEMM's mangled name can hold "quantize" (its epilogue's types): not a quantizer.
    return "quantize" in name and "cutlass" not in name


def kernel_rows(events: list[tuple[str, float, float]]) -> list[dict]:
    """(name, start, end) in stream order -> rows: start and end from the first start, the
    duration, and the gap to the kernel before (None for the first)."""
    t0 = events[0][1] if events else 0.0
    rows, prev_end = [], None
    for name, start, end in events:
        rows.append({"kernel": "quantizer" if is_quantizer(name) else "gemm", "name": name,
                     "start_us": round(start - t0, 3), "end_us": round(end - t0, 3), "us": round(end - start, 3),
                     "gap_us": None if prev_end is None else round(start - prev_end, 3)})
        prev_end = end
    return rows


def layer_splits(rows: list[dict]) -> list[dict]:
    """Per quantizer that follows a GEMM and is followed by one: its time past the GEMM before
    (``quantizer_past_gemm_us``) and the next GEMM's time past its end (``gemm_past_quantizer_us``)."""
    out = []
    for before, quant, gemm in zip(rows, rows[1:], rows[2:]):
        if before["kernel"] == "gemm" and quant["kernel"] == "quantizer" and gemm["kernel"] == "gemm":
            past_gemm, past_quant = quant["end_us"] - before["end_us"], gemm["end_us"] - quant["end_us"]
            out.append({"quantizer_past_gemm_us": round(past_gemm, 3), "gemm_past_quantizer_us": round(past_quant, 3),
                        "call_us": round(past_gemm + past_quant, 3)})
    return out


def trace(n: int, k: int, m: int, calls: int) -> list[tuple[str, float, float]]:
    """The CUDA kernels of one replay of a graph of ``calls`` W8A8Linear calls, in stream order."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    import w8a8

    layer = w8a8.W8A8Linear.from_linear(torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16))
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    graph = harness.capture_graph(lambda: [layer(x) for _ in range(calls)], warmups=3)[0]
    graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA" and not e.name.startswith(("Memcpy", "Memset"))]
    return sorted(((e.name, float(e.time_range.start), float(e.time_range.end)) for e in kernels), key=lambda t: t[1])


def main(argv: list[str] | None = None) -> int:
    import torch

    p = argparse.ArgumentParser(prog="python -m benchmarks.timeline", description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", type=harness.parse_shapes, default=list(SHAPES),
                   help="NxK,... (default 4096x4096,28672x4096)")
    p.add_argument("--m", type=harness.parse_ints, default=list(M_VALUES), help="token counts (default 2048,8192)")
    p.add_argument("--calls", type=int, default=4, help="layer calls in the graph (default 4)")
    p.add_argument("--out", default=None, help="folder for timeline_<tag>.json")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks.timeline: needs a CUDA GPU (it reads the kernels' timestamps)")
    points = []
    for n, k in args.shapes:
        for m in args.m:
            rows = kernel_rows(trace(n, k, m, args.calls))
            splits = layer_splits(rows)
            points.append({"N": n, "K": k, "M": m, "kernels": rows, "calls": splits})
            print(f"--- N={n} K={k} M={m}")
            for r in rows:
                gap = "" if r["gap_us"] is None else f" gap {r['gap_us']:8.2f}"
                print(f"{r['start_us']:10.2f} {r['end_us']:10.2f} {r['kernel']:9s} {r['us']:8.2f} us{gap}")
            for s in splits:
                print(f"call: quantizer {s['quantizer_past_gemm_us']:.2f} us past the GEMM before, GEMM "
                      f"{s['gemm_past_quantizer_us']:.2f} past the quantizer: {s['call_us']:.2f} us")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, f"timeline_{harness.device_tag('cuda')}.json")
        with open(path, "w") as f:
            json.dump({"kind": "timeline", "environment": harness.environment("cuda"), "points": points}, f, indent=1)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
