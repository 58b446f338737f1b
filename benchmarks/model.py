"""Model suite: transformers' ``LlamaModel`` (a Llama's decoder stack) at Llama-3-8B widths, bf16 vs W8A8,
eager and compiled.

    python -m benchmarks --suites model [--m 1,16,...] [--layers 4] [--size llama3-8b|tiny] [--out DIR]

* the model: the ``LlamaModel`` of a ``LlamaForCausalLM`` built from a ``LlamaConfig``
  (hidden 4096, ffn 14336, 32 heads, 8 KV heads, head_dim 128, vocab 128256, rope defaults,
  SDPA attention), ``--layers`` decoder layers, random weights initialised on the device in
  bf16 (no download): embedding, decoder layers and final norm. The causal LM's lm_head is
  left out: ``quantize_model`` keeps it bf16 by default, so it would add the same bf16 GEMM
  to both sides (at 8192 tokens a quarter of bf16's time, for logits of every position).
  W8A8 is a copy through ``quantize_model`` with its defaults.
* one forward: batch 1, ``tokens`` random input ids, ``use_cache=False``, the last hidden
  state out.
* modes: eager, ``torch.compile(model)`` as a user writes it (``compile``: default mode,
  ``dynamic=None``: the first token count compiles a static graph, the second one a graph
  with a dynamic token count that serves the rest; M = 1 is specialised) and
  ``torch.compile(model, mode="reduce-overhead")`` (Inductor's CUDA graphs);
  ``torch._dynamo.reset()`` before each mode. On the CPU compile is skipped
  (minutes of C++ builds for a smoke test); its rows say so in ``skipped``.
* GPU time per forward: the sum of the CUDA kernel times ``torch.profiler`` records for
  one forward; WARMUP forwards, then PROFILED forwards each profiled on its own (a
  profiler schedule of one active step per cycle); the median forward (by total) is
  reported with its per-kernel breakdown into buckets (KERNEL_BUCKETS). Wall time, eager:
  the median of WALL_ROUNDS rounds in each of which bf16 and every variant run one
  synchronised forward in turn, so that a drift of the host's speed during the run reaches
  them alike, all of it before any model is compiled; compiled, the same rounds over the
  compiled models, all held in one dynamo cache per mode (each model's graphs for the token
  count built and profiled first, with its graph pass set); reduce-overhead, each model's
  rounds on their own (Inductor's CUDA-graph trees redo work when another model's graphs ran
  in between, which a user's loop over one model never does).
  On the CPU there are no kernels: wall time only, the bucket and bound fields None.
* ``x_bf16`` compares GPU time (the kernel sums), ``x_bf16_wall`` the wall time a user's loop
  sees; ``host_bound`` marks a row whose wall time is more than 1.1x its GPU time.
* the bound: every quantized projection at exactly 2x its bf16 GEMM time and
  nothing else changed: ``bound_time = T_bf16 - G_proj / 2``, ``bound_x = T_bf16 / bound_time``,
  ``pct_of_bound = x_bf16 / bound_x``, from the bf16 run's own profile.
"""
from __future__ import annotations

import copy
import re
import time
import warnings
from collections import defaultdict

import torch

from benchmarks import harness
from w8a8.demo import LLAMA_SIZES

WARMUP = 3
PROFILED = 5
WALL_ROUNDS = 15
# eager; torch.compile(model) in its default mode; torch.compile(model, mode="reduce-overhead")
# (Inductor's CUDA graphs).
MODES = ("eager", "compile", "reduce-overhead")

