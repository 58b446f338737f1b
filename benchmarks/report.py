"""docs/PERFORMANCE.md (and its plots) from the product files, docs/EVIDENCE.md from the evidence table.

    python -m benchmarks.report

benchmarks/results holds the product grid (``PRODUCT``: kernel, layer, quantizer, model,
generation, host, split-K, tensor parallel), each file written by its command on one build,
and one evidence table (``evidence.json``: the measurements behind each rule of the
heuristics, by rule id). tests/repository/test_benchmarks.py checks that the folder holds
exactly these and that both pages are up to date. The plots need matplotlib; the pages do not.
"""
from __future__ import annotations

import functools
import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOCS = ROOT / "docs"
EVIDENCE = "evidence.json"

_RUN = "python -m benchmarks --out benchmarks/results"
# Every product file: what it holds, and the command (on the GPU machine, after
# `pip install --no-build-isolation -e .`) that writes it.
# The kernel, layer and quantizer grid: the current build on an H200. The model, generation, host
# and split-K files: an H100, a build whose sm90 picks differ at M >= 512 only.
KERNEL, LAYER, QUANT = "scaled_mm_h200.json", "linear_h200.json", "quant_h200.json"
PRODUCT = {
    KERNEL: ("kernel grid: 8 Llama-3 shapes, M = 1..8192; sm90, Triton, `torch._int_mm`",
             f"{_RUN} --suites scaled_mm"),
    LAYER: ("`W8A8Linear` end to end on the same grid", f"{_RUN} --suites linear"),
    QUANT: ("the per-token quantizers alone, M = 1..8192, K = 4096, 8192, 14336, 28672; on target or not",
            f"{_RUN} --suites quant"),
    "model_h100.json": ("transformers Llama at Llama-3-8B widths, 4 layers: bf16, w8a8, w8a8-unfused; eager, "
                        "compiled, reduce-overhead; GPU and wall time", f"{_RUN} --suites model"),
    "generate_h100.json": ("greedy generation, the same model at 32 layers: `w8a8.Generator` (graph, mixed-sampled) "
                           "and transformers' eager generate; prompts 128 and 2048, batches 1, 16, 64. The 2048-token "
                           "prompt at batch 64, eager and mixed-sampled, each ran in a process of its own (the file's "
                           "`assembled` says which run gave which rows)",
                           f"{_RUN} --suites generate --recipes graph,eager,mixed-sampled --prompts 128; the same "
                           "with --prompts 2048; --prompts 2048 --batches 64 --recipes eager; the same with "
                           "--recipes mixed-sampled"),
    "host_h100.json": ("host cost per call, one 4096 x 4096 layer at M = 1, 16, 128: `nn.Linear` against `W8A8Linear`, "
                       "eager and compiled; the public ops alone; the fused producers beside the bf16 ops they "
                       "replace", f"{_RUN} --suites host"),
    "split_k_h100.json": ("the sm90 kernel's K decompositions (`split_k`, `scheduler`) on small-M, long-K shapes",
                          f"{_RUN} --suites split_k"),
    "tp_mlp_h200x2.json": ("tensor-parallel MLP block, 2 GPUs", "NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 "
                           "python -m benchmarks.tp --out benchmarks/results --tag h200x2"),
}
GRID_M = (1, 16, 64, 128, 512, 2048, 8192)
PEERS = {"w8a8 sm90": "sm90", "w8a8 triton": "triton", "torch._int_mm (int32 out, no dequant)": "`_int_mm` (int32 out)",
         "torch._int_mm + dequant (eager)": "`_int_mm` + dequant, eager",
         "torch._int_mm + dequant (compiled)": "`_int_mm` + dequant, compiled"}
MODEL_MODES = ("eager", "compile", "reduce-overhead")  # those the model file holds are shown


@functools.lru_cache(maxsize=None)
def load(name: str) -> dict:
    """A result file, each row's ``impl`` under today's kernel names (files written before the
    kernels were named by family say cutlass for sm90, cuda for the sm90 quantizer, op for impl)."""
    doc = json.loads((RESULTS / name).read_text())
    for r in doc.get("rows", []):
        impl = r.get("impl") or r.get("op")
        if impl is not None:
            r["impl"] = re.sub(r"\bcutlass\b", "sm90", re.sub(r"^quantize_per_token cuda$", "quantize_per_token sm90", impl))
    return doc


