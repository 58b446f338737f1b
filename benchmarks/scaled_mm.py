"""Kernel-level benchmark: scaled_mm backends against bf16 F.linear and torch._int_mm, same run.

Activations are already int8 here (the kernel alone); ``benchmarks.linear`` times
the module end to end, activation quantization included. ``--activations quantized`` feeds the
kernels the per-token quantizer's codes of the bf16 x (what ``W8A8Linear`` runs them on) instead
of uniform random codes.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

import w8a8
from w8a8 import padding, reference
from benchmarks import harness
from benchmarks.sweep import ops_for

# The peer rows: torch._int_mm alone (cuBLASLt, int32 out), and with an fp32 dequant in eager and compiled.
INT_MM = "int_mm"
# The sm90 row on codes in the quantizers' row-padded layout (M = 65..256 only).
PRODUCER_ROWS = "w8a8 sm90, quantizer layout"


def _int_mm_dequant(a, w, a_scale, w_scale):
    """The plain-torch W8A8 GEMM users write today: cuBLAS int8, then dequantize."""
    return (torch._int_mm(a, w.t()).float() * a_scale * w_scale.reshape(1, -1)).to(torch.bfloat16)


_compiled = {}


def _int_mm_dequant_compiled():
    # One dynamic-shape compile serves the whole grid (a static one would recompile per shape).
    if "fn" not in _compiled:
        _compiled["fn"] = torch.compile(_int_mm_dequant, dynamic=True)
    return _compiled["fn"]


@dataclasses.dataclass
class Operands:
    """Random operands of one (M, N, K), the weights in ``n_sets`` rotated copies."""

    n_sets: int
    w_bf16: list[torch.Tensor]
    w_q: list[torch.Tensor]
    w_s: list[torch.Tensor]
    x: torch.Tensor
    a_q: torch.Tensor
    a_s: torch.Tensor
    int8_bytes: int  # bytes an int8 GEMM with the fused epilogue moves (bf16 out)


def operands(m: int, n: int, k: int, device, activations: str = "uniform") -> Operands:
    """``activations`` (harness.ACTIVATIONS): "uniform" int8 codes over [-128, 127], or "quantized":
    the per-token quantizer's codes and scales of x (reference.quantize_per_token, the same bits
    as the kernels')."""
    n_sets = harness.rotation_count(2 * n * k, device)  # by the bf16 weights, the larger of the two
    x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    if activations == "quantized":
        a_q, a_s = reference.quantize_per_token(x)
    else:
        a_q = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=device)
        a_s = torch.rand(m, 1, device=device) * 1e-2 + 1e-3
    return Operands(
        n_sets=n_sets,
        w_bf16=[torch.randn(n, k, device=device, dtype=torch.bfloat16) * k**-0.5 for _ in range(n_sets)],
        w_q=[torch.randint(-128, 128, (n, k), dtype=torch.int8, device=device) for _ in range(n_sets)],
        w_s=[torch.rand(n, device=device) * 1e-3 + 1e-4 for _ in range(n_sets)],
        x=x, a_q=a_q, a_s=a_s,
        int8_bytes=harness.int8_gemm_bytes(m, n, k),
    )


def bf16_row(ops: Operands, m: int, n: int, k: int, ceilings: dict, device) -> tuple[dict, float]:
    """The baseline row (bf16 F.linear on the same shape, in the same run) and its us per call."""
    t = harness.time_calls([lambda i=i: F.linear(ops.x, ops.w_bf16[i]) for i in range(ops.n_sets)], device)
    row = harness.gemm_row("bf16 F.linear", m, n, k, t, 2 * (m * k + n * k + m * n), ceilings, t.us,
                           peak_key="bf16_flops")
    return row, t.us


def bench_shape(m: int, n: int, k: int, backends: list[str], ceilings: dict, device="cuda",
                configs=(), activations: str = "uniform") -> list[dict]:
    """Rows for one (M, N, K): bf16 F.linear first, then each requested implementation
    (timed together, their replays interleaved)."""
    ops = operands(m, n, k, device, activations)
    n_sets, w_q, w_s, a_q, a_s, int8_bytes = ops.n_sets, ops.w_q, ops.w_s, ops.a_q, ops.a_s, ops.int8_bytes
    # name -> (one call per weight set, bytes moved, the ceiling's key)
    cases = {"bf16 F.linear": ([lambda i=i: F.linear(ops.x, ops.w_bf16[i]) for i in range(n_sets)],
                               2 * (m * k + n * k + m * n), "bf16_flops")}
    if INT_MM in backends and m > 16 and torch.device(device).type == "cuda":
        cases["torch._int_mm (int32 out, no dequant)"] = (
            [lambda i=i: torch._int_mm(a_q, w_q[i].t()) for i in range(n_sets)], m * k + n * k + 4 * m * n, None)
        for name, fn in (("eager", _int_mm_dequant), ("compiled", _int_mm_dequant_compiled())):
            cases[f"torch._int_mm + dequant ({name})"] = (
                [lambda i=i, f=fn: f(a_q, w_q[i], a_s, w_s[i]) for i in range(n_sets)], int8_bytes, None)
    for backend in (b for b in backends if b != INT_MM):
        for config in [""] + (list(configs) if backend == "sm90" else []):
            if not config:
                fn = lambda i, b=backend: w8a8.ops.scaled_mm(a_q, w_q[i], a_s, w_s[i], None, torch.bfloat16, backend=b)
                name = f"w8a8 {backend}"
            else:
                lib = ops_for(config)
                fn = lambda i, c=config, o=lib: o.scaled_mm_sm90(a_q, w_q[i], a_s, w_s[i], None, torch.bfloat16, c)
                name = f"w8a8 sm90 config {config}"
            cases[name] = ([lambda i=i, f=fn: f(i) for i in range(n_sets)], int8_bytes, None)
    if "sm90" in backends and padding.padded_rows(m) != m:
        # The same codes in the layout the package's quantizers return (row-padded storage,
        # w8a8/padding.py), which the sm90 GEMM runs on its padded rows.
        a_rows = padding.empty((m, k), torch.int8, device, pad=True)
        s_rows = padding.empty((m, 1), torch.float32, device, pad=True)
        a_rows.copy_(a_q), s_rows.copy_(a_s)
        cases[PRODUCER_ROWS] = ([lambda i=i: w8a8.ops.scaled_mm(a_rows, w_q[i], s_rows, w_s[i], None, torch.bfloat16)
                                 for i in range(n_sets)], int8_bytes, None)
    timings = harness.time_interleaved({name: case[0] for name, case in cases.items()}, device)
    bf16_us = timings["bf16 F.linear"].us
    return [harness.gemm_row(name, m, n, k, timings[name], moved, ceilings, bf16_us,
                             **({"peak_key": peak} if peak else {}))
            for name, (_, moved, peak) in cases.items()]
