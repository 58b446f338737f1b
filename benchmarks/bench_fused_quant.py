"""Timings of the fused producer + quantization Triton kernels (w8a8/triton/fused_quant.py).

    python benchmarks/bench_fused_quant.py [--out results.json] [--quick] [--warm-l2] [--rep MS]

(~2 minutes on an H100 with a cold Triton cache, most of it compiling; --quick: under one.)

SiLU-and-mul + per-token quantization (gate / up the halves of one [M, 2F] GEMM output, bf16):
the kernel as it is now at its pick (``fused_config(F, M, op="silu_mul")``) and at candidate
launch shapes, against the kernel before its rewrite (frozen below, ``_old_silu_mul_quant_kernel``)
at that kernel's pick, at F = 14336 (Llama-3-8B) for M = 1 .. 8192, and at F = 11008, 8192,
4096 for a few M (no regression there). RMSNorm + residual add + quantization at K = 4096 at its
pick (its kernel is unchanged: a reference line). Every figure is a CUDA-graph replay median
(``triton.testing.do_bench_cudagraph``); by default each launch reads inputs no other launch of
the graph touched within the last 120 MB (rotating buffers: the L2 holds no operand), so the
time compares with the HBM time, bytes read + written / 3.0e12 B/s, printed beside it as a
percentage (HBM time / kernel time). ``--warm-l2`` times one buffer set (as the earlier sweep
did). Before timing, each M checks the two SiLU kernels' codes, scales and products bit for bit.

The candidates of the new kernel: (BLOCK_K, num_warps, programs per SM); BLOCK_K a multiple of
a power of two (the row held in chunks of it), programs loop over rows (grid: programs per SM
x SMs). ``--quick`` times the pick only.
"""
from __future__ import annotations

import argparse
import time

import torch
import triton
import triton.language as tl
from triton.testing import do_bench_cudagraph

from w8a8.triton import fused_quant, quant_configs
from w8a8.triton.fused_quant import _round_to
from w8a8.triton.quant import _accumulate_stats, _quantize_rows, _rint, _row_scales, _row_stats
from w8a8.triton.quant_configs import fused_config, silu_tile_width

