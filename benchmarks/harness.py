"""Shared benchmark harness: the grid, ceilings, CUDA-graph timing with rotated weights, result files.

Used by every suite of ``python -m benchmarks``. On a CPU device (the CI smoke test)
the same code runs with wall-clock timing and no ceilings; those numbers mean nothing
beyond "the harness works".

Method (docs/PERFORMANCE.md says the same):
  * every case is timed as CUDA-graph replays: one graph holds one call per weight
    set, the weight sets rotate so that their total exceeds 3x L2 (nothing is
    served from cache that would not be in a real model), the median over replays
    is divided by the calls per replay;
  * one warm-up call outside timing; random data (never zeros: zeros run ~25% faster);
  * the implementations of one case are captured first and their replays interleaved;
  * the ceilings (HBM bandwidth, bf16 and int8 dense GEMM rates) are measured in the same run.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import time
from typing import Callable

import torch

# Llama-3-8B: qkv, o, gate_up, down; Llama-3-70B: qkv, o, gate_up, down.
DEFAULT_NK = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),
              (10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672)]
DEFAULT_M = [1, 16, 64, 128, 512, 2048, 8192]
# The kernel suite's int8 activations: uniform random codes, or the per-token quantizer's codes
# of a bf16 randn x (what W8A8Linear runs the kernel on).
ACTIVATIONS = ("uniform", "quantized")


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """``NxK,NxK,...`` (argparse type)."""
    try:
        return [tuple(int(v) for v in item.split("x")) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NxK[,NxK...], got {text!r}") from None


def parse_ints(text: str) -> list[int]:
    """Comma-separated integers; an item ``A..B`` stands for A, A + 1, ..., B (argparse type)."""
    out: list[int] = []
    try:
        for item in text.split(","):
            low, sep, high = item.partition("..")
            out.extend(range(int(low), int(high) + 1) if sep else [int(item)])
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers or A..B ranges, got {text!r}") from None
    return out


def device_tag(device) -> str:
    """The result files' default tag: h100 / h200 / a100 / l40 / l4 / gpu from the device name, cpu without one."""
    device = torch.device(device)
    if device.type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(device).lower()
    return next((t for t in ("h200", "h100", "a100", "l40", "l4") if t in name), "gpu")


@dataclasses.dataclass(frozen=True)
class Timing:
    us: float          # median per call
    spread: float      # (p90 - p10) / median over replays


def l2_bytes(device) -> int:
    if torch.device(device).type != "cuda":
        return 0
    props = torch.cuda.get_device_properties(device)
    return getattr(props, "L2_cache_size", 50 * 2**20)


def rotation_count(bytes_per_set: int, device="cuda", cap: int = 64) -> int:
    """Weight sets needed so that one pass touches more than 3x L2 (1 on the CPU)."""
    return max(1, min(cap, math.ceil(3 * l2_bytes(device) / max(bytes_per_set, 1)) + 1))


