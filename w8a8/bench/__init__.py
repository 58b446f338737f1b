"""Benchmarks of w8a8 against bf16 and the other int8 paths: ``python -m w8a8 bench``.

Suites on one harness (``harness.py``):

* ``scaled_mm``: the kernel, int8 activations in;
* ``linear``: ``W8A8Linear`` end to end, quantization included;
* ``split_k``: the sm90 kernels' K decompositions on small-M, long-K shapes (its own grid
  unless ``--shapes`` / ``--m`` are given; CUDA only);
* ``sm80``: the Ampere kernels named on this GPU over M = 1..512 (the ladder's continuity);
* ``model``: transformers' LlamaForCausalLM at Llama-3-8B widths, bf16 vs W8A8, eager and
  compiled (``model.py``);
* ``generate``: the same model generating greedily, bf16 vs W8A8: prefill, decode per token,
  tokens/s, with ``w8a8.Generator`` and transformers' own generate (``generate.py``).

Results go to ``OUT/<suite>_<tag>.json``; ``python -m w8a8.bench.report`` turns committed results into docs/PERFORMANCE.md.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

SUITES = ("scaled_mm", "linear", "split_k", "sm80", "model", "generate")
# The suites `python -m w8a8 bench` runs when --suites is not given.
DEFAULT_SUITES = ("scaled_mm", "linear")


def _shapes(text: str) -> list[tuple[int, int]]:
    try:
        return [tuple(int(v) for v in item.split("x")) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NxK[,NxK...], got {text!r}") from None


def _ints(text: str) -> list[int]:
    """Comma-separated integers; an item ``A..B`` stands for A, A + 1, ..., B."""
    out: list[int] = []
    try:
        for item in text.split(","):
            low, sep, high = item.partition("..")
            out.extend(range(int(low), int(high) + 1) if sep else [int(item)])
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers or A..B ranges, got {text!r}") from None
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    from w8a8.bench import harness

    p.add_argument("--shapes", type=_shapes, default=None,
                   help="NxK,NxK,... (default: Llama-3 8B/70B; the split_k suite: its own decode grid)")
    p.add_argument("--m", type=_ints, default=None, help="token counts M, e.g. 16,64 or 1..256 (default: 1,16,...,8192; split_k: 1..128)")
    p.add_argument("--backends", default=None,
                   help="comma list of sm90, sm80, triton, reference, int_mm (default: what runs on the device)")
    p.add_argument("--suites", default=",".join(DEFAULT_SUITES), help=f"comma list of {', '.join(SUITES)}")
    p.add_argument("--sweep", action="store_true",
                   help="split_k suite: also every split of both decode tiles; sm80 suite: every config at every M; "
                   "linear suite: also both sm90 paths forced (the single op, quantize + scaled_mm)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    p.add_argument("--configs", default="", help="scaled_mm suite, and the linear suite with --sweep: comma list of "
                   "sm90 config names to time beside the heuristic (python -m w8a8 info lists them)")
    p.add_argument("--layers", type=int, default=None,
                   help="model / generate suites: decoder layers (default 4 / 32; tiny: 2)")
    p.add_argument("--size", choices=("llama3-8b", "tiny"), default=None,
                   help="model suite: widths (default llama3-8b on CUDA, tiny on the CPU)")
    p.add_argument("--modes", default=None, help="model suite: comma list of eager, compile (default: both)")
    p.add_argument("--variants", default=None,
                   help="model suite: comma list of w8a8, w8a8-unfused, w8a8-unmerged (default: w8a8)")
    p.add_argument("--prompts", type=_ints, default=None, help="generate suite: prompt lengths (default 128,2048)")
    p.add_argument("--batches", type=_ints, default=None, help="generate suite: batch sizes (default 1,16,64)")
    p.add_argument("--new-tokens", type=int, default=None, help="generate suite: greedy tokens per prompt (default 128)")
    p.add_argument("--recipes", default=None,
                   help="generate suite: comma list of graph, eager, hf-compile (default: graph,eager)")
    p.add_argument("--out", default=None, help="folder for <suite>_<tag>.json (default: print only)")
    p.add_argument("--tag", default=None, help="file name tag (default: h100 / h200 / cpu ... from the device)")


def _default_backends(device: torch.device) -> list[str]:
    from w8a8 import dispatch

    if device.type != "cuda":
        return ["reference"]
    from w8a8.bench.scaled_mm import INT_MM

    best = dispatch.choose("scaled_mm", device)
    return [INT_MM] + [b for b in dict.fromkeys((best, "triton")) if b != "reference"]


def _tag(device: torch.device) -> str:
    if device.type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(device).lower()
    return next((t for t in ("h200", "h100", "a100", "l40", "l4") if t in name), "gpu")


def run(args: argparse.Namespace) -> dict[str, list[dict]]:
    """Run the requested suites; returns {suite: rows} and writes files when ``args.out`` is set."""
    from tqdm.auto import tqdm

    from w8a8 import dispatch
    from w8a8.bench import generate, harness, linear, model, scaled_mm, sm80, split_k

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    chosen = args.backends.split(",") if args.backends else _default_backends(device)
    for b in chosen:
        why = None if b == scaled_mm.INT_MM else dispatch.unavailable_reason("scaled_mm", b, device)
        if why is not None:
            raise SystemExit(f"w8a8 bench: backend {b!r} cannot run on {device}: {why}")
    suites = args.suites.split(",")
    unknown = set(suites) - set(SUITES)
    if unknown:
        raise SystemExit(f"w8a8 bench: unknown suites {sorted(unknown)}; expected {SUITES}")
    for suite, backend in (("split_k", "sm90"), ("sm80", "sm80")):
        why = dispatch.unavailable_reason("scaled_mm", backend, device)
        if suite in suites and why is not None:
            raise SystemExit(f"w8a8 bench: the {suite} suite needs the {backend} backend: {why}")
    ceilings = harness.measure_ceilings(device)
    results = {}
    for suite in suites:
        if suite in ("model", "generate"):  # their own grids, tables and files
            results[suite] = (model if suite == "model" else generate).main(args, device, ceilings)
            continue
        default_shapes, default_m = {"split_k": (split_k.SHAPES, split_k.M_VALUES),
                                     "sm80": (sm80.SHAPES, sm80.M_VALUES)}.get(suite, (harness.DEFAULT_NK,
                                                                                       harness.DEFAULT_M))
        if suite == "sm80":  # one case per shape: the M sweep shares the operands
            cases = [(args.m or default_m, n, k) for (n, k) in (args.shapes or default_shapes)]
        else:
            cases = [(m, n, k) for (n, k) in (args.shapes or default_shapes) for m in (args.m or default_m)]
        rows = []
        for m, n, k in tqdm(cases, desc=f"w8a8 bench {suite}", file=sys.stdout, mininterval=5):
            if suite == "sm80":
                rows += sm80.bench_shape(n, k, m, ceilings, device, sweep=getattr(args, "sweep", False))
            elif suite == "scaled_mm":
                rows += scaled_mm.bench_shape(m, n, k, chosen, ceilings, device, [c for c in args.configs.split(",") if c])
            elif suite == "split_k":
                rows += split_k.bench_shape(m, n, k, ceilings, device, sweep=getattr(args, "sweep", False))
            else:
                rows += linear.bench_shape(m, n, k, [b for b in chosen if b != scaled_mm.INT_MM], ceilings, device,
                                           sweep=getattr(args, "sweep", False),
                                           configs=[c for c in args.configs.split(",") if c])
            if device.type == "cuda":
                torch.cuda.empty_cache()
        print(harness.markdown_table(rows if suite != "sm80" else [r for r in rows if r.get("x_bf16")]))
        for impl in sorted({r["impl"] for r in rows} - {"bf16 F.linear"}):
            vals = [r["x_bf16"] for r in rows if r["impl"] == impl and r["x_bf16"]]
            if vals:
                print(f"{suite}: {impl}: geomean x bf16 {harness.geomean(vals):.3f}, min {min(vals):.3f}")
        if suite == "sm80":
            for r in sm80.worst_jumps(rows):
                print(f"sm80: {r['N']}x{r['K']}: worst step M={r['M'] - 1}->{r['M']}: time x{1 / r['x_prev']:.3f} "
                      f"(limit {sm80.JUMP_LIMIT}), config {r['config']}")
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            path = os.path.join(args.out, f"{suite}_{args.tag or _tag(device)}.json")
            harness.write_results(path, rows, ceilings, {"kind": suite}, device)
            print(f"wrote {path}")
        results[suite] = rows
    return results


def main(argv=None, suites: str | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m w8a8 bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    args = p.parse_args(argv)
    if suites:
        args.suites = suites
    run(args)
    return 0