# Kernel name -> bucket, first match wins (re.search on the demangled name the profiler gives).
# Order matters: attention kernels go to "other" first (PyTorch's memory-efficient SDPA is
# "fmha_cutlassF_...", which would otherwise read as a GEMM); quantizers before our GEMMs
# (the CUDA quantizers live in namespace w8a8:: too); our int8 GEMMs before the generic
# GEMM patterns (our sm90/sm80 kernels are CUTLASS templates whose names carry w8a8:: types
# (w8a8::sm90 epilogue, w8a8::DequantizeFn) and "signed char" operands; the dp4a GEMV and
# skinny GEMM are scaled_mm_gemv_kernel / scaled_mm_skinny_kernel, Triton's is _scaled_mm_kernel).
# "gemm_bf16" is every other GEMM: cuBLAS / cuBLASLt / CUTLASS
# in cuBLAS (bf16 projections, the fp32 rotary matmul in eager) and Inductor mm templates.
# "other" patterns are only there so that the "unmatched" list stays short and meaningful.
KERNEL_BUCKETS = (
    ("other", r"flash|fmha|sdpa|attention"),
    # Inductor's generated pointwise / reduction kernels, named after every op of their origin
    # (the embedding that feeds a w8a8 norm is "triton_poi_fused_embedding_rms_norm_quant_0")
    ("other", r"^triton_(poi|red|per)_"),
    ("fused_quant", r"rms_norm_quant|silu_mul_quant"),  # a producer (norm, SiLU-and-mul) that also quantizes
    ("quant", r"(?<!De)quantize|row_stats"),  # not the sm90 GEMM's epilogue functor, w8a8::DequantizeFn
    ("gemm_w8a8", r"w8a8::|scaled_mm|split_k_dequant|split_k_partials|cutlass.*signed char|S32S8S8"),
    ("gemm_bf16", r"gemm|gemv|cutlass|xmma|nvjet|s16816|s1688|wgmma|cublas|triton_tem|\bmm\b|matmul"),
    ("other", r"^triton_|elementwise|reduce|vectorized|Memcpy|Memset|memcpy|memset|Cat|index|copy|fill|softmax"
              r"|embedding|rms|norm|pow|mean|rsqrt|silu|mul|add|cos|sin|arange|where|cumsum|scan|sort|gather|scatter"),
)
BUCKETS = ("gemm_bf16", "gemm_w8a8", "quant", "fused_quant", "other")


def classify(name: str) -> str | None:
    """The bucket of a kernel name (KERNEL_BUCKETS), None when no pattern matches (counted as other)."""
    return next((bucket for bucket, pattern in KERNEL_BUCKETS if re.search(pattern, name)), None)


def build_model(size: str, layers: int, device: torch.device):
    """``(LlamaForCausalLM, config)`` of ``w8a8.demo.LLAMA_SIZES[size]`` with ``layers`` decoder layers,
    random bf16 weights on ``device`` (the demo's model); this suite runs its ``.model``, the decoder stack."""
    from w8a8.demo import build_llama

    return build_llama(size, layers, device)


def forward(model, ids: torch.Tensor) -> torch.Tensor:
    """One forward of the suite: the last hidden state for ``ids``, no cache."""
    return model(input_ids=ids, use_cache=False).last_hidden_state


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_wall_us(fns: dict, device: torch.device, rounds: int = WALL_ROUNDS) -> dict[str, float]:
    """{name: median synchronised wall time of ``fns[name]()`` in us}, the functions called in
    turn, one call each per round (after WARMUP calls of each)."""
    def sample(fn) -> float:
        _sync(device)  # nothing queued before the clock starts
        t0 = time.perf_counter()
        fn()
        _sync(device)
        return (time.perf_counter() - t0) * 1e6

    return harness.interleaved_medians(fns, sample, rounds, WARMUP)


def _profile_cycles(fn, device: torch.device, iters: int, activities, ready) -> None:
    """``iters`` profiler cycles of one warm-up and one active forward; ``ready`` gets each active one."""
    from torch.profiler import profile, schedule

    with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=1, repeat=iters),
                 on_trace_ready=ready) as prof:
        for _ in range(2 * iters):
            fn()
            _sync(device)
            prof.step()


