"""End-to-end benchmark: W8A8Linear (bf16 in, dynamic per-token quantization, bf16 out) vs bf16 F.linear.

Beside each backend's layer, its GEMM alone on the codes and scales that backend's quantizer makes of
the same x (``KERNEL_ROW``), same weights, replays interleaved: the layer's time over its kernel's,
measured in one run (the kernel suite's file is another run, on other codes).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import w8a8
from w8a8 import dispatch
from w8a8 import padding
from benchmarks import harness
from benchmarks.sweep import ops_for

# --sweep rows: both sm90 paths of w8a8::linear forced, whatever the dispatch picks.
SINGLE_OP = "linear sm90, single op"
COMPOSED = "linear sm90, quantize + scaled_mm"
# The kernel row of each backend: f"{KERNEL_ROW} {backend}".
KERNEL_ROW = "scaled_mm on the layer's codes,"


def bench_shape(m: int, n: int, k: int, backends: list[str], ceilings: dict, device="cuda",
                sweep: bool = False, configs=()) -> list[dict]:
    """Rows for one (M, N, K): bf16 F.linear first, then W8A8Linear on each backend; with
    ``sweep`` on sm90 also the single op ``w8a8::linear_sm90`` and the composed path, and the
    single op with its GEMM forced to each of ``configs`` (sm90 table entries; all timed
    together, their replays interleaved)."""
    n_sets = harness.rotation_count(2 * n * k, device)
    linears = [torch.nn.Linear(k, n, bias=False, device=device, dtype=torch.bfloat16) for _ in range(n_sets)]
    x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    cases = {"bf16 F.linear": [lambda l=l: F.linear(x, l.weight) for l in linears]}
    for backend in backends:
        layers = [w8a8.W8A8Linear.from_linear(l, backend=backend) for l in linears]
        cases[f"W8A8Linear {backend}"] = [lambda q=q: q(x) for q in layers]
        # The quantizer the layer runs: the backend's own, else the device's default (sm80).
        quant = backend if backend in dispatch.BACKENDS["quantize_per_token"] else None
        a_q, a_s = w8a8.ops.quantize_per_token(x, backend=quant)
        cases[f"{KERNEL_ROW} {backend}"] = [
            lambda q=q, b=backend: w8a8.ops.scaled_mm(a_q, q.weight, a_s, q.weight_scale, None, torch.bfloat16, backend=b)
            for q in layers]
        if sweep and backend == "sm90" and dispatch.unavailable_reason("quantize_per_token", "sm90", x.device) is None:
            def single_op(q, config=""):
                return ops_for(config).linear_sm90(x, q.weight, q.weight_scale, None, None, None,
                                                  padding.padded_rows(m), config)

            cases[SINGLE_OP] = [lambda q=q: single_op(q) for q in layers]
            cases[COMPOSED] = [lambda q=q: dispatch.linear_composed(x, q.weight, q.weight_scale, None, None, None,
                                                                    mm_backend="sm90") for q in layers]
            for config in configs:
                cases[f"{SINGLE_OP}, config {config}"] = [lambda q=q, c=config: single_op(q, c) for q in layers]
    timings = harness.time_interleaved(cases, device)
    bf16_us = timings["bf16 F.linear"].us
    rows = [harness.gemm_row("bf16 F.linear", m, n, k, timings["bf16 F.linear"], 2 * (m * k + n * k + m * n),
                             ceilings, bf16_us, peak_key="bf16_flops")]
    # Bytes of the unfused path: read x (bf16), write+read q (int8) and scales, read W, write out.
    bytes_e2e = 2 * m * k + 2 * m * k + n * k + 2 * m * n
    rows += [harness.gemm_row(name, m, n, k, timings[name],
                              harness.int8_gemm_bytes(m, n, k) if name.startswith(KERNEL_ROW) else bytes_e2e,
                              ceilings, bf16_us)
             for name in cases if name != "bf16 F.linear"]
    return rows