def time_calls(calls: list[Callable[[], object]], device, replays: int = 20) -> Timing:
    """CUDA-graph timing on a GPU; on the CPU, the median wall time per call after one warm-up."""
    if torch.device(device).type == "cuda":
        return time_graph(calls, replays)
    for fn in calls:
        fn()
    times = []
    for _ in range(max(3, replays // 4)):
        t0 = time.perf_counter()
        for fn in calls:
            fn()
        times.append((time.perf_counter() - t0) * 1e6 / len(calls))
    times.sort()
    med = statistics.median(times)
    return Timing(med, (times[-1] - times[0]) / med)


def capture_graph(fn: Callable[[], object], warmups: int = 1, stream=None, pool=None):
    """``(graph, out)``: ``fn()`` run ``warmups`` times on a side stream (kernels loaded,
    allocator settled), then captured into a CUDA graph (on ``stream`` / ``pool`` if
    given); ``out`` is what the captured call returned, refreshed by each replay."""
    side = stream or torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, stream=stream):
        out = fn()
    return graph, out


# GPU clock cycles of spinning ahead of each timed replay (~0.5 ms at the H100's clocks).
HOST_COVER_CYCLES = 1_000_000
# A graph's replay costs about 2.5 us beyond its kernels (H100), charged to its calls: a timed
# graph repeats the pass over the weight sets until it holds MIN_CALLS calls or lasts
# MIN_REPLAY_US. With one call per set (2-6 calls for the Llama-3 shapes) that overhead had
# added 0.4-1.3 us per call, 1-3.5% of the ratio to bf16 at M = 16..128.
MIN_CALLS = 20
MIN_REPLAY_US = 250.0


def _graph_of_passes(calls: list[Callable[[], object]]):
    """``(graph, calls in it)``: the pass over ``calls`` captured, then, if one replay of it is
    shorter than MIN_REPLAY_US and holds fewer than MIN_CALLS calls, recaptured as enough
    passes back to back to reach either. The graph has been replayed (warm)."""
    graph = capture_graph(lambda: [fn() for fn in calls])[0]
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    one_pass_us = start.elapsed_time(end) * 1e3
    passes = min(math.ceil(MIN_CALLS / len(calls)), max(1, math.ceil(MIN_REPLAY_US / max(one_pass_us, 1e-3))))
    if passes > 1:
        del graph
        graph = capture_graph(lambda: [fn() for _ in range(passes) for fn in calls])[0]
        graph.replay()
        torch.cuda.synchronize()
    return graph, passes * len(calls)


def interleaved_medians(fns: dict[str, Callable[[], object]], sample: Callable[[Callable[[], object]], float],
                        rounds: int, warmup: int = 3) -> dict[str, float]:
    """{name: median over ``rounds`` of ``sample(fns[name])``}: each function called ``warmup``
    times first, then every round samples every function in turn, so that a drift of the
    host's speed during a run reaches them alike (host-side timings: wall and host time)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name].append(sample(fn))
    return {name: statistics.median(v) for name, v in samples.items()}


def time_graph(calls: list[Callable[[], object]], replays: int = 20) -> Timing:
    """Median time per call of ``calls`` captured back to back in one CUDA graph."""
    return time_interleaved({"": calls}, "cuda", replays)[""]


def time_interleaved(cases: dict[str, list[Callable[[], object]]], device, replays: int = 20) -> dict[str, Timing]:
    """``time_calls`` of several implementations of one case, on a GPU with their graph
    replays interleaved (A, B, C, A, B, C, ...): a drift of the GPU's state during the case
    falls on all of them alike. (Timed one after the other, the first of them ran up to 18%
    slower on the largest shapes, H100: bf16 F.linear on 8192 x 28672 at M = 96, 212 us
    first against 179 us again after the others.)"""
    if torch.device(device).type != "cuda":
        return {name: time_calls(calls, device, replays) for name, calls in cases.items()}
    graphs, per_graph = {}, {}
    for name, calls in cases.items():
        graphs[name], per_graph[name] = _graph_of_passes(calls)
    times = {name: [] for name in graphs}
    for _ in range(replays):
        for name, graph in graphs.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            # The GPU spins while the host enqueues the events and the replay, so that no host
            # delay between them lands inside the timed span.
            torch.cuda._sleep(HOST_COVER_CYCLES)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 1e3 / per_graph[name])
    del graphs
    return {name: _timing(t) for name, t in times.items()}


def _timing(times: list[float]) -> Timing:
    times = sorted(times)
    med = statistics.median(times)
    p10, p90 = times[len(times) // 10], times[(9 * len(times)) // 10]
    return Timing(med, (p90 - p10) / med)


def measure_ceilings(device="cuda") -> dict[str, float]:
    """Measured in this run: HBM bandwidth, bf16 and int8 (cuBLAS) GEMM rates at 8192^3 on random data.

    HBM: the larger of a 2 GiB device copy (bytes read + written) and a 2 GiB
    read-only reduction; GEMV-like kernels are read-bound, so the read figure is the fair one.
    Empty on the CPU (no ceilings: the rows then carry no '% of bound').
    """
    if torch.device(device).type != "cuda":
        return {}
    n_bytes = 2**31
    src = torch.empty(n_bytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    copy = 2 * n_bytes / (time_graph([lambda: dst.copy_(src)], replays=10).us * 1e-6)
    del dst
    as_bf16 = src.view(torch.bfloat16)
    read = n_bytes / (time_graph([lambda: as_bf16.sum()], replays=10).us * 1e-6)
    del src, as_bf16
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    bf16 = 2 * n**3 / (time_graph([lambda: a @ b], replays=10).us * 1e-6)
    ai = torch.randint(-128, 128, (n, n), dtype=torch.int8, device="cuda")
    bi = torch.randint(-128, 128, (n, n), dtype=torch.int8, device="cuda")
    int8 = 2 * n**3 / (time_graph([lambda: torch._int_mm(ai, bi.t())], replays=10).us * 1e-6)
    return {"hbm_copy_bytes_per_s": copy, "hbm_read_bytes_per_s": read,
            "hbm_bytes_per_s": max(copy, read), "bf16_flops": bf16, "int8_cublas_ops": int8,
            # The practical int8 ceiling of our power-capped H100 (shared/HOPPER-INT8-FACTS.md).
            "int8_practical_ops": 1450e12}


def environment(device="cuda") -> dict[str, str]:
    if torch.device(device).type != "cuda":
        return {"device": "cpu", "torch": torch.__version__, "python": platform.python_version(),
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    import triton

    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        driver = "unknown"
    return {
        "device": torch.cuda.get_device_name(),
        "capability": "sm_%d%d" % torch.cuda.get_device_capability(),
        "sm_count": str(torch.cuda.get_device_properties(0).multi_processor_count),
        "driver": driver,
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "triton": triton.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def int8_gemm_bytes(m: int, n: int, k: int) -> int:
    """Bytes an int8 GEMM with the fused epilogue moves: int8 activations and weights read, bf16
    out written, fp32 per-token and per-channel scales read."""
    return m * k + n * k + 2 * m * n + 4 * (m + n)


def quantizer_bytes(m: int, k: int) -> int:
    """Bytes the per-token quantizer moves: x read as bf16, int8 codes and fp32 scales written."""
    return 2 * m * k + m * k + 4 * m


def gemm_row(name: str, m: int, n: int, k: int, timing: Timing, bytes_moved: int, ceilings: dict,
             bf16_us: float | None, peak_key: str = "int8_practical_ops") -> dict:
    """One result row: us, TOP/s, GB/s, ratio to bf16, % of the binding ceiling.

    The binding ceiling is the slower of doing the ops at ``ceilings[peak_key]``
    (the int8 practical peak; the measured bf16 rate for bf16 rows) and moving
    ``bytes_moved`` at the measured HBM bandwidth.
    """
    ops = 2 * m * n * k
    t = timing.us * 1e-6
    if ceilings:
        compute_s = ops / ceilings[peak_key]
        memory_s = bytes_moved / ceilings["hbm_bytes_per_s"]
        pct, bound = round(100 * max(compute_s, memory_s) / t, 1), "compute" if compute_s >= memory_s else "memory"
    else:
        pct, bound = None, None
    return {
        "impl": name, "M": m, "N": n, "K": k,
        "us": round(timing.us, 3), "spread": round(timing.spread, 4),
        "tops": round(ops / t / 1e12, 3), "gbps": round(bytes_moved / t / 1e9, 1),
        "x_bf16": round(bf16_us / timing.us, 3) if bf16_us else None,
        "pct_of_bound": pct,
        "bound": bound,
    }


def write_results(path: str, rows: list[dict], ceilings: dict, extra: dict | None = None, device="cuda") -> None:
    """``path``: JSON with the environment, the ceilings and the rows."""
    doc = {"environment": environment(device), "ceilings": ceilings, "rows": rows, **(extra or {})}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


def write_suite(args, suite: str, rows: list[dict], ceilings: dict, described: dict, device) -> str:
    """``args.out/<suite>_<tag>.json`` (the tag: ``args.tag`` or the device's); returns the path."""
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{suite}_{args.tag or device_tag(device)}.json")
    write_results(path, rows, ceilings, described, device)
    print(f"wrote {path}")
    return path


def markdown_table(rows: list[dict]) -> str:
    head = "| M | N | K | impl | us | TOP/s | GB/s | x bf16 | % of bound |\n|---|---|---|---|---|---|---|---|---|"
    lines = [head]
    for r in rows:
        lines.append(f"| {r['M']} | {r['N']} | {r['K']} | {r['impl']} | {r['us']:.1f} | {r['tops']:.1f} | "
                     f"{r['gbps']:.0f} | {r['x_bf16'] if r['x_bf16'] is not None else '-'} | {r['pct_of_bound'] or '-'} |")
    return "\n".join(lines)


def geomean(values: list[float]) -> float:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")