def kernel_us(fn, device: torch.device, iters: int = PROFILED) -> dict[str, tuple[float, int]] | None:
    """{kernel name: (us, launches)} of the median forward (by kernel-time sum) over ``iters``
    separately profiled forwards; None when the profiler records no CUDA kernel (the CPU)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity

    per_forward: list[dict[str, tuple[float, int]]] = []

    def ready(prof) -> None:
        times: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        for e in prof.key_averages():
            # kernels only: user annotations (ProfilerStep*, record_function ranges) also carry a
            # CUDA device time, the span of the range, which would count the forward twice
            if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False):
                times[e.key] += e.self_device_time_total
                counts[e.key] += e.count
        per_forward.append({k: (v, counts[k]) for k, v in times.items()})

    for _ in range(WARMUP):
        fn()
    _sync(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with warnings.catch_warnings():  # "Profiler clears events at the end of each cycle": what we want
        warnings.filterwarnings("ignore", message=".*clears events at the end of each cycle")
        _profile_cycles(fn, device, iters, activities, ready)
    per_forward = [t for t in per_forward if t]
    if not per_forward:
        return None
    per_forward.sort(key=lambda t: sum(us for us, _ in t.values()))
    return per_forward[len(per_forward) // 2]


def breakdown(kernels: dict[str, tuple[float, int]]) -> dict:
    """The row fields of one forward's {kernel name: (us, launches)}: total, buckets, launches
    per bucket, unmatched names."""
    buckets = dict.fromkeys(BUCKETS, 0.0)
    launches = dict.fromkeys(BUCKETS, 0)
    unmatched = set()
    for name, (us, count) in kernels.items():
        bucket = classify(name)
        if bucket is None:
            unmatched.add(name[:200])
        buckets[bucket or "other"] += us
        launches[bucket or "other"] += count
    gpu = sum(us for us, _ in kernels.values())
    return {"gpu_us": round(gpu, 2), "kernels_per_forward": sum(launches.values()), "unmatched": sorted(unmatched),
            **{f"{b}_us": round(v, 2) for b, v in buckets.items()},
            **{f"{b}_launches": n for b, n in launches.items()},
            "gemm_us": round(buckets["gemm_bf16"] + buckets["gemm_w8a8"], 2),
            "quant_share": round(buckets["quant"] / gpu, 4) if gpu else None}


def measure(model, ids, device: torch.device) -> tuple[dict, torch.Tensor]:
    """One (model, mode, tokens) measurement: GPU time, buckets, and the last 64 rows of the output (fp32,
    CPU) for the check; ``set_wall`` adds the wall time, measured with the other models'."""
    with torch.inference_mode():
        fn = lambda: forward(model, ids)  # noqa: E731
        out = fn()[0, -64:].float().cpu()
        kernels = kernel_us(fn, device)
    row = {"gpu_us": None, "kernels_per_forward": None, "unmatched": None,
           **{f"{b}_us": None for b in BUCKETS}, **{f"{b}_launches": None for b in BUCKETS},
           "gemm_us": None, "quant_share": None}
    if kernels is not None:
        row.update(breakdown(kernels))
    row["timing"] = "profiler kernel sum" if row["gpu_us"] is not None else "wall (no CUDA kernels)"
    return row, out


def set_wall(row: dict, wall: float) -> None:
    """A row's wall time and what follows from it (``us`` where there is no GPU time, ``host_bound``)."""
    row["wall_us"] = round(wall, 2)
    row["us"] = row["gpu_us"] if row["gpu_us"] is not None else row["wall_us"]
    row["host_bound"] = None if row["gpu_us"] is None else row["wall_us"] > 1.1 * row["gpu_us"]


def compare(bf16: dict, w8a8: dict, w8a8_out: torch.Tensor, bf16_out: torch.Tensor) -> dict:
    """The W8A8 row's comparison fields against the bf16 row of the same tokens and mode.

    The bound needs G_proj, the bf16 run's GEMM time of the 7 x layers projections only.
    The bf16 GEMMs left in the W8A8 model (the small fp32 rotary matmul in eager) have the same
    shapes and code path in both models (eager vs eager, compiled vs compiled), so they are
    exactly the "gemm_bf16" time of the W8A8 run, whose projections all run our kernels:
    G_proj = gemm_bf16(bf16 run) - gemm_bf16(W8A8 run). No kernel name or shape is needed, and
    it holds under torch.compile, where record_function ranges vanish.
    If no W8A8 GEMM kernel was recognised the subtraction would be meaningless: the bound is
    then None and ``bound_note`` says why.
    """
    out = {"x_bf16": round(bf16["us"] / w8a8["us"], 3), "x_bf16_wall": round(bf16["wall_us"] / w8a8["wall_us"], 3),
           "out_rel_err": round(float((w8a8_out - bf16_out).norm() / bf16_out.norm()), 5),
           "proj_gemm_bf16_us": None, "bound_us": None, "bound_x": None, "pct_of_bound": None, "bound_note": None}
    if bf16["gpu_us"] is None or w8a8["gpu_us"] is None:
        out["bound_note"] = "no CUDA kernels profiled"
    elif not w8a8["gemm_w8a8_us"]:
        out["bound_note"] = "no w8a8 GEMM kernel matched KERNEL_BUCKETS: check 'unmatched' and the gemm_bf16 names"
    else:
        t, g = bf16["gpu_us"], bf16["gemm_bf16_us"] - w8a8["gemm_bf16_us"]
        bound_us = t - g / 2
        bound_x = t / bound_us
        out.update(proj_gemm_bf16_us=round(g, 2), bound_us=round(bound_us, 2), bound_x=round(bound_x, 3),
                   pct_of_bound=round(100 * (t / w8a8["gpu_us"]) / bound_x, 1))
    return out


