"""``python -m benchmarks``: w8a8 against bf16 and the other int8 paths, suite by suite.

Grid suites (every (N, K) of ``--shapes`` at every M of ``--m``, one harness):

* ``scaled_mm``: the kernel, int8 activations in (uniform random codes, or with
  ``--activations quantized`` the per-token quantizer's codes of a bf16 x);
* ``linear``: ``W8A8Linear`` end to end, quantization included;
* ``split_k``: the sm90 kernels' K decompositions on small-M, long-K shapes (its own grid
  unless ``--shapes`` / ``--m`` are given; CUDA only);
* ``sm80``: the Ampere kernels named on this GPU over M = 1..512 (the ladder's continuity).

Suites with grids of their own:

* ``quant``: the per-token quantizers alone, against the bytes they must move;
* ``model``: transformers' LlamaForCausalLM at Llama-3-8B widths, bf16 vs W8A8, eager and
  compiled (``model.py``);
* ``generate``: the same model generating greedily with ``w8a8.Generator`` and transformers'
  own generate (``generate.py``);
* ``host``: host time per layer call and the decode step's wall time (``host.py``).

``--suites product`` runs the product grid: scaled_mm, linear, quant, model, generate, host.
Results go to ``OUT/<suite>_<tag>.json``; ``python -m benchmarks.report`` turns the committed
ones into docs/PERFORMANCE.md.
"""
from __future__ import annotations

import argparse
import sys

import torch

from benchmarks import harness

GRID_SUITES = ("scaled_mm", "linear", "split_k", "sm80")
OWN_SUITES = ("quant", "model", "generate", "host")
SUITES = GRID_SUITES + OWN_SUITES
PRODUCT = ("scaled_mm", "linear", "quant", "model", "generate", "host")
# The suites run when --suites is not given.
DEFAULT_SUITES = ("scaled_mm", "linear")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suites", default=",".join(DEFAULT_SUITES),
                   help=f"comma list of {', '.join(SUITES)}, or 'product' ({', '.join(PRODUCT)})")
    p.add_argument("--shapes", type=harness.parse_shapes, default=None,
                   help="NxK,NxK,... (default: Llama-3 8B/70B; the split_k suite: its own decode grid)")
    p.add_argument("--m", type=harness.parse_ints, default=None,
                   help="token counts M, e.g. 16,64 or 1..256 (default: 1,16,...,8192; split_k: 1..128)")
    p.add_argument("--k", type=harness.parse_ints, default=None, help="quant suite: K values (default 4096,8192,14336,28672)")
    p.add_argument("--backends", default=None,
                   help="comma list of sm90, sm80, triton, reference, int_mm (default: what runs on the device)")
    p.add_argument("--sweep", action="store_true",
                   help="split_k suite: also every split of both decode tiles; sm80 suite: every config at every M; "
                   "linear suite: also both sm90 paths forced (the single op, quantize + scaled_mm); quant suite: "
                   "every Triton launch config")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    p.add_argument("--activations", choices=harness.ACTIVATIONS, default="uniform",
                   help="scaled_mm suite: int8 activation codes uniform over [-128, 127] (default), or the "
                        "per-token quantizer's codes of a bf16 randn x, as W8A8Linear runs the kernel")
    p.add_argument("--configs", default="", help="scaled_mm suite, and the linear suite with --sweep: comma list of "
                   "sm90 config names to time beside the heuristic (w8a8.dispatch.config_names('sm90'))")
    p.add_argument("--layers", type=int, default=None,
                   help="model / generate suites: decoder layers (default 4 / 32; tiny: 2)")
    p.add_argument("--size", choices=("llama3-8b", "tiny"), default=None,
                   help="model suite: widths (default llama3-8b on CUDA, tiny on the CPU)")
    p.add_argument("--modes", default=None, help="model suite: comma list of eager, compile (default: both)")
    p.add_argument("--variants", default=None,
                   help="model suite: comma list of w8a8, w8a8-unfused, w8a8-unmerged (default: w8a8)")
    p.add_argument("--prompts", type=harness.parse_ints, default=None,
                   help="generate suite: prompt lengths (default 128,2048)")
    p.add_argument("--batches", type=harness.parse_ints, default=None,
                   help="generate suite: batch sizes (default 1,16,64)")
    p.add_argument("--new-tokens", type=int, default=None, help="generate suite: greedy tokens per prompt (default 128)")
    p.add_argument("--recipes", default=None,
                   help="generate suite: comma list of graph, graph-plain, eager, hf-compile (default: graph,eager)")
    p.add_argument("--out", default=None, help="folder for <suite>_<tag>.json (default: print only)")
    p.add_argument("--tag", default=None, help="file name tag (default: h100 / h200 / cpu ... from the device)")


