"""Host suite: what one layer call costs the host, bf16 ``nn.Linear`` against ``W8A8Linear``.

    python -m benchmarks --suites host [--m 1,16,128] [--shapes 4096x4096] [--out DIR]

Per (M, N, K) and implementation, eager and under ``torch.compile`` (default mode), each under
``torch.inference_mode()`` and under ``torch.no_grad()`` (what transformers' ``generate`` and most
users' loops run under: there every op call also passes the autograd dispatch key):

* ``host_us``: the host's time per call, nothing else: CALLS calls issued back to back
  behind a GPU sleep longer than the loop (the GPU never drains the queue, so the host
  alone sets the pace), median of REPEATS rounds, each of which samples every row's call in
  turn (the host's speed drifts during a run: interleaved, the drift reaches them alike);
* ``loop_us``: what a user's loop sees: CALLS calls and one synchronisation, per call
  (the larger of host and GPU time, where they overlap);
* ``gpu_us``: the GPU time per call, the same call captured in a CUDA graph (replays).

``x_bf16_host`` = nn.Linear's host_us / this row's (above 1: cheaper than bf16) in the
same mode and grad mode; ``x_bf16_loop`` likewise for the loop. The kernel ops alone (eager)
are rows too, for where the time goes: the public ops, the sm90 kernel ops they route to, and
aten's ``empty`` and ``mm`` called the same way (``torch.ops``), the floor of any op call; and
the fused producers (the op, and the eager wrapper the fused modules call) beside the bf16
ops they stand in for (residual add + RMSNorm, SiLU(gate) * up), on [M, K] activations. The
model-level wall time is the model suite's (eager, compiled and ``reduce-overhead``, each with
its GPU kernel sum).
"""
from __future__ import annotations

import time

import torch
from torch import nn

from benchmarks import harness

CALLS = 300
REPEATS = 7
M_VALUES = (1, 16, 128)
SHAPES = ((4096, 4096),)
MODES = ("eager", "compile")
GRAD_MODES = {"inference_mode": torch.inference_mode, "no_grad": torch.no_grad}


def host_sample_us(fn) -> float:
    """The host's time per call over CALLS calls issued back to back behind a GPU sleep longer
    than the loop (no sync inside: the GPU never drains the queue, so the host alone sets the pace)."""
    torch.cuda.synchronize()
    torch.cuda._sleep(100_000_000)  # ~60 ms of GPU time: longer than the loop below
    t0 = time.perf_counter()
    for _ in range(CALLS):
        fn()
    us = (time.perf_counter() - t0) / CALLS * 1e6
    torch.cuda.synchronize()
    return us


def loop_sample_us(fn) -> float:
    """CALLS calls and one synchronisation, per call."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(CALLS):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / CALLS * 1e6


def _cases(m: int, n: int, k: int) -> dict[str, tuple[str, object]]:
    """name -> (mode, callable) for one shape."""
    import w8a8

    lin = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
    layer = w8a8.W8A8Linear.from_linear(lin)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    cases = {}
    for mode in MODES:
        if mode == "compile":
            torch._dynamo.reset()
            run_lin, run_q = torch.compile(lin), torch.compile(layer)
        else:
            run_lin, run_q = lin, layer
        cases[f"nn.Linear {mode}"] = (mode, lambda f=run_lin: f(x))
        cases[f"W8A8Linear {mode}"] = (mode, lambda f=run_q: f(x))
    ops = torch.ops.w8a8
    q, s = w8a8.ops.quantize_per_token(x)
    cases["op w8a8::linear"] = ("eager", lambda: ops.linear(x, layer.weight, layer.weight_scale, None, None, None))
    cases["op w8a8::quantize_per_token"] = ("eager", lambda: ops.quantize_per_token(x))
    cases["op w8a8::scaled_mm"] = ("eager", lambda: ops.scaled_mm(q, layer.weight, s, layer.weight_scale, None,
                                                                   torch.bfloat16))
    # Where an op's host time goes: the kernel ops without the router (w8a8._C built), and what
    # any op called through torch.ops costs (aten's empty: the call and one allocation; aten's
    # mm: that and a cuBLAS launch).
    if hasattr(ops, "linear_sm90"):
        cases["op w8a8::linear_sm90"] = ("eager", lambda: ops.linear_sm90(x, layer.weight, layer.weight_scale,
                                                                          None, None, None))
        cases["op w8a8::quantize_per_token_sm90"] = ("eager", lambda: ops.quantize_per_token_sm90(x))
        cases["op w8a8::scaled_mm_sm90"] = ("eager", lambda: ops.scaled_mm_sm90(q, layer.weight, s, layer.weight_scale,
                                                                                None, torch.bfloat16))
    # The fused producers against the bf16 ops they stand in for in a Llama layer: the op (what a
    # compiled graph calls), the eager wrapper (what the fused modules call: the op where w8a8._C
    # is built, else the Triton kernel without the dispatcher), and transformers' residual add +
    # LlamaRMSNorm and SiLU(gate) * up as aten ops.
    r, w, up = torch.randn_like(x), torch.randn(k, device="cuda", dtype=torch.bfloat16), torch.randn_like(x)
    cases["op w8a8::add_rms_norm_quant"] = ("eager", lambda: ops.add_rms_norm_quant(x, r, w, 1e-5))
    cases["w8a8.ops.rms_norm_quant, residual"] = ("eager", lambda: w8a8.ops.rms_norm_quant(x, w, 1e-5, residual=r))
    cases["bf16 add + RMSNorm"] = ("eager", lambda: _add_rms_norm(x, r, w, 1e-5))
    cases["op w8a8::silu_mul_quant"] = ("eager", lambda: ops.silu_mul_quant(x, up))
    cases["w8a8.ops.silu_mul_quant"] = ("eager", lambda: w8a8.ops.silu_mul_quant(x, up))
    cases["bf16 SiLU(gate) * up"] = ("eager", lambda: torch.nn.functional.silu(x) * up)
    aten = torch.ops.aten
    cases["op aten::empty"] = ("eager", lambda: aten.empty.memory_format([m, n], dtype=torch.bfloat16, device=x.device))
    cases["op aten::mm"] = ("eager", lambda: aten.mm.default(x, lin.weight.t()))
    return cases


def _add_rms_norm(x, residual, weight, eps):
    """transformers' residual add and LlamaRMSNorm, as aten ops (what add_rms_norm_quant replaces)."""
    h = x + residual
    v = h.float()
    v = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
    return weight * v.to(x.dtype), h