def geomean(values) -> float:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _f(v, fmt: str = ".2f") -> str:
    return "-" if v is None or v != v else format(v, fmt)


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def _h(title: str) -> list[str]:
    return ["", f"## {title}", ""]


def _shapes(rows: list[dict]) -> list[tuple[int, int]]:
    return list(dict.fromkeys((r["N"], r["K"]) for r in rows))


def _x(rows: list[dict], impl: str, shape=None, m=None, m_min: int = 0) -> float:
    """Geomean x bf16 of ``impl``'s rows (one shape and / or one M, M at least m_min)."""
    return geomean(r["x_bf16"] for r in rows if r["impl"] == impl and r["M"] >= m_min
                   and shape in (None, (r["N"], r["K"])) and m in (None, r["M"]))


def m_table(rows: list[dict], impl: str, extra: str | None = None) -> list[str]:
    """x bf16 of ``impl``, one row per shape, one column per M, geomeans in the margins."""
    idx = {(r["impl"], r["M"], r["N"], r["K"]): r for r in rows}
    head = ["N x K"] + [f"M={m}" for m in GRID_M] + ["geomean"] + ([f"{extra.split()[-1]} geomean"] if extra else [])
    body = []
    for shape in _shapes(rows) + [None]:
        cells = [idx.get((impl, m) + shape, {}).get("x_bf16") if shape else _x(rows, impl, m=m) for m in GRID_M]
        body.append([f"{shape[0]} x {shape[1]}" if shape else "**all**"] + [_f(c) for c in cells] +
                    [_f(_x(rows, impl, shape=shape))] + ([_f(_x(rows, extra, shape=shape))] if extra else []))
    return _table(head, body)


def peer_table(rows: list[dict]) -> list[str]:
    """Per-shape geomean of x bf16 over M >= 64, where every peer runs (`_int_mm` refuses M <= 16)."""
    body = [[f"{s[0]} x {s[1]}" if s else "**all**"] + [_f(_x(rows, i, shape=s, m_min=64)) for i in PEERS]
            for s in _shapes(rows) + [None]]
    return _table(["N x K"] + list(PEERS.values()), body)


def layer_over_kernel_table(rows: list[dict], ceilings: dict, backend: str = "sm90") -> list[str]:
    """What ``W8A8Linear`` adds to its GEMM: the layer's time minus the kernel's on the layer's own
    codes (same run, interleaved), in us and in units of the quantizer's ideal time (x read as
    bf16, codes and scales written, at the run's HBM rate), M >= 512; a difference smaller than
    either row's spread over its replays (max - min) is shown as that spread."""
    from benchmarks import harness
    from benchmarks.linear import KERNEL_ROW

    idx = {(r["impl"], r["M"], r["N"], r["K"]): r for r in rows}
    ms = [m for m in GRID_M if m >= 512]
    body = []
    for n, k in _shapes(rows):
        cells = []
        for m in ms:
            layer, kernel = idx.get((f"W8A8Linear {backend}", m, n, k)), idx.get((f"{KERNEL_ROW} {backend}", m, n, k))
            if not (layer and kernel):
                cells.append("-")
                continue
            diff, noise = layer["us"] - kernel["us"], max(r["us"] * r["spread"] for r in (layer, kernel))
            ideal = harness.quantizer_bytes(m, k) / ceilings["hbm_bytes_per_s"] * 1e6
            cells.append(f"{diff:.1f} ({diff / ideal:.2f}x)" if abs(diff) >= noise else f"within noise ({noise:.0f})")
        body.append([f"{n} x {k}"] + cells)
    return _table(["N x K"] + [f"M={m}" for m in ms], body)


def quant_table() -> list[str]:
    """The quantizers alone: us and % of the HBM rate (ideal: the bytes at the measured rate), and
    the cells off target (the quant suite's rule: below 85% of the rate where the ideal time is >= 10
    us, else more than 1.5 us over it)."""
    rows = load(QUANT)["rows"]
    idx = {(r["impl"], r["M"], r["K"]): r for r in rows if r.get("heuristic", True)}
    ms = sorted({r["M"] for r in rows})
    body = []
    for impl in dict.fromkeys(r["impl"] for r in rows):
        for k in sorted({r["K"] for r in rows}):
            cells = [idx.get((impl, m, k)) for m in ms]
            body.append([impl.replace("quantize_per_token ", ""), str(k)] +
                        [f"{c['us']:.1f} ({c['pct_hbm']:.0f}%{', off' if c.get('on_target') is False else ''})"
                         if c else "-" for c in cells])
    return _table(["kernel", "K"] + [f"M={m}" for m in ms], body)


