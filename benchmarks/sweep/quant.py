"""The per-token quantizer's launch shapes, alone and before the GEMM (the lab, not the product).

    python -m benchmarks.sweep.quant [--k 4096,8192] [--m 256,1024] [--n 4096] [--out DIR] [--pipelined]

Builds (once; cached in benchmarks/sweep/build_quant) the library ``w8a8_qsweep``: the
product's per-token kernel (csrc/quantize/quantize_per_token.cuh) at every shape of
``quant_shapes.cuh``, bf16 rows in 16-byte vectors. For each (K, M), every shape that holds a row
with the fewest vectors for its thread count, and the two-pass shapes:

* alone: 8 launches back to back in one CUDA graph on the same x (which stays in L2 where it
  fits; the quant suite rotates copies of x instead), the product op (``quantize_per_token_sm90``)
  timed beside them, against the HBM rate;
* in the layer: the shape at the largest shared-memory split, then ``w8a8::scaled_mm_sm90`` on
  N x K int8 weights rotated past L2, beside the product's composed path (the quantizer op,
  then the GEMM op) and its single op (``linear_sm90``); every case's replays interleaved.

Beside them, timed alone: the bounds of any kernel launched as the product launches its quantizer
(``quant_bounds.cu``), an empty grid of M blocks (the launch floor) and the bytes moved without
the arithmetic (bf16 read, one byte per value written, 256 threads x 1..8 vectors). The product
and those copies are timed again with x read from HBM (rows ``from_hbm``: the calls rotate over
copies of x, as the quant suite's do), where the copy is the floor of the suite's figure.

``--pipelined`` times instead the product's ring kernel (a persistent grid with a shared-memory ring
of row groups; ``quant_pipelined.cu``, pipelined_point) at each ring depth and blocks per SM.

A shape whose codes or scales differ from the product's in any bit is reported and not timed.
Needs an sm_90 GPU, nvcc and the package's extension built.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NAMESPACE = "w8a8_qsweep"
SOURCES = ("quant_shapes_plain.cu", "quant_shapes_full.cu", "quant_bounds.cu", "quant_pipelined.cu",
           "quant_shapes_ops.cpp")
COPY_VECS = (1, 2, 4, 8)  # the copy bound's vectors per thread
M_VALUES = (256, 512, 1024, 2048, 4096, 8192)
VEC = 8  # bf16 values in a 16-byte vector


@functools.lru_cache(maxsize=None)
def load():
    """Builds (or reuses) the shape library and loads it; returns ``torch.ops.w8a8_qsweep``."""
    from pathlib import Path

    import torch

    from benchmarks.sweep import build_library

    build_library(NAMESPACE, [os.path.join(HERE, s) for s in SOURCES], Path(HERE) / "build_quant")
    return getattr(torch.ops, NAMESPACE)


def candidates(k: int, shapes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """For each thread count, the table's fewest vectors per thread that hold a row of ``k``
    bf16 values (a slot past the row's end is a load for nothing); then the two-pass shapes."""
    held = {}
    for threads, vecs in shapes:
        if vecs and threads * vecs * VEC >= k and vecs < held.get(threads, 1 << 30):
            held[threads] = vecs
    return sorted(held.items()) + [(t, v) for t, v in shapes if v == 0]


def _pairs(flat: list[int]) -> list[tuple[int, int]]:
    return list(zip(flat[0::2], flat[1::2]))


def _layer_calls(x, n: int):
    """The GEMM after a quantizer of x [M, K], on N x K int8 weights rotated past L2: ``gemm(q, s, i)``
    on weight set i, the set count, and the product's two layer paths as call lists: composed (its
    quantizer op at the default shared-memory split, then the GEMM op) and its single op
    (``linear_sm90``: the quantizer at the largest split, as W8A8Linear runs it)."""
    import torch

    from benchmarks import harness
    from w8a8 import padding

    m, k = x.shape
    n_sets = harness.rotation_count(n * k)
    weights = [torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda") for _ in range(n_sets)]
    w_scales = [torch.rand(n, device="cuda") * 1e-3 + 1e-4 for _ in range(n_sets)]

    def gemm(q, s, i):
        return torch.ops.w8a8.scaled_mm_sm90(q, weights[i], s, w_scales[i], None, torch.bfloat16, "", None, "auto")

    composed = [lambda i=i: gemm(*torch.ops.w8a8.quantize_per_token_sm90(x), i) for i in range(n_sets)]
    single_op = [lambda i=i: torch.ops.w8a8.linear_sm90(x, weights[i], w_scales[i], None, None, None,
                                                        padding.padded_rows(m), "")
                 for i in range(n_sets)]
    return gemm, n_sets, composed, single_op


def _from_hbm_calls(lib, x) -> tuple[list, dict]:
    """x read from HBM, as the quant suite reads it: copies of x to rotate over, and the product's
    and the copy bounds' call lists on them, by name ("product", "copy 256 x <vectors>")."""
    import torch

    from benchmarks import harness

    m, k = x.shape
    xs = [x] + [x.clone() for _ in range(harness.rotation_count(2 * m * k) - 1)]
    cases = {"product": [lambda xi=xi: torch.ops.w8a8.quantize_per_token_sm90(xi) for xi in xs]}
    cases.update({f"copy 256 x {v}": [lambda xi=xi, v=v: lib.copy(xi, v) for xi in xs] for v in COPY_VECS})
    return xs, cases


def sweep_point(lib, k: int, m: int, n: int, ceilings: dict) -> list[dict]:
    """The rows of one (K, M): the product first, then each candidate shape (the quant suite's
    rows, with the layer's time beside them), then the product's single op in the layer."""
    import torch

    from benchmarks import harness, quant

    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    want_q, want_s = torch.ops.w8a8.quantize_per_token_sm90(x)
    gemm, n_sets, composed, single_op = _layer_calls(x, n)
    moved = harness.quantizer_bytes(m, k)

    alone = {"product": lambda: torch.ops.w8a8.quantize_per_token_sm90(x)}
    layer = {"product, composed": composed, "product, single op": single_op}
    rows, differ = [], []
    for threads, vecs in candidates(k, _pairs(lib.shapes())):
        name = f"{threads} x {vecs}" if vecs else f"{threads} x two-pass"
        q, s = lib.per_token(x, threads, vecs, False)
        if not (torch.equal(q, want_q) and torch.equal(s, want_s)):
            differ.append(name)
            continue
        alone[name] = lambda t=threads, v=vecs: lib.per_token(x, t, v, False)
        layer[name] = [lambda i=i, t=threads, v=vecs: gemm(*lib.per_token(x, t, v, True), i) for i in range(n_sets)]
    copies = {f"copy 256 x {v}": lambda v=v: lib.copy(x, v) for v in COPY_VECS}
    t_alone = {name: harness.time_graph([fn] * 8, replays=20) for name, fn in alone.items()}
    t_copies = {name: harness.time_graph([fn] * 8, replays=20) for name, fn in copies.items()}
    t_hbm = harness.time_interleaved(_from_hbm_calls(lib, x)[1], "cuda")  # replays interleaved
    t_empty = harness.time_graph([lambda: lib.empty(x, m)] * 8, replays=20)
    t_layer = harness.time_interleaved(layer, "cuda")
    for name, t in t_alone.items():
        in_layer = t_layer[name if name != "product" else "product, composed"]
        rows.append({**quant.row("quantize_per_token sm90" if name == "product" else "quantize_per_token sweep",
                                 m, k, name, name == "product", t.us, moved, ceilings),
                     "N": n, "layer_us": round(in_layer.us, 3)})
    rows.append({"K": k, "M": m, "N": n, "config": "product, single op", "us": None,
                 "layer_us": round(t_layer["product, single op"].us, 3)})
    rows += [{"K": k, "M": m, "N": n, "config": name, "differs": True} for name in differ]
    rows += [{**quant.row("quantize_per_token bound", m, k, name, False, t.us, 3 * m * k, ceilings), "N": n,
              "bound": True} for name, t in t_copies.items()]
    rows.append({"K": k, "M": m, "N": n, "config": "empty grid", "us": round(t_empty.us, 3), "bound": True})
    rows += [{**quant.row("quantize_per_token sm90" if name == "product" else "quantize_per_token bound", m, k, name,
                          name == "product", t.us, moved if name == "product" else 3 * m * k, ceilings),
              "N": n, "bound": name != "product", "from_hbm": True} for name, t in t_hbm.items()]
    return rows


PIPELINED_BLOCKS_PER_SM = (1, 2, 3, 4)


def pipelined_point(lib, k: int, m: int, n: int, ceilings: dict) -> list[dict]:
    """``--pipelined``: the product's ring kernel (quant_pipelined.cu) at each of its shapes that holds
    a row with the fewest vectors for its thread count, every ring depth, 1..4 blocks per SM, beside
    the product and the copy bounds, every x read from HBM (calls rotating over copies of x),
    replays interleaved; then the product (composed, and as its single op) and the three fastest of
    them before the GEMM, as sweep_point."""
    import torch

    from benchmarks import harness, quant

    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    want_q, want_s = torch.ops.w8a8.quantize_per_token_sm90(x)
    xs, cases = _from_hbm_calls(lib, x)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    moved = harness.quantizer_bytes(m, k)
    table = list(zip(*[iter(lib.pipelined_shapes())] * 3))
    held = {}
    for threads, vecs, _ in table:  # (slots for at most twice the row)
        if 2 * k > threads * vecs * VEC >= k and vecs < held.get(threads, 1 << 30):
            held[threads] = vecs
    differ, ring = [], {}
    for threads, vecs, stages in table:
        if held.get(threads) != vecs:
            continue
        for per_sm in PIPELINED_BLOCKS_PER_SM:
            name = f"ring {threads} x {vecs} x {stages}, {per_sm}/SM"
            args = (threads, vecs, stages, per_sm * sms)
            q, sc = lib.pipelined(x, *args, False)
            if not (torch.equal(q, want_q) and torch.equal(sc, want_s)):
                differ.append(name)
                continue
            ring[name] = args
            cases[name] = [lambda xi=xi, a=args: lib.pipelined(xi, *a, False) for xi in xs]
    t = harness.time_interleaved(cases, "cuda")
    rows = [{**quant.row("quantize_per_token sm90" if name == "product" else
                         "quantize_per_token bound" if name.startswith("copy") else "quantize_per_token ring",
                         m, k, name, name == "product", tm.us, 3 * m * k if name.startswith("copy") else moved,
                         ceilings), "N": n, "bound": name.startswith("copy"), "from_hbm": True}
            for name, tm in t.items()]
    best = sorted(ring, key=lambda nm: t[nm].us)[:3]
    gemm, n_sets, composed, single_op = _layer_calls(x, n)
    layer = {"product": composed, "product, single op": single_op}
    layer.update({nm: [lambda i=i, a=ring[nm]: gemm(*lib.pipelined(x, *a, True), i) for i in range(n_sets)]
                  for nm in best})
    t_layer = harness.time_interleaved(layer, "cuda")
    for r in rows:
        if r["config"] in t_layer:
            r["layer_us"] = round(t_layer[r["config"]].us, 3)
    rows.append({"K": k, "M": m, "N": n, "config": "product, single op", "us": None,
                 "layer_us": round(t_layer["product, single op"].us, 3)})
    rows += [{"K": k, "M": m, "N": n, "config": name, "differs": True} for name in differ]
    return rows


def main(argv: list[str] | None = None) -> int:
    import torch

    from benchmarks import harness, quant

    p = argparse.ArgumentParser(prog="python -m benchmarks.sweep.quant", description=__doc__.split("\n\n")[0])
    p.add_argument("--k", type=harness.parse_ints, default=list(quant.K_VALUES))
    p.add_argument("--m", type=harness.parse_ints, default=list(M_VALUES))
    p.add_argument("--n", type=int, default=4096, help="the layer's output features (default 4096)")
    p.add_argument("--out", default=None, help="folder for quant_shapes_<tag>.json")
    p.add_argument("--pipelined", action="store_true",
                   help="time the ring kernel (pipelined_point) instead of the shape table")
    args = p.parse_args(argv)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        raise SystemExit("benchmarks.sweep.quant: needs an sm_90 GPU")
    import w8a8  # noqa: F401  (registers torch.ops.w8a8)

    lib = load()
    ceilings = harness.measure_ceilings("cuda")
    rows = []
    for k in args.k:
        for m in args.m:
            if args.pipelined:
                point = pipelined_point(lib, k, m, args.n, ceilings)
                rows += point
                timed = {r["config"]: r for r in point if r.get("us") is not None}
                product = timed["product"]
                single = next(r for r in point if r["config"] == "product, single op")
                best = sorted((r for r in point if r.get("op", "").endswith("ring")), key=lambda r: r["us"])
                best_layer = min((r for r in point if "layer_us" in r and r is not product and r is not single),
                                 key=lambda r: r["layer_us"])
                copy = min((r for r in point if r.get("bound")), key=lambda r: r["us"])
                print(f"K={k:5d} M={m:5d} (x from HBM): product {product['us']:7.2f} us ({product['pct_hbm']:5.1f}%, "
                      f"layer {product['layer_us']:8.2f}, single op {single['layer_us']:8.2f}); best {best[0]['config']} {best[0]['us']:7.2f} "
                      f"({best[0]['pct_hbm']:5.1f}%); in layer {best_layer['config']} {best_layer['layer_us']:8.2f}; "
                      f"{copy['config']} {copy['us']:7.2f} ({copy['pct_hbm']:5.1f}%); ideal {product['ideal_us']:6.2f}"
                      + "".join(f"; {r['config']} DIFFERS" for r in point if r.get("differs")), flush=True)
                continue
            point = sweep_point(lib, k, m, args.n, ceilings)
            rows += point
            timed = [r for r in point if r.get("us") is not None and not r.get("bound") and not r.get("from_hbm")]
            hbm = [r for r in point if r.get("from_hbm")]
            hbm_copy = min((r for r in hbm if r["bound"]), key=lambda r: r["us"])
            empty = next(r for r in point if r.get("config") == "empty grid")
            copy = min((r for r in point if r.get("bound") and r is not empty and not r.get("from_hbm")),
                       key=lambda r: r["us"])
            best = min(timed[1:], key=lambda r: r["us"], default=timed[0])
            best_layer = min(timed[1:], key=lambda r: r["layer_us"], default=timed[0])
            print(f"K={k:5d} M={m:5d}: product {timed[0]['us']:7.2f} us ({timed[0]['pct_hbm']:5.1f}%), layer "
                  f"{timed[0]['layer_us']:8.2f}; best alone {best['config']} {best['us']:7.2f} ({best['pct_hbm']:5.1f}%); "
                  f"best in layer {best_layer['config']} {best_layer['layer_us']:8.2f}; bounds: empty grid "
                  f"{empty['us']:5.2f}, {copy['config']} {copy['us']:7.2f} ({copy['pct_hbm']:5.1f}%); x from HBM: "
                  f"product {hbm[0]['us']:7.2f} ({hbm[0]['pct_hbm']:5.1f}%), {hbm_copy['config']} "
                  f"{hbm_copy['us']:7.2f} ({hbm_copy['pct_hbm']:5.1f}%, ideal {hbm_copy['ideal_us']:6.2f})"
                  + "".join(f"; {r['config']} DIFFERS" for r in point if r.get("differs")), flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, f"quant_shapes_{harness.device_tag(torch.device('cuda'))}.json")
        with open(path, "w") as f:
            json.dump({"kind": "quantizer launch shapes", "environment": harness.environment("cuda"),
                       "ceilings": ceilings, "rows": rows}, f, indent=1)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