def _default_backends(device: torch.device) -> list[str]:
    from w8a8 import dispatch

    if device.type != "cuda":
        return ["reference"]
    from benchmarks.scaled_mm import INT_MM

    best = dispatch.choose("scaled_mm", device)
    return [INT_MM] + [b for b in dict.fromkeys((best, "triton")) if b != "reference"]


def _suites(text: str) -> list[str]:
    suites = []
    for name in text.split(","):
        suites += list(PRODUCT) if name == "product" else [name]
    unknown = set(suites) - set(SUITES)
    if unknown:
        raise SystemExit(f"benchmarks: unknown suites {sorted(unknown)}; expected {SUITES} or 'product'")
    return list(dict.fromkeys(suites))


def _grid(suite: str, args, device, chosen: list[str], ceilings: dict) -> list[dict]:
    from tqdm.auto import tqdm

    from benchmarks import linear, scaled_mm, sm80, split_k
    from benchmarks.scaled_mm import INT_MM

    default_shapes, default_m = {"split_k": (split_k.SHAPES, split_k.M_VALUES),
                                 "sm80": (sm80.SHAPES, sm80.M_VALUES)}.get(suite, (harness.DEFAULT_NK,
                                                                                   harness.DEFAULT_M))
    configs = [c for c in args.configs.split(",") if c]
    if suite == "sm80":  # one case per shape: the M sweep shares the operands
        cases = [(args.m or default_m, n, k) for (n, k) in (args.shapes or default_shapes)]
    else:
        cases = [(m, n, k) for (n, k) in (args.shapes or default_shapes) for m in (args.m or default_m)]
    rows = []
    for m, n, k in tqdm(cases, desc=f"benchmarks {suite}", file=sys.stdout, mininterval=5):
        if suite == "sm80":
            rows += sm80.bench_shape(n, k, m, ceilings, device, sweep=args.sweep)
        elif suite == "scaled_mm":
            rows += scaled_mm.bench_shape(m, n, k, chosen, ceilings, device, configs, args.activations)
        elif suite == "split_k":
            rows += split_k.bench_shape(m, n, k, ceilings, device, sweep=args.sweep)
        else:
            rows += linear.bench_shape(m, n, k, [b for b in chosen if b != INT_MM], ceilings, device,
                                       sweep=args.sweep, configs=configs)
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
        described = {"kind": suite, **({"activations": args.activations} if suite == "scaled_mm" else {})}
        harness.write_suite(args, suite, rows, ceilings, described, device)
    return rows


def run(args: argparse.Namespace) -> dict[str, list[dict]]:
    """Run the requested suites; returns {suite: rows} and writes files when ``args.out`` is set."""
    import importlib

    from w8a8 import dispatch
    from benchmarks.scaled_mm import INT_MM

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    chosen = args.backends.split(",") if args.backends else _default_backends(device)
    for b in chosen:
        why = None if b == INT_MM else dispatch.unavailable_reason("scaled_mm", b, device)
        if why is not None:
            raise SystemExit(f"benchmarks: backend {b!r} cannot run on {device}: {why}")
    suites = _suites(args.suites)
    for suite, backend in (("split_k", "sm90"), ("sm80", "sm80")):
        why = dispatch.unavailable_reason("scaled_mm", backend, device)
        if suite in suites and why is not None:
            raise SystemExit(f"benchmarks: the {suite} suite needs the {backend} backend: {why}")
    ceilings = harness.measure_ceilings(device)
    results = {}
    for suite in suites:
        if suite in OWN_SUITES:
            results[suite] = importlib.import_module(f"benchmarks.{suite}").run(args, device, ceilings)
        else:
            results[suite] = _grid(suite, args, device, chosen, ceilings)
    return results


def main(argv=None, suites: str | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    args = p.parse_args(argv)
    if suites:
        args.suites = suites
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