def model_table(mode: str) -> list[str]:
    """GPU (profiler kernel sums) and wall time per forward, x bf16 of each, the bound and the quantizers."""
    rows = load("model_h100.json")["rows"]
    at = {(r["impl"], r["mode"], r["M"]): r for r in rows}
    unfused = any(r["impl"] == "w8a8-unfused" for r in rows)  # the fuse=False column where it was measured
    out = []
    for m in sorted({r["M"] for r in rows}):
        b, q = at["bf16", mode, m], at["w8a8", mode, m]
        u = at.get(("w8a8-unfused", mode, m))
        host_bound = b["gpu_us"] is not None and b["wall_us"] > 1.1 * b["gpu_us"]
        out.append([str(m), f"{b['us'] / 1e3:.3f}", f"{q['us'] / 1e3:.3f}", f"**{q['x_bf16']:.2f}**",
                    f"{b['wall_us'] / 1e3:.3f}" + (" (host-bound)" if host_bound else ""),
                    f"{q['wall_us'] / 1e3:.3f}", f"**{b['wall_us'] / q['wall_us']:.2f}**", _f(q.get("pct_of_bound"), ".1f"),
                    f"{q['quant_launches']} + {q['fused_quant_launches']} fused" if q.get("quant_launches") is not None
                    else "-"] + ([_f(u and u["x_bf16"])] if unfused else []))
    return _table(["tokens", "bf16 GPU ms", "w8a8 GPU ms", "x bf16 GPU", "bf16 wall ms", "w8a8 wall ms",
                   "x bf16 wall", "% of bound", "quantizers"] + (["unfused x bf16 GPU"] if unfused else []), out)


def _grad_note(row: dict) -> str:
    """' no_grad' for a host row measured under torch.no_grad (rows without the field: inference_mode)."""
    grad = row.get("grad", "inference_mode")
    return "" if grad == "inference_mode" else f" {grad}"


def host_table() -> list[str]:
    rows = load("host_h100.json")["rows"]
    body = [[str(r["M"]), f"{r['N']} x {r['K']}", r["impl"], r.get("grad", "inference_mode"), f"{r['host_us']:.1f}",
             f"{r['loop_us']:.1f}", f"{r['gpu_us']:.1f}", _f(r.get("x_bf16_host")), _f(r.get("x_bf16_loop"))]
            for r in rows]
    return _table(["M", "N x K", "call", "grad mode", "host us", "loop us", "GPU us", "x bf16 host", "x bf16 loop"],
                  body)


def generate_table() -> list[str]:
    """Prefill and decode per recipe, bf16 and W8A8 side by side."""
    rows = load("generate_h100.json")["rows"]
    at = {(r["recipe"], r["impl"], r["prompt"], r["batch"]): r for r in rows}
    out = []
    for (recipe, _, prompt, batch), w in at.items():
        b = at.get((recipe, "bf16", prompt, batch))
        if w["impl"] != "w8a8" or b is None or "decode_ms" not in w:
            continue
        out.append([recipe, str(prompt), str(batch), f"{b['prefill_ms']:.1f} / {w['prefill_ms']:.1f}",
                    f"{w['x_bf16_prefill']:.2f}", f"{b['decode_ms']:.2f} / {w['decode_ms']:.2f}",
                    f"{b['tokens_per_s']:.0f} / {w['tokens_per_s']:.0f}", f"**{w['x_bf16_decode']:.2f}**",
                    _f(w.get("decode_over_kernels"))])
    return _table(["recipe", "prompt", "batch", "prefill ms (bf16 / w8a8)", "prefill x bf16",
                   "decode ms/token (bf16 / w8a8)", "tokens/s (bf16 / w8a8)", "decode x bf16",
                   "w8a8 decode / kernel sum"], out)