# W8A8 variants: quantize_model keywords, and whether Inductor's w8a8 graph pass runs under compile.
VARIANTS = {
    "w8a8": (dict(), True),                        # what quantize_model gives (fused)
    "w8a8-unfused": (dict(fuse=False), False),     # every layer on its own, no graph pass
    "w8a8-unmerged": (dict(merge=False), True),    # shared and fused quantization, separate GEMMs
}
DEFAULT_VARIANTS = ("w8a8", "w8a8-unfused")  # what the product file holds


def markdown_table(rows: list[dict]) -> str:
    lines = ["| tokens | mode | impl | bf16 GPU ms | w8a8 GPU ms | x bf16 GPU | bf16 wall ms | w8a8 wall ms | x bf16 wall "
             "| % of bound | quantizer launches (fused) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda v, fmt: "-" if v is None else format(v, fmt)  # noqa: E731
    for r in rows:
        if r["impl"] == "bf16":
            continue
        if r.get("skipped"):
            lines.append(f"| {r['M']} | {r['mode']} | {r['impl']} | - | - | - | - | - | - | - | skipped: {r['skipped']} |")
            continue
        b = next(x for x in rows if x["impl"] == "bf16" and x["M"] == r["M"] and x["mode"] == r["mode"])
        launches = "-" if r.get("quant_launches") is None else f"{r['quant_launches']} ({r['fused_quant_launches']})"
        lines.append(f"| {r['M']} | {r['mode']} | {r['impl']} | {b['us'] / 1e3:.3f} | {r['us'] / 1e3:.3f} | "
                     f"{r['x_bf16']:.3f} | {b['wall_us'] / 1e3:.3f} | {r['wall_us'] / 1e3:.3f} | {r['x_bf16_wall']:.3f} | "
                     f"{f(r['pct_of_bound'], '.1f')} | {launches} |")
    return "\n".join(lines)


def _graph_pass(on: bool) -> None:
    """Turn w8a8's Inductor graph pass on (installed) or off for the next compile (W8A8_INDUCTOR_FUSION)."""
    import os

    from w8a8.fusion import inductor as fusion

    os.environ["W8A8_INDUCTOR_FUSION"] = "1" if on else "0"
    if on:
        fusion.install()


def run_suite(tokens: list[int], device: torch.device, size: str | None = None, layers: int | None = None,
              modes=MODES, variants=DEFAULT_VARIANTS) -> tuple[list[dict], dict]:
    """Rows (one per tokens x mode x {bf16, *variants}) and the run's description for the result file."""
    import w8a8

    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"benchmarks: unknown model variants {sorted(unknown)}; expected {list(VARIANTS)}")
    size = size or ("llama3-8b" if device.type == "cuda" else "tiny")
    layers = layers or (4 if size == "llama3-8b" else 2)
    causal_lm, config = build_model(size, layers, device)
    bf16_model = causal_lm.model
    del causal_lm  # and its lm_head
    gen = torch.Generator().manual_seed(0)
    inputs = {m: torch.randint(0, config.vocab_size, (1, m), generator=gen).to(device) for m in tokens}
    results, outputs = {}, {}

    def run(mode: str, runners: dict) -> None:
        """Every model's rows of ``mode`` (``runners``: impl -> what to call): per token count, each
        model profiled in turn (its graph pass set for what it compiles), then their wall times
        interleaved: one synchronised forward each per round, so a drift of the host's speed
        reaches them alike (reduce-overhead: model after model, as a user's loop calls one)."""
        for m in tokens:
            for impl, runner in runners.items():
                counters["w8a8"].clear()
                _graph_pass(models[impl][1])
                row, outputs[impl, mode, m] = measure(runner, inputs[m], device)
                results[impl, mode, m] = {"impl": impl, "mode": mode, "M": m, "tokens": m, **row}
                if impl in fusion and mode != "eager":  # summed over the variant's compiled graphs
                    passes = fusion[impl].setdefault("graph_pass", {})
                    for key, count in counters["w8a8"].items():
                        passes[key] = passes.get(key, 0) + count
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            with torch.inference_mode():
                calls = {impl: (lambda runner=runner, ids=inputs[m]: forward(runner, ids))
                         for impl, runner in runners.items()}
                if mode == "reduce-overhead":  # CUDA-graph trees redo work when another model's graphs ran between
                    walls = {impl: interleaved_wall_us({impl: call}, device)[impl] for impl, call in calls.items()}
                else:
                    walls = interleaved_wall_us(calls, device)
                for impl, wall in walls.items():
                    set_wall(results[impl, mode, m], wall)

    # Every model eager first, before anything is compiled (an eager user's process compiles
    # nothing); then each compiled mode, every model compiled into one dynamo cache (a reset per
    # mode, none between models: each model's graphs stay, guarded by its modules).
    from torch._dynamo.utils import counters

    models = {"bf16": (bf16_model, False)}
    fusion = {}
    for impl in variants:
        keywords, graph_pass = VARIANTS[impl]
        models[impl] = (copy.deepcopy(bf16_model), graph_pass)
        report = w8a8.quantize_model(models[impl][0], progress=False, **keywords)
        fusion[impl] = {"eager": None if report.fusion is None else report.fusion.summary()}
    if "eager" in modes:
        run("eager", {impl: model for impl, (model, _) in models.items()})
    for mode in (mode for mode in modes if mode != "eager"):
        if device.type != "cuda":
            for impl in models:
                for m in tokens:
                    results[impl, mode, m] = {"impl": impl, "mode": mode, "M": m, "tokens": m,
                                              "skipped": "torch.compile not run on the CPU (slow C++ builds)"}
            continue
        torch._dynamo.reset()
        # what a user writes: the second token count recompiles once, dynamic
        run(mode, {impl: torch.compile(model) if mode == "compile" else torch.compile(model, mode=mode)
                   for impl, (model, _) in models.items()})
    _graph_pass(True)
    models.clear()
    rows = []
    for mode in modes:
        for m in tokens:
            b = results["bf16", mode, m]
            rows.append(b)
            for impl in variants:
                q = results[impl, mode, m]
                if not q.get("skipped"):
                    q.update(compare(b, q, outputs[impl, mode, m], outputs["bf16", mode, m]))
                rows.append(q)
    described = {"kind": "model",
                 "model": "transformers LlamaModel (the decoder stack of a LlamaForCausalLM: embedding, decoder "
                          "layers, final norm; no lm_head), random weights, SDPA attention",
                 "size": size, "layers": layers, "config": {**LLAMA_SIZES[size], "num_hidden_layers": layers},
                 "output": "last_hidden_state", "batch": 1, "use_cache": False,
                 "variants": {v: {"quantize_model": VARIANTS[v][0], "graph_pass": VARIANTS[v][1]} for v in variants},
                 "fusion": fusion,
                 "compile": "torch.compile(model) (mode compile) and torch.compile(model, mode='reduce-overhead'): "
                            "dynamic=None (static first graph, then one "
                            "with a dynamic token count); dynamo reset between modes, the models' graphs side by side",
                 "warmup": WARMUP, "profiled_forwards": PROFILED, "wall_rounds": WALL_ROUNDS,
                 "kernel_buckets": [list(p) for p in KERNEL_BUCKETS]}
    return rows, described


def run(args, device: torch.device, ceilings: dict) -> list[dict]:
    """``python -m benchmarks --suites model``: run, print the table, write ``model_<tag>.json`` with ``--out``."""
    variants = tuple(args.variants.split(",")) if args.variants else DEFAULT_VARIANTS
    rows, described = run_suite(args.m or harness.DEFAULT_M, device, args.size, args.layers, variants=variants,
                                modes=tuple(args.modes.split(",")) if args.modes else MODES)
    print(markdown_table(rows))
    unmatched = sorted({n for r in rows for n in (r.get("unmatched") or [])})
    if unmatched:
        print("model: kernels no KERNEL_BUCKETS pattern matched (counted as other):\n  " + "\n  ".join(unmatched))
    if args.out:
        harness.write_suite(args, "model", rows, ceilings, described, device)
    return rows
