"""Turn committed benchmark results into docs/PERFORMANCE.md, CSV files and PNG plots.

    python -m w8a8.bench.report            # reads benchmarks/results/*_h100.json

Every number in docs/PERFORMANCE.md comes from those files; rerun this after a benchmark.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from w8a8.bench import harness

ROOT = Path(__file__).resolve().parents[2]  # the repository (an editable install)
RESULTS = ROOT / "benchmarks" / "results"
DOCS = ROOT / "docs"


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


geomean = harness.geomean


def ratio_table(doc: dict, impls: list[str]) -> str:
    """Speed-up over bf16 F.linear, one row per (N, K), one column per M, per impl."""
    rows = doc["rows"]
    ms = sorted({r["M"] for r in rows})
    shapes = list(dict.fromkeys((r["N"], r["K"]) for r in rows))
    out = []
    for impl in impls:
        out.append(f"\n**{impl}** (x bf16 `F.linear`; geomean {geomean(r['x_bf16'] for r in rows if r['impl'] == impl):.2f})\n")
        out.append("| N x K | " + " | ".join(f"M={m}" for m in ms) + " |")
        out.append("|---|" + "---|" * len(ms))
        for n, k in shapes:
            cells = []
            for m in ms:
                hit = [r for r in rows if r["impl"] == impl and (r["M"], r["N"], r["K"]) == (m, n, k)]
                cells.append(f"{hit[0]['x_bf16']:.2f}" if hit else "-")
            out.append(f"| {n} x {k} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def detail_table(doc: dict) -> str:
    lines = ["| M | N | K | impl | us | TOP/s | GB/s | x bf16 | % of bound | bound |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        lines.append(f"| {r['M']} | {r['N']} | {r['K']} | {r['impl']} | {r['us']:.1f} | {r['tops']:.0f} | {r['gbps']:.0f} | "
                     f"{r['x_bf16'] if r['x_bf16'] is not None else '-'} | {r['pct_of_bound']} | {r['bound']} |")
    return "\n".join(lines)


def plot_speedups(doc: dict, impls: list[str], path: Path, title: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plots", file=sys.stderr)
        return False
    rows = doc["rows"]
    shapes = list(dict.fromkeys((r["N"], r["K"]) for r in rows))
    fig, axes = plt.subplots(2, 4, figsize=(16, 7), sharey=True)
    for ax, (n, k) in zip(axes.flat, shapes):
        for impl in impls:
            pts = sorted((r["M"], r["x_bf16"]) for r in rows if r["impl"] == impl and (r["N"], r["K"]) == (n, k))
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=impl)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_title(f"N={n}, K={k}")
        ax.set_xlabel("M (tokens)")
    axes[0][0].set_ylabel("speed-up over bf16 F.linear")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


def plot_roofline(doc: dict, impls: list[str], path: Path) -> bool:
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 5))
    for impl in impls:
        pts = [(r["M"], r["pct_of_bound"]) for r in doc["rows"] if r["impl"] == impl]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], label=impl, s=14)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M (tokens)")
    ax.set_ylabel("% of the binding ceiling (int8 compute or HBM)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


KERNEL_IMPLS = ["w8a8 cutlass", "w8a8 triton", "torch._int_mm (int32 out, no dequant)",
                "torch._int_mm + dequant (eager)", "torch._int_mm + dequant (compiled)"]
LINEAR_IMPLS = ["W8A8Linear cutlass", "W8A8Linear triton"]


def main() -> int:
    kern, lin = load("scaled_mm_h100.json"), load("linear_h100.json")
    for name in ("scaled_mm_h100", "linear_h100", "quant_h100", "split_k_h100", "decode_h100"):
        harness.write_csv(load(f"{name}.json")["rows"], str(RESULTS / f"{name}.csv"))
    plots = plot_speedups(kern, KERNEL_IMPLS[:3], DOCS / "speedup_scaled_mm_h100.png", "scaled_mm kernel (int8 in) vs bf16 F.linear, H100")
    plots &= plot_speedups(lin, LINEAR_IMPLS, DOCS / "speedup_linear_h100.png", "W8A8Linear end to end vs bf16 F.linear, H100")
    plots &= plot_roofline(kern, KERNEL_IMPLS, DOCS / "roofline_scaled_mm_h100.png")
    (DOCS / "PERFORMANCE.md").write_text(render_markdown(plots))
    print(f"wrote {DOCS / 'PERFORMANCE.md'}")
    return 0


def split_k_section() -> list[str]:
    """The K decompositions of the CUTLASS kernel against data-parallel (benchmarks/bench_split_k.py)."""
    rows = load("split_k_h100.json")["rows"]
    impls = [i for i in dict.fromkeys(r["impl"] for r in rows) if i.startswith("cutlass")]
    head = "| N x K | M | DP tiles | " + " | ".join(i.replace("cutlass ", "") for i in impls) + " |"
    lines = ["## Split-K / stream-K (CUTLASS, int8 in; x data-parallel, us in brackets)", "",
             "`python benchmarks/bench_split_k.py --out benchmarks/results`. 'default' is the heuristic "
             "(`split_k=None`); 'DP tiles' the output tiles the data-parallel config launches (132 SMs). "
             "The sweep behind the heuristic is `benchmarks/results/split_k_sweep_h100.json` (docs/TUNING.md).", "",
             head, "|" + "---|" * (3 + len(impls))]
    for key in dict.fromkeys((r["N"], r["K"], r["M"]) for r in rows):
        cells = {r["impl"]: r for r in rows if (r["N"], r["K"], r["M"]) == key}
        dp = cells["cutlass data-parallel"]
        lines.append(f"| {key[0]} x {key[1]} | {key[2]} | {dp['dp_tiles']} | " + " | ".join(
            f"{cells[i]['x_dp']:.2f} ({cells[i]['us']:.1f})" if i in cells else "-" for i in impls) + " |")
    return lines + [""]


def decode_gemv_section() -> list[str]:
    """The sm90 op at M <= 4 since the decode GEMV (benchmarks/results/scaled_mm_decode_h100.json)."""
    rows = load("scaled_mm_decode_h100.json")["rows"]
    lines = ["## Decode kernel (M <= 4: the dp4a GEMV behind the sm90 op)", "",
             "`python benchmarks/bench_scaled_mm.py --m 1,2,4 --out benchmarks/results --tag decode_h100`, same method. "
             "The grid tables above were taken before the GEMV existed: their M = 1 CUTLASS rows are the swap-AB "
             "CUTLASS tile, which the GEMV replaced for M <= 4 (sweep of both: docs/TUNING.md).", "",
             "| M | N | K | bf16 us | w8a8 cutlass us | x bf16 | GB/s | w8a8 triton x bf16 |", "|---|---|---|---|---|---|---|---|"]
    for key in dict.fromkeys((r["M"], r["N"], r["K"]) for r in rows):
        cells = {r["impl"]: r for r in rows if (r["M"], r["N"], r["K"]) == key}
        bf16, cut, tri = cells.get("bf16 F.linear"), cells.get("w8a8 cutlass"), cells.get("w8a8 triton")
        if bf16 and cut:
            triton = f"{tri['x_bf16']:.2f}" if tri else "-"
            lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {bf16['us']:.1f} | {cut['us']:.1f} | {cut['x_bf16']:.2f} | "
                         f"{cut['gbps']:.0f} | {triton} |")
    cut = [r["x_bf16"] for r in rows if r["impl"] == "w8a8 cutlass"]
    lines += ["", f"Geomean x bf16: CUTLASS op {geomean(cut):.2f} (min {min(cut):.2f})."]
    return lines + [""]


def decode_section() -> list[str]:
    """Host time per layer call and decode-step times (benchmarks/bench_decode.py)."""
    rows = load("decode_h100.json")["rows"]
    lines = ["## Dispatch overhead and decode steps", "",
             "`python benchmarks/bench_decode.py --out benchmarks/results/decode_h100.json` (docs/INFERENCE.md).", "",
             "| host time per call, M = 1, 4096 x 4096 | us | x bf16 nn.Linear |", "|---|---|---|"]
    lines += [f"| {r['impl']} | {r['us']:.1f} | {r['x_bf16_host']} |" for r in rows if r["what"] == "host time per call"]
    lines += ["", "| decode step, batch 1, 4 blocks of Llama-3-8B widths | bf16 ms | w8a8 ms | speed-up |",
              "|---|---|---|---|"]
    steps = [r for r in rows if r["what"].startswith("decode step")]
    for pattern in dict.fromkeys(r["pattern"] for r in steps):
        bf16 = next(r for r in steps if r["pattern"] == pattern and r["impl"] == "bf16")
        w8 = next(r for r in steps if r["pattern"] == pattern and r["impl"] == "w8a8")
        lines.append(f"| {pattern} | {bf16['ms']:.3f} | {w8['ms']:.3f} | {w8['x_bf16']:.2f}x |")
    return lines + [""]


def render_markdown(plots: bool = True) -> str:
    """docs/PERFORMANCE.md from the committed results (a test checks the two agree)."""
    kern, lin, quant = load("scaled_mm_h100.json"), load("linear_h100.json"), load("quant_h100.json")
    kern_impls, lin_impls = KERNEL_IMPLS, LINEAR_IMPLS
    env, ceil = kern["environment"], kern["ceilings"]
    sq = [r for r in kern["rows"] if r["impl"] == "w8a8 cutlass" and (r["M"], r["N"], r["K"]) == (8192, 8192, 8192)]
    text = [
        "# Performance",
        "",
        "Generated by `python -m w8a8.bench.report` from `benchmarks/results/*_h100.json`; do not edit by hand.",
        "",
        f"Device: {env['device']} ({env['capability']}, {env['sm_count']} SMs), driver {env['driver']}, torch {env['torch']}, "
        f"CUDA {env['cuda']}, Triton {env['triton']}; run {env['date']}.",
        "",
        "Reproduce (on the GPU machine, after `pip install --no-build-isolation -e .`):",
        "",
        "```bash",
        "python -m w8a8 bench --out benchmarks/results --tag h100 \\",
        "  && python benchmarks/bench_quant.py --out benchmarks/results/quant_h100.json && python -m w8a8.bench.report",
        "```",
        "",
        "## Method",
        "",
        "CUDA-graph replays (one graph holds one call per weight set), median of 20 replays divided by the calls per replay; "
        "weight sets rotate so one replay touches more than 3x the 50 MB L2; random data (never zeros); one warm-up outside timing. "
        "Ceilings measured in the same run: "
        f"HBM read {ceil['hbm_read_bytes_per_s'] / 1e12:.2f} TB/s (copy {ceil['hbm_copy_bytes_per_s'] / 1e12:.2f} TB/s read+write), "
        f"bf16 GEMM {ceil['bf16_flops'] / 1e12:.0f} TFLOP/s, cuBLAS int8 `torch._int_mm` {ceil['int8_cublas_ops'] / 1e12:.0f} TOP/s, all at 8192^3. "
        "'% of bound' is the time the slower of (ops at the practical int8 peak of 1450 TOP/s, or the measured bf16 rate for bf16 rows) "
        "and (bytes at the measured HBM read rate) would take, over the measured time. "
        "Compute-bound int8 rows can exceed 100%: the 1450 TOP/s figure is the sustained rate at the board's 700 W cap "
        "(shared/HOPPER-INT8-FACTS.md), and our timed bursts (20 replays of a few milliseconds) are shorter than "
        "the runs that reach that cap. Run-to-run spread: single points moved by up to ~30% between two runs of the "
        "same code at M <= 64 (see benchmarks/results/bench_*.txt); geomeans moved by about 2%.",
        "",
        "Kernel rows take int8 activations (the GEMM with the fused dequant epilogue, bf16 out, per-token x per-channel scales, no bias). "
        "`torch._int_mm` returns raw int32 and does no dequantization (it refuses M <= 16); the '+ dequant' rows add the "
        "fp32 scale multiply and bf16 cast in eager PyTorch and under `torch.compile(dynamic=True)`. torchao was not installed "
        "on the benchmark machine, so it has no rows. "
        "End-to-end rows are `W8A8Linear(x)`: bf16 in, per-token quantization kernel, GEMM, bf16 out.",
        "",
        "## Headline",
        "",
        f"- 8192 x 8192 x 8192 with the fused epilogue (CUTLASS): {sq[0]['tops']:.0f} TOP/s ({sq[0]['x_bf16']:.2f}x bf16)." if sq else "",
        f"- Kernel geomean over the grid: CUTLASS {geomean(r['x_bf16'] for r in kern['rows'] if r['impl'] == 'w8a8 cutlass'):.2f}x bf16, "
        f"Triton {geomean(r['x_bf16'] for r in kern['rows'] if r['impl'] == 'w8a8 triton'):.2f}x.",
        f"- `W8A8Linear` end to end geomean: CUTLASS {geomean(r['x_bf16'] for r in lin['rows'] if r['impl'] == 'W8A8Linear cutlass'):.2f}x bf16 "
        f"(min {min(r['x_bf16'] for r in lin['rows'] if r['impl'] == 'W8A8Linear cutlass'):.2f}), "
        f"Triton {geomean(r['x_bf16'] for r in lin['rows'] if r['impl'] == 'W8A8Linear triton'):.2f}x.",
        "",
        "## Kernel: scaled_mm (int8 activations in)",
        ratio_table(kern, kern_impls),
        "",
        "![kernel speed-ups](speedup_scaled_mm_h100.png)" if plots else "",
        "",
        "![fraction of the binding ceiling](roofline_scaled_mm_h100.png)" if plots else "",
        "",
        "## End to end: W8A8Linear (bf16 in, dynamic per-token quantization, bf16 out)",
        ratio_table(lin, lin_impls),
        "",
        "![end-to-end speed-ups](speedup_linear_h100.png)" if plots else "",
        "",
        "## Activation quantization (per token, bf16 in)",
        "",
        "`python benchmarks/bench_quant.py`: the Triton kernel (the default quantizer) and the CUDA one "
        "(`csrc/quantize.cu`, used inside W8A8Linear's single-op path up to 64 tokens).",
        "",
        "| kernel | M | K | us | GB/s | % of HBM read |",
        "|---|---|---|---|---|---|",
        *[f"| {r['op'].split()[-1]} | {r['M']} | {r['K']} | {r['us']:.1f} | {r['gbps']:.0f} | {r['pct_hbm']} |"
          for r in quant["rows"]],
        "",
        *split_k_section(),
        *decode_gemv_section(),
        *decode_section(),
        "## All kernel rows",
        "",
        detail_table(kern),
        "",
        "## All end-to-end rows",
        "",
        detail_table(lin),
        "",
    ]
    return "\n".join(text)


if __name__ == "__main__":
    sys.exit(main())