def split_k_table() -> list[str]:
    """Per shape and M: the heuristic's time, then each decomposition's speed-up over it."""
    rows = load("split_k_h100.json")["rows"]
    at = {(r["impl"], r["M"], r["N"], r["K"]): r for r in rows}
    variants = [i for i in dict.fromkeys(r["impl"] for r in rows) if i.startswith("sm90") and i != "sm90 default"]
    body = []
    for n, k in _shapes(rows):
        for m in sorted({r["M"] for r in rows if (r["N"], r["K"]) == (n, k)}):
            base = at[("sm90 default", m, n, k)]
            plan = f" ({base['plan']})" if base.get("plan") else ""
            body.append([f"{n} x {k}", str(m), f"{base['us']:.1f}{plan}"] +
                        [_f(base["us"] / at[(v, m, n, k)]["us"]) if (v, m, n, k) in at else "-" for v in variants])
    return _table(["N x K", "M", "heuristic us"] + [v.replace("sm90 ", "") for v in variants], body)


def tp_table() -> list[str]:
    body = [[r["impl"].replace(" TP=2", ""), str(r["M"]), f"{r['us']:.1f}", f"{r['x_bf16']:.2f}",
             f"{r['weight_gbps_per_gpu'] / 1e3:.2f}", f"{r['tops_per_gpu']:.0f}"]
            for r in load(_tp_file())["rows"]]
    return _table(["MLP block, TP = 2", "M", "us", "x bf16", "weight TB/s per GPU", "TOP/s per GPU"], body)


def _tp_file() -> str:
    return next(n for n in PRODUCT if n.startswith("tp_mlp_"))


def _range(values) -> str:
    values = list(values)
    return f"{min(values):.2f}-{max(values):.2f}x"


def model_modes() -> list[str]:
    present = {r["mode"] for r in load("model_h100.json")["rows"]}
    return [mode for mode in MODEL_MODES if mode in present]


def model_described() -> str:
    """What the model file measured, as its run described it."""
    model = load("model_h100.json")["model"]
    return model[0].upper() + model[1:]


def compiled_attention_note(tokens: int = 8192) -> list[str]:
    """Why the compiled GPU ratios fall at long prompts: the kernels outside the GEMMs (attention
    first) take longer compiled than eager, in both models (the rows' `other` bucket)."""
    at = {(r["impl"], r["mode"], r["M"]): r for r in load("model_h100.json")["rows"]}
    keys = [(impl, mode, tokens) for impl in ("bf16", "w8a8") for mode in ("eager", "compile")]
    if not all(k in at for k in keys):
        return []
    other = {k[:2]: at[k]["other_us"] / 1e3 for k in keys}
    return ["", f"At {tokens} tokens the kernels besides the GEMMs and quantizers (attention first) take "
            f"{other['bf16', 'compile']:.1f} ms compiled against {other['bf16', 'eager']:.1f} eager in bf16, "
            f"{other['w8a8', 'compile']:.1f} against {other['w8a8', 'eager']:.1f} in W8A8: under `torch.compile`, "
            "transformers (5.x, with torch before 2.14) builds the causal mask instead of letting SDPA apply it, "
            "and SDPA's kernel then computes every query-key pair, the masked half too. Attention is the same work in "
            "both models, so it bounds the compiled speed-up at long prompts."]


def model_summary(mode: str) -> str:
    rows = load("model_h100.json")["rows"]
    at = {(r["impl"], r["M"]): r for r in rows if r["mode"] == mode}
    ours = [r for r in rows if r["impl"] == "w8a8" and r["mode"] == mode]
    tokens = sorted(r["M"] for r in ours)
    wall = [at["bf16", r["M"]]["wall_us"] / r["wall_us"] for r in ours]
    return (f"- Model, {mode} (transformers Llama at Llama-3-8B widths, 4 layers, {tokens[0]}..{tokens[-1]} tokens): "
            f"GPU time {_range(r['x_bf16'] for r in ours)} bf16, wall time {_range(wall)}.")


def _plot(name: str) -> str:
    """The speed-up plot of a grid file (docs/speedup_<file's stem>.png)."""
    return f"speedup_{Path(name).stem}.png"


def devices_lines() -> list[str]:
    """One Method line per device of the product files, with the files measured on it."""
    by_device: dict[str, list[str]] = {}
    for name in PRODUCT:
        env = load(name)["environment"]
        key = (f"{env['device']} ({env['capability']}, {env['sm_count']} SMs, power-capped at 700 W), torch "
               f"{env['torch']}, CUDA {env['cuda']}, Triton {env['triton']}")
        by_device.setdefault(key, []).append(f"`{name}`")
    return [f"- Device: {key}: {', '.join(files)}." for key, files in by_device.items()]