def bench_shape(m: int, n: int, k: int) -> list[dict]:
    rows = []
    for grad, context in GRAD_MODES.items():
        with context():
            cases = _cases(m, n, k)
            fns = {name: fn for name, (_, fn) in cases.items()}
            host = harness.interleaved_medians(fns, host_sample_us, REPEATS)
            loop = harness.interleaved_medians(fns, loop_sample_us, REPEATS)
            for name, (mode, fn) in cases.items():
                gpu = harness.time_graph([fn], replays=20).us
                rows.append({"impl": name, "mode": mode, "grad": grad, "M": m, "N": n, "K": k,
                             "host_us": round(host[name], 2), "loop_us": round(loop[name], 2),
                             "gpu_us": round(gpu, 2), "us": round(loop[name], 2)})
    for r in rows:
        base = next((b for b in rows if b["impl"] == f"nn.Linear {r['mode']}" and b["grad"] == r["grad"]), None)
        if base is not None and r["impl"].startswith(("nn.Linear", "W8A8Linear")):
            r["x_bf16_host"] = round(base["host_us"] / r["host_us"], 3)
            r["x_bf16_loop"] = round(base["loop_us"] / r["loop_us"], 3)
            r["x_bf16_gpu"] = round(base["gpu_us"] / r["gpu_us"], 3)
    return rows


def markdown_table(rows: list[dict]) -> str:
    lines = ["| M | N x K | impl | grad | host us | loop us | GPU us | x bf16 host | x bf16 loop |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['M']} | {r['N']} x {r['K']} | {r['impl']} | {r['grad']} | {r['host_us']:.1f} | "
                     f"{r['loop_us']:.1f} | {r['gpu_us']:.1f} | {r.get('x_bf16_host', '-')} | {r.get('x_bf16_loop', '-')} |")
    return "\n".join(lines)


def run(args, device: torch.device, ceilings: dict) -> list[dict]:
    """``python -m benchmarks --suites host``: run, print, write ``host_<tag>.json`` with ``--out``."""
    if device.type != "cuda":
        raise SystemExit("benchmarks: the host suite needs a CUDA GPU (it times the host against the GPU queue)")
    rows = []
    for n, k in args.shapes or SHAPES:
        for m in args.m or M_VALUES:
            rows += bench_shape(m, n, k)
            torch.cuda.empty_cache()
    print(markdown_table(rows))
    if args.out:
        harness.write_suite(args, "host", rows, ceilings,
                            {"kind": "host", "calls": CALLS, "repeats": REPEATS,
                             "compile": "torch.compile(module): default mode; dynamo reset per shape"}, device)
    return rows
