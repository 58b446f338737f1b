"""Launch-shape sweep of the fused producer + quantization Triton kernels (w8a8/triton/fused_quant.py).

    python benchmarks/bench_fused_quant.py [--out results.json]

Times ``_rms_norm_quant_kernel`` (K = 4096, with the residual add) and
``_silu_mul_quant_kernel`` (F = 14336, gate/up the halves of one [M, 28672] GEMM output) at
Llama-3-8B widths for every launch shape below and each token count, beside the per-token
quantizer alone on a tensor of the same size (``quantize_per_token``, Triton), with
``triton.testing.do_bench_cudagraph`` (CUDA-graph replays, median). Prints, per op and M,
the current pick (``fused_config``) and the fastest shape.
"""
from __future__ import annotations

import argparse
import itertools

import torch
import triton
from triton.testing import do_bench_cudagraph

from w8a8.triton import fused_quant
from w8a8.triton.quant_configs import fused_config

M_LIST = (1, 16, 64, 128, 512, 2048, 8192)
HIDDEN, FFN = 4096, 14336


def shapes(k: int):
    """Candidate (single_pass, block_k, rows, warps) for rows of k elements."""
    full = triton.next_power_of_2(k)
    for warps in (4, 8, 16, 32):
        yield (True, full, 1, warps)
    for block, warps in itertools.product((1024, 2048, 4096), (4, 8, 16)):
        if block < full:
            yield (False, block, 1, warps)


def time_rms(m, shape, x, r, w, outs):
    single, block, rows, warps = shape
    q, s, n, tot = outs

    def run():
        fused_quant._rms_norm_quant_kernel[(triton.cdiv(m, rows),)](
            x, r, w, q, s, n, tot, m, HIDDEN, x.stride(0), r.stride(0), 1e-5,
            HAS_RESIDUAL=True, ROWS=rows, BLOCK_K=block, SINGLE_PASS=single, num_warps=warps)

    return do_bench_cudagraph(run) * 1e3


def time_silu(m, shape, g, u, q, s):
    single, block, rows, warps = shape

    def run():
        fused_quant._silu_mul_quant_kernel[(triton.cdiv(m, rows),)](
            g, u, q, s, q, m, FFN, g.stride(0), u.stride(0),
            ROWS=rows, BLOCK_K=block, SINGLE_PASS=single, STORE_PRODUCT=False, num_warps=warps)

    return do_bench_cudagraph(run) * 1e3


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None)
    args = p.parse_args()
    import w8a8

    dev, dt = torch.device("cuda"), torch.bfloat16
    rows_out = []
    for m in M_LIST:
        x = torch.randn(m, HIDDEN, device=dev, dtype=dt)
        r = torch.randn(m, HIDDEN, device=dev, dtype=dt)
        w = torch.rand(HIDDEN, device=dev, dtype=dt) + 0.5
        outs = (torch.empty(m, HIDDEN, dtype=torch.int8, device=dev), torch.empty(m, 1, device=dev),
                torch.empty_like(x), torch.empty_like(x))
        gu = torch.randn(m, 2 * FFN, device=dev, dtype=dt)
        g, u = gu[:, :FFN], gu[:, FFN:]
        q = torch.empty(m, FFN, dtype=torch.int8, device=dev)
        s = torch.empty(m, 1, device=dev)
        quant_k = do_bench_cudagraph(lambda: w8a8.quantize_per_token(x, backend="triton")) * 1e3
        quant_f = do_bench_cudagraph(lambda: w8a8.quantize_per_token(g.contiguous(), backend="triton")) * 1e3
        for op, k, timer, base in (("rms_norm_quant+residual", HIDDEN, lambda sh: time_rms(m, sh, x, r, w, outs), quant_k),
                                   ("silu_mul_quant", FFN, lambda sh: time_silu(m, sh, g, u, q, s), quant_f)):
            pick = fused_config(k, m)
            pick_shape = (pick.single_pass, pick.block_k, pick.rows, pick.num_warps)
            times = {}
            for sh in set(shapes(k)) | {pick_shape}:
                try:
                    times[sh] = timer(sh)
                except Exception as exc:  # out of resources: not a candidate
                    times[sh] = float("inf")
                    print(f"  {op} M={m} {sh}: {type(exc).__name__}")
            best = min(times, key=times.get)
            row = {"op": op, "M": m, "pick": list(pick_shape), "pick_us": round(times[pick_shape], 2),
                   "best": list(best), "best_us": round(times[best], 2), "quantizer_alone_us": round(base, 2),
                   "all": {str(k_): round(v, 2) for k_, v in sorted(times.items(), key=lambda kv: kv[1])}}
            rows_out.append(row)
            print(f"{op:24s} M={m:5d}  pick {pick_shape} {times[pick_shape]:8.2f} us   best {best} {times[best]:8.2f} us"
                  f"   quantizer alone {base:7.2f} us")
    if args.out:
        from w8a8.bench import harness

        harness.write_results(args.out, rows_out, {}, {"kind": "fused_quant_sweep", "timing": "do_bench_cudagraph median"})


if __name__ == "__main__":
    main()