def render_markdown(plots: bool = True) -> str:
    """docs/PERFORMANCE.md from the product files (a test checks the two agree)."""
    kern, lin = load(KERNEL)["rows"], load(LAYER)["rows"]
    ceil = load(KERNEL)["ceilings"]
    sq = next(r for r in kern if (r["impl"], r["M"], r["N"], r["K"]) == ("w8a8 sm90", 8192, 8192, 8192))
    gen = [r for r in load("generate_h100.json")["rows"] if r["impl"] == "w8a8" and r["recipe"] == "graph"]
    host = load("host_h100.json")["rows"] if "host_h100.json" in PRODUCT else []
    tp = {r["M"]: r["x_bf16"] for r in load(_tp_file())["rows"] if r["impl"].endswith("dequantized")}
    lin_min = min(r["x_bf16"] for r in lin if r["impl"] == "W8A8Linear sm90")
    files = [[f"`{n}`", what, f"{load(n)['environment']['device']}, {load(n)['environment']['date'][:10]}", f"`{cmd}`"]
             for n, (what, cmd) in PRODUCT.items()]
    host_line = ", ".join(f"M = {r['M']} {r['mode']}{_grad_note(r)} {_f(r['x_bf16_host'])}x" for r in host
                          if r["impl"].startswith("W8A8Linear"))
    return "\n".join([
        "# Performance",
        "",
        "Generated by `python -m benchmarks.report` from the product files in `benchmarks/results/` (files and "
        "commands at the end); do not edit by hand. The measurements behind each rule of the heuristics are on "
        "[EVIDENCE.md](EVIDENCE.md).",
        *_h("Method"),
        *devices_lines(),
        "- Kernel and layer points: the median of 20 CUDA-graph replays divided by the calls per replay. A graph "
        "holds passes over weight sets that rotate so that one pass reads more than 3x the 50 MB L2, repeated until "
        "it holds 20 calls or lasts 250 us; random data (never zeros); the implementations of one point are captured "
        "together and their replays interleaved, each behind a GPU sleep that covers the host's launch.",
        "- `x bf16` is bf16 `F.linear`'s time over ours, same shape, same run (above 1: faster). Kernel rows take int8 "
        "activations and write bf16 (per-token x per-channel scales, no bias); `W8A8Linear` rows take bf16 and include "
        "the per-token quantization.",
        "- Model and generation points: GPU time is the sum of the kernel times `torch.profiler` records for one "
        "forward (median of 5); wall time is the median of 10 synchronised forwards, what a user's loop sees. Host "
        "rows: the host's time per call issued behind a GPU sleep (host us), and a loop of 300 calls with one "
        "synchronisation (loop us).",
        f"- Ceilings of the kernel run: HBM read {ceil['hbm_read_bytes_per_s'] / 1e12:.2f} TB/s, bf16 GEMM "
        f"{ceil['bf16_flops'] / 1e12:.0f} TFLOP/s, cuBLAS int8 {ceil['int8_cublas_ops'] / 1e12:.0f} TOP/s (8192^3); "
        "a power-capped H100 sustains about 1450 int8 TOP/s.",
        *_h("Summary"),
        f"- 8192 x 8192 x 8192: sm90 {sq['tops']:.0f} TOP/s ({sq['x_bf16']:.2f}x bf16).",
        f"- Kernel geomean over the grid: sm90 {_x(kern, 'w8a8 sm90'):.2f}x bf16, Triton {_x(kern, 'w8a8 triton'):.2f}x.",
        f"- `W8A8Linear` end to end: sm90 {_x(lin, 'W8A8Linear sm90'):.2f}x bf16 (min {lin_min:.2f}), "
        f"Triton {_x(lin, 'W8A8Linear triton'):.2f}x.",
        *[model_summary(mode) for mode in model_modes()],
        *([f"- Host time per call, `nn.Linear`'s over `W8A8Linear`'s (4096 x 4096; above 1: W8A8 costs the host less): {host_line}."] if host else []),
        f"- Generation (32 layers, `w8a8.Generator`): decode {_range(r['x_bf16_decode'] for r in gen)} bf16 tokens/s, "
        f"prefill {_range(r['x_bf16_prefill'] for r in gen)}. Tensor-parallel MLP block (2 GPUs): {tp[1]:.2f}x at "
        f"M = 1, {tp[2048]:.2f}x at M = 2048.",
        *_h("Model: transformers Llama at Llama-3-8B widths"),
        f"{model_described()}: hidden 4096, ffn 14336, 32 heads, 8 KV heads, vocab 128256, 4 decoder layers, "
        "batch 1, no cache; `quantize_model` as a user calls it (fused: shared and "
        "producer-fused quantization, merged q/k/v and gate/up) beside `fuse=False` (unfused). The bound: every "
        "quantized projection at exactly 2x its bf16 GEMM time, nothing else changed (from the bf16 run's own "
        "profile). A bf16 row marked host-bound spends more than 1.1x its GPU time in wall time. Quantizers: "
        "standalone launches per forward + fused ones (norms, SiLU-and-mul).",
        *[line for mode in model_modes() for line in ["", f"`{mode}`:", "", *model_table(mode)]],
        *compiled_attention_note(),
        *(["", "![model speed-ups](model_h100.png)"] if plots else []),
        *(_h("Host cost per call") + ["One 4096 x 4096 layer, bf16 activations.", "", *host_table()] if host else []),
        *_h("Generation: greedy `generate`, transformers Llama at Llama-3-8B widths, 32 layers"),
        "Random prompts, 128 greedy tokens (eager: 16). `graph`: `w8a8.Generator(model, prefill_graphs=True)`, the "
        "same for both models: prefill is the prompt's forward, decode the wall time per token of the graph "
        "replays; the kernel sum is one eager step's CUDA kernel times. `eager`: transformers' `model.generate` "
        "as it runs by default (dynamic cache, no graphs). `mixed-sampled`: `w8a8.Generator(model).generate` on "
        "prompts of P down to about P/2 tokens, left-padded, sampled (temperature 0.7, top-k 50, top-p 0.9); "
        "prefill is a 1-token generate call, decode per token the difference to a 128-token one. bf16 and W8A8 "
        "are timed round by round, except graph and mixed-sampled past 16384 tokens (batch x (prompt + new "
        "tokens)), one model after the other. Eager decode and the small prompts are bound by the host, whose "
        "speed varies from run to run.",
        "",
        *generate_table(),
        *(["", "![generation speed-ups](generate_h100.png)"] if plots else []),
        *_h("Kernel: `scaled_mm`, int8 activations in (x bf16)"),
        *m_table(kern, "w8a8 sm90"),
        "",
        "Every GEMM, geomean over M = 64..8192 (`torch._int_mm` refuses M <= 16 and does not dequantize; "
        "'+ dequant' adds the fp32 scaling in eager PyTorch or under `torch.compile`):",
        "",
        *peer_table(kern),
        *(["", f"![kernel speed-ups]({_plot(KERNEL)})"] if plots else []),
        *_h("Layer: `W8A8Linear` (bf16 in, dynamic per-token quantization, bf16 out; x bf16)"),
        *m_table(lin, "W8A8Linear sm90", extra="W8A8Linear triton"),
        *(["", f"![end-to-end speed-ups]({_plot(LAYER)})"] if plots else []),
        "",
        "What the layer adds to its GEMM (sm90): `W8A8Linear`'s time minus the GEMM's alone on the codes and "
        "scales the layer's quantizer makes of the same x, same weights, replays interleaved; in us, and in units "
        "of the quantizer's ideal time (its bytes at the measured HBM rate). 'within noise': the difference is smaller "
        "than the replays' spread (max - min, us), as where the GEMM runs at the power cap for milliseconds:",
        "",
        *layer_over_kernel_table(lin, load(LAYER)["ceilings"]),
        *_h("Activation quantization (per token, bf16 in, read from HBM; us and % of the measured HBM rate; 'off': off "
            "target, below 85% where the ideal time is >= 10 us, else more than 1.5 us over it)"),
        *quant_table(),
        *_h("Split-K and stream-K (sm90, `w8a8.ops.scaled_mm(..., backend=\"sm90\", split_k=, scheduler=)`)"),
        "The heuristic's time, then each decomposition's speed-up over it (above 1: faster than the heuristic).",
        "",
        *split_k_table(),
        *_h("Tensor parallel (Llama-3-70B MLP: gate_up column-, down row-parallel, 2 GPUs)"),
        "A CUDA graph of 4 blocks per replay, median of 30 replays, rank 0's clock; `reduce=int32` is the exact default.",
        "",
        *tp_table(),
        *_h("Sources"),
        "Each file, the build and date that wrote it, and the command that measures it again.",
        "",
        *_table(["file", "holds", "device, date", "command"], files),
        "",
    ])