M_LIST = (1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
OTHER_F = (11008, 8192, 4096)
OTHER_M = (16, 512, 4096)
HIDDEN, FFN = 4096, 14336
HBM_BYTES_PER_S = 3.0e12
L2_DEFEAT_BYTES = 120 << 20


# --- the SiLU-mul kernel before its rewrite (frozen, for A/B) -------------------------------------

_OLD_LOG2E = tl.constexpr(1.4426950408889634)
_OLD_LN2_HI = tl.constexpr(0.693145751953125)
_OLD_LN2_LO = tl.constexpr(1.4286068203094172e-06)
_OLD_EXP_MIN = tl.constexpr(-104.0)
_OLD_EXP_MAX = tl.constexpr(89.0)


@triton.jit
def _old_pow2(k):
    return ((k + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _old_exp(v):
    v = tl.minimum(tl.maximum(v, _OLD_EXP_MIN), _OLD_EXP_MAX)
    n = _rint(v * _OLD_LOG2E)
    r = (v - n * _OLD_LN2_HI) - n * _OLD_LN2_LO
    ni = n.to(tl.int32)
    h = ni >> 1
    return tl.exp2(r * _OLD_LOG2E) * _old_pow2(h) * _old_pow2(ni - h)


@triton.jit
def _old_product(g_rows, u_rows, cols, mask, DT: tl.constexpr):
    g = tl.load(g_rows + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_rows + cols, mask=mask, other=0.0).to(tl.float32)
    a = _round_to(tl.math.div_rn(g, 1.0 + _old_exp(-g)), DT)
    return _round_to(a * u, DT)


@triton.jit
def _old_silu_mul_quant_kernel(g_ptr, u_ptr, q_ptr, scale_ptr, p_ptr, R, F, stride_gr, stride_ur,
                               ROWS: tl.constexpr, BLOCK_K: tl.constexpr, SINGLE_PASS: tl.constexpr,
                               STORE_PRODUCT: tl.constexpr):
    DT: tl.constexpr = g_ptr.dtype.element_ty
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_in = rows < R
    rows64 = rows.to(tl.int64)
    g_rows = g_ptr + rows64[:, None] * stride_gr
    u_rows = u_ptr + rows64[:, None] * stride_ur
    out = rows64[:, None] * F
    cols = tl.arange(0, BLOCK_K)[None, :]
    if SINGLE_PASS:
        mask = row_in[:, None] & (cols < F)
        p = _old_product(g_rows, u_rows, cols, mask, DT)
        if STORE_PRODUCT:
            tl.store(p_ptr + out + cols, p.to(DT), mask=mask)
        amax, bad = _row_stats(p)
    else:
        amax = tl.zeros([ROWS, BLOCK_K], dtype=tl.float32)
        bad = tl.zeros([ROWS, BLOCK_K], dtype=tl.int1)
        for k0 in range(0, F, BLOCK_K):
            mask = row_in[:, None] & (cols + k0 < F)
            p = _old_product(g_rows + k0, u_rows + k0, cols, mask, DT)
            if STORE_PRODUCT:
                tl.store(p_ptr + out + k0 + cols, p.to(DT), mask=mask)
            amax, bad = _accumulate_stats(amax, bad, p)
        amax, bad = tl.max(amax, axis=1), tl.max(bad.to(tl.int32), axis=1)
    scale, safe_scale, quantizable = _row_scales(amax, bad)
    tl.store(scale_ptr + rows, scale, mask=row_in)
    if SINGLE_PASS:
        tl.store(q_ptr + out + cols, _quantize_rows(p, safe_scale, quantizable), mask=mask)
    else:
        for k0 in range(0, F, BLOCK_K):
            mask = row_in[:, None] & (cols + k0 < F)
            p = _old_product(g_rows + k0, u_rows + k0, cols, mask, DT)
            tl.store(q_ptr + out + k0 + cols, _quantize_rows(p, safe_scale, quantizable), mask=mask)


# --- launches -------------------------------------------------------------------------------------


def old_silu(g, u, q, s, p=None):
    m, f = g.shape
    c = fused_config(f, m)  # the previous rule (the default op's branch is unchanged)
    _old_silu_mul_quant_kernel[(triton.cdiv(m, c.rows),)](
        g, u, q, s, p if p is not None else q, m, f, g.stride(0), u.stride(0),
        ROWS=c.rows, BLOCK_K=c.block_k, SINGLE_PASS=c.single_pass, STORE_PRODUCT=p is not None, num_warps=c.num_warps)


def new_silu(g, u, q, s, shape, p=None):
    """shape: (block_k, num_warps, programs per SM); rows = 1, single pass when block_k >= F."""
    block_k, warps, per_sm = shape
    m, f = g.shape
    single = block_k >= f
    programs = min(m, SMS * per_sm) if single else m
    fused_quant._silu_mul_quant_kernel[(programs,)](
        g, u, q, s, p if p is not None else q, m, f, g.stride(0), u.stride(0),
        ROWS=1, BLOCK_K=block_k, SINGLE_PASS=single, STORE_PRODUCT=p is not None, num_warps=warps)


def new_pick(f: int, m: int):
    c = fused_config(f, m, op="silu_mul")
    assert c.rows == 1, c
    return (c.block_k, c.num_warps, quant_configs.FUSED_SILU_PROGRAMS_PER_SM if c.single_pass else 0)


def candidates(f: int, m: int):
    pick = new_pick(f, m)
    tile = silu_tile_width(f)
    shapes = {pick}
    for warps in (8, 16, 32):
        shapes.add((tile, warps, 1))
    shapes.add((tile, 16, 2))
    shapes.add((triton.next_power_of_2(f), 32, 1))  # the padded tile of the earlier kernel
    return sorted(shapes)


def silu_buffers(m: int, f: int, dev):
    """Buffer sets (gate/up halves of [m, 2f], codes, scales), as many as it takes to rotate
    through L2_DEFEAT_BYTES."""
    per_set = m * f * 5
    n = 1 if ARGS.warm_l2 else max(1, -(-L2_DEFEAT_BYTES // per_set))
    sets = []
    for _ in range(n):
        gu = torch.randn(m, 2 * f, device=dev, dtype=torch.bfloat16) * 3
        sets.append((gu[:, :f], gu[:, f:], torch.empty(m, f, dtype=torch.int8, device=dev),
                     torch.empty(m, 1, device=dev)))
    return sets


def time_rotating(launch, sets) -> float:
    """us per launch, each launch on the next buffer set."""
    i = [0]

    def run():
        launch(*sets[i[0] % len(sets)])
        i[0] += 1

    return do_bench_cudagraph(run, rep=ARGS.rep, return_mode="median") * 1e3


def check_silu_exact(g, u):
    """The two SiLU kernels' codes, scales and products, bit for bit."""
    m, f = g.shape
    outs = []
    for which in ("old", "new"):
        q = torch.empty(m, f, dtype=torch.int8, device=g.device)
        s = torch.empty(m, 1, device=g.device)
        p = torch.empty(m, f, dtype=g.dtype, device=g.device)
        if which == "old":
            old_silu(g, u, q, s, p)
        else:
            new_silu(g, u, q, s, new_pick(f, m), p)
        outs.append((q, s, p))
    (q0, s0, p0), (q1, s1, p1) = outs
    same = (torch.equal(q0, q1) and torch.equal(s0.nan_to_num(0).view(torch.int32), s1.nan_to_num(0).view(torch.int32))
            and torch.equal(s0.isnan(), s1.isnan()) and torch.equal(p0.view(torch.int16), p1.view(torch.int16)))
    assert same, f"F={f} M={m}: the new kernel's outputs differ from the previous kernel's"


def row(op, f, m, impl, shape, us, hbm_us, **extra):
    return {"op": op, "F": f, "M": m, "impl": impl, "shape": list(shape) if shape else None, "us": round(us, 2),
            "hbm_us": round(hbm_us, 2), "pct_of_hbm": round(100 * hbm_us / us, 1), **extra}


def bench_silu(f: int, m_list, sweep: bool, out: list, dev) -> None:
    for m in m_list:
        sets = silu_buffers(m, f, dev)
        g, u = sets[0][0], sets[0][1]
        g[0, :3] = torch.tensor([-200.0, 90.0, -88.5])  # exp's ends, in the exactness check
        check_silu_exact(g, u)
        hbm_us = (m * f * 5 + m * 4) / HBM_BYTES_PER_S * 1e6
        old_us = time_rotating(lambda g, u, q, s: old_silu(g, u, q, s), sets)
        old_c = fused_config(f, m)
        pick = new_pick(f, m)
        times = {}
        for shape in (candidates(f, m) if sweep else [pick]):
            try:
                times[shape] = time_rotating(lambda g, u, q, s, shape=shape: new_silu(g, u, q, s, shape), sets)
            except Exception as exc:  # out of resources: not a candidate
                times[shape] = float("inf")
                print(f"  silu F={f} M={m} {shape}: {type(exc).__name__}: {exc}"[:200])
        best = min(times, key=times.get)
        old_shape = (old_c.block_k, old_c.num_warps, old_c.single_pass)
        out.append(row("silu_mul_quant", f, m, "old", old_shape, old_us, hbm_us))
        out.append(row("silu_mul_quant", f, m, "new", pick, times[pick], hbm_us, best=list(best),
                       best_us=round(times[best], 2), speedup=round(old_us / times[pick], 2),
                       all={str(k): round(v, 2) for k, v in sorted(times.items(), key=lambda kv: kv[1])}))
        print(f"silu F={f:5d} M={m:5d}  HBM {hbm_us:8.2f} us | old {old_us:8.2f} us {100 * hbm_us / old_us:5.1f}%"
              f" | new {pick} {times[pick]:8.2f} us {100 * hbm_us / times[pick]:5.1f}%  x{old_us / times[pick]:4.2f}"
              f" | best {best} {times[best]:8.2f} us {100 * hbm_us / times[best]:5.1f}%", flush=True)
        del sets, g, u


def bench_norm(m_list, out: list, dev) -> None:
    k = HIDDEN
    for m in m_list:
        per_set = m * k * 9
        n = 1 if ARGS.warm_l2 else max(1, -(-L2_DEFEAT_BYTES // per_set))
        w = torch.rand(k, device=dev, dtype=torch.bfloat16) + 0.5
        bf16 = dict(device=dev, dtype=torch.bfloat16)
        sets = [(torch.randn(m, k, **bf16), torch.randn(m, k, **bf16), torch.empty(m, k, dtype=torch.int8, device=dev),
                 torch.empty(m, 1, device=dev), torch.empty(m, k, **bf16), torch.empty(m, k, **bf16))
                for _ in range(n)]
        c = fused_config(k, m)

        def launch(x, r, q, s, normed, total):
            fused_quant._rms_norm_quant_kernel[(triton.cdiv(m, c.rows),)](
                x, r, w, q, s, normed, total, m, k, x.stride(0), r.stride(0), 1e-5,
                HAS_RESIDUAL=True, ROWS=c.rows, BLOCK_K=c.block_k, SINGLE_PASS=c.single_pass, num_warps=c.num_warps)

        us = time_rotating(launch, sets)
        hbm_us = (m * k * 9 + k * 2 + m * 4) / HBM_BYTES_PER_S * 1e6  # x, residual in; normed, sum, codes out
        out.append(row("rms_norm_quant+residual", k, m, "current", (c.block_k, c.num_warps, c.single_pass), us, hbm_us))
        print(f"norm K={k:5d} M={m:5d}  HBM {hbm_us:8.2f} us | {us:8.2f} us {100 * hbm_us / us:5.1f}%", flush=True)
        del sets


def main() -> None:
    global ARGS, SMS
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None)
    p.add_argument("--quick", action="store_true", help="the new kernel at its pick only (no shape sweep)")
    p.add_argument("--warm-l2", action="store_true", help="one buffer set: inputs L2-resident where they fit")
    p.add_argument("--rep", type=int, default=10, help="ms of launches per CUDA graph (do_bench_cudagraph rep)")
    ARGS = p.parse_args()
    dev = torch.device("cuda")
    SMS = torch.cuda.get_device_properties(dev).multi_processor_count
    t0 = time.time()
    rows_out: list = []
    bench_silu(FFN, M_LIST, not ARGS.quick, rows_out, dev)
    for f in OTHER_F:
        bench_silu(f, OTHER_M, False, rows_out, dev)
    bench_norm(M_LIST, rows_out, dev)
    print(f"({time.time() - t0:.0f} s)")
    if ARGS.out:
        from w8a8.bench import harness

        harness.write_results(ARGS.out, rows_out, {}, {
            "kind": "fused_quant_sweep", "timing": "do_bench_cudagraph median",
            "l2": ("warm (one buffer set)" if ARGS.warm_l2
                   else f"cold (buffers rotated over {L2_DEFEAT_BYTES >> 20} MB)"),
            "hbm_bytes_per_s": HBM_BYTES_PER_S})
        print(f"wrote {ARGS.out}")


ARGS = None
SMS = 0

if __name__ == "__main__":
    main()
