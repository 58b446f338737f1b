"""Decode-step and dispatch-overhead benchmark: the three inference patterns, bf16 vs W8A8.

    python benchmarks/bench_decode.py --out benchmarks/results/decode_h100.json

* host time per layer call at M = 1 (4096 x 4096): bf16 ``nn.Linear``, ``W8A8Linear``
  (the public op ``w8a8::linear``, which runs the single C++ op on sm90), the composed
  path (quantize and scaled_mm as separate kernels) and the kernel ops themselves. Measured as the wall
  time of issuing CALLS calls back to back behind a GPU sleep (so the GPU never
  drains the queue and the host alone sets the pace; CALLS x launches stays below the
  launch queue's depth), median of REPEATS.
* one decode step (batch 1) of w8a8.demo's stack at Llama-3-8B widths (4 blocks, hidden
  4096, ffn 14336; ~1.9 GB of bf16 weights, far beyond L2), bf16 vs W8A8, as
  eager (wall time per step, synchronised), torch.compile (default mode, wall time),
  torch.compile(mode="reduce-overhead") (wall time) and a manual CUDA graph (replay
  time from CUDA events).
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time

import torch
from torch import nn

import w8a8
from w8a8 import dispatch
from w8a8.bench import harness
from w8a8.demo import GPU_SIZE, TinyDecoder

CALLS = 200
REPEATS = 7
STEPS = 30


def host_us_per_call(fn) -> float:
    for _ in range(3):
        fn()
    samples = []
    for _ in range(REPEATS):
        torch.cuda.synchronize()
        torch.cuda._sleep(50_000_000)  # ~30 ms of GPU time: longer than the loop below
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        samples.append((time.perf_counter() - t0) / CALLS * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def wall_ms_per_step(fn) -> float:
    for _ in range(3):
        fn()
    samples = []
    for _ in range(STEPS):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def graph_ms_per_step(model, x) -> float:
    graph, _ = harness.capture_graph(lambda: model(x), warmups=2)
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(5):
        start.record()
        for _ in range(STEPS):
            graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / STEPS)
    return statistics.median(samples)


def host_rows() -> list[dict]:
    lin = nn.Linear(4096, 4096, bias=False, device="cuda", dtype=torch.bfloat16)
    layer = w8a8.W8A8Linear.from_linear(lin)
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    rows = []
    with torch.inference_mode():
        q, s = torch.ops.w8a8.quantize_per_token_cuda(x)
        ops = torch.ops.w8a8
        args = (x, layer.weight, layer.weight_scale, None, None, None)
        for name, fn in (("bf16 nn.Linear", lambda: lin(x)),
                         ("bf16 F.linear", lambda: torch.nn.functional.linear(x, lin.weight)),
                         ("W8A8Linear", lambda: layer(x)),
                         ("op linear", lambda: ops.linear(*args)),
                         ("composed (quantize + scaled_mm)", lambda: dispatch.linear_composed(*args)),
                         ("op linear_sm90", lambda: ops.linear_sm90(*args)),
                         ("op quantize_per_token_cuda", lambda: ops.quantize_per_token_cuda(x)),
                         ("op scaled_mm_sm90", lambda: ops.scaled_mm_sm90(q, layer.weight, s, layer.weight_scale,
                                                                          None, torch.bfloat16))):
            rows.append({"what": "host time per call", "impl": name, "M": 1, "N": 4096, "K": 4096,
                         "us": round(host_us_per_call(fn), 2)})
    base = rows[0]["us"]
    for r in rows:
        r["x_bf16_host"] = round(r["us"] / base, 2)
    return rows


def decode_rows() -> list[dict]:
    torch.manual_seed(0)
    model = TinyDecoder(GPU_SIZE).to("cuda", torch.bfloat16).eval()
    for p in model.parameters():
        if p.dim() == 2:
            nn.init.normal_(p, std=p.shape[1] ** -0.5)
    qmodel = copy.deepcopy(model)
    w8a8.quantize_model(qmodel, skip=("lm_head",), progress=False)
    x = torch.randn(1, GPU_SIZE.hidden, device="cuda", dtype=torch.bfloat16)
    rows = []
    with torch.inference_mode():
        for name, m in (("bf16", model), ("w8a8", qmodel)):
            torch._dynamo.reset()
            compiled = torch.compile(m, fullgraph=True)
            torch._dynamo.reset()
            reduce_overhead = torch.compile(m, mode="reduce-overhead", fullgraph=True)
            times = {
                "eager": wall_ms_per_step(lambda: m(x)),
                "compile": wall_ms_per_step(lambda: compiled(x)),
                "compile reduce-overhead": wall_ms_per_step(lambda: reduce_overhead(x)),
                "manual CUDA graph": graph_ms_per_step(m, x),
            }
            for pattern, ms in times.items():
                rows.append({"what": "decode step, batch 1", "impl": name, "pattern": pattern, "ms": round(ms, 4)})
    for r in rows:
        if r["impl"] == "w8a8":
            base = next(b["ms"] for b in rows if b["impl"] == "bf16" and b["pattern"] == r["pattern"])
            r["x_bf16"] = round(base / r["ms"], 3)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None, help="JSON path (CSV beside it)")
    args = p.parse_args(argv)
    rows = host_rows()
    for r in rows:
        print(f"host time per call, M=1 4096x4096: {r['impl']:30s} {r['us']:7.2f} us ({r['x_bf16_host']}x bf16)")
    drows = decode_rows()
    for r in drows:
        print(f"decode step (batch 1, {GPU_SIZE.layers} blocks): {r['impl']:5s} {r['pattern']:24s} {r['ms']:.3f} ms"
              + (f"  ({r['x_bf16']}x faster than bf16)" if "x_bf16" in r else ""))
    if args.out:
        harness.write_results(args.out, rows + drows, {}, {"kind": "decode", "size": vars(GPU_SIZE)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