def render_evidence() -> str:
    """docs/EVIDENCE.md from evidence.json: each rule of the heuristics, its reason and its measurements."""
    doc = load(EVIDENCE)
    out = ["# Evidence", "",
           "Generated by `python -m benchmarks.report` from `benchmarks/results/evidence.json`; do not edit by hand. "
           "Each heuristic in the code states its rule, a one-line reason and an id; this page holds the "
           "measurements behind each id. " + doc.get("about", ""), "",
           "Rules: " + ", ".join(f"[{r['id']}](#{r['id'].replace('.', '')})" for r in doc["rules"]) + "."]
    for rule in doc["rules"]:
        out += ["", f"## {rule['id']}", "", f"**Rule.** {rule['rule']}", "", f"**Why.** {rule['reason']}", "",
                f"**Where.** `{rule['where']}`", ""]
        out += [f"- {figure}" for figure in rule["figures"]]
        out += ["", f"Measured on: {rule['measured']}."]
    return "\n".join(out) + "\n"


def _plots() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kern, lin = load(KERNEL)["rows"], load(LAYER)["rows"]
    for rows, impls, name in ((kern, list(PEERS)[:3], _plot(KERNEL)),
                              (lin, ["W8A8Linear sm90", "W8A8Linear triton"], _plot(LAYER))):
        fig, axes = plt.subplots(2, 4, figsize=(16, 7), sharey=True)
        for ax, (n, k) in zip(axes.flat, _shapes(rows)):
            for impl in impls:
                pts = sorted((r["M"], r["x_bf16"]) for r in rows if r["impl"] == impl and (r["N"], r["K"]) == (n, k))
                ax.plot(*zip(*pts), marker="o", label=impl)
            ax.axhline(1.0, color="gray", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set(title=f"N={n}, K={k}", xlabel="M (tokens)")
        axes[0][0].set(ylabel="speed-up over bf16 F.linear, H100")
        axes[0][0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(DOCS / name, dpi=80)
    model = load("model_h100.json")["rows"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    wall = {(r["impl"], r["mode"], r["M"]): r["wall_us"] for r in model}
    for mode, style in zip(model_modes(), ("o", "s", "^")):
        ours = sorted((r["M"], r) for r in model if r["impl"] == "w8a8" and r["mode"] == mode)
        ax.plot([m for m, _ in ours], [r["x_bf16"] for _, r in ours], style + "-", label=f"{mode}, GPU time")
        ax.plot([m for m, _ in ours], [wall["bf16", mode, m] / r["wall_us"] for m, r in ours], style + ":",
                label=f"{mode}, wall time")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="tokens per forward", ylabel="W8A8 x bf16", title="transformers Llama, Llama-3-8B widths, 4 layers, H100")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(DOCS / "model_h100.png", dpi=80)
    gen = [r for r in load("generate_h100.json")["rows"] if r["recipe"] == "graph" and r["impl"] == "w8a8"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for prompt, style in zip(sorted({r["prompt"] for r in gen}), ("o-", "s-", "^-")):
        for key, label in (("x_bf16_decode", "decode"), ("x_bf16_prefill", "prefill")):
            pts = sorted((r["batch"], r[key]) for r in gen if r["prompt"] == prompt)
            ax.plot(*zip(*pts), style if key == "x_bf16_decode" else style[0] + ":", label=f"{label}, prompt {prompt}")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="batch", ylabel="W8A8 x bf16", title="greedy generation, w8a8.Generator, Llama-3-8B widths, 32 layers, H100")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(DOCS / "generate_h100.png", dpi=80)


def main() -> int:
    (DOCS / "PERFORMANCE.md").write_text(render_markdown())
    (DOCS / "EVIDENCE.md").write_text(render_evidence())
    try:
        _plots()
    except ImportError:
        print("matplotlib is not installed: the plots were not redrawn", file=sys.stderr)
    print(f"wrote {DOCS / 'PERFORMANCE.md'} and {DOCS / 'EVIDENCE.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
