"""End-to-end benchmark: W8A8Linear (bf16 in, dynamic per-token quantization, bf16 out) vs bf16 F.linear."""
from __future__ import annotations

import torch
import torch.nn.functional as F

import w8a8
from w8a8.bench import harness


def bench_shape(m: int, n: int, k: int, backends: list[str], ceilings: dict, device="cuda") -> list[dict]:
    """Rows for one (M, N, K): bf16 F.linear first, then W8A8Linear on each backend."""
    n_sets = harness.rotation_count(2 * n * k, device)
    linears = [torch.nn.Linear(k, n, bias=False, device=device, dtype=torch.bfloat16) for _ in range(n_sets)]
    x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    rows = []
    bf16 = harness.time_calls([lambda l=l: F.linear(x, l.weight) for l in linears], device)
    rows.append(harness.gemm_row("bf16 F.linear", m, n, k, bf16, 2 * (m * k + n * k + m * n), ceilings, bf16.us,
                                 peak_key="bf16_flops"))
    # Bytes of the unfused path: read x (bf16), write+read q (int8) and scales, read W, write out.
    bytes_e2e = 2 * m * k + 2 * m * k + n * k + 2 * m * n
    for backend in backends:
        layers = [w8a8.W8A8Linear.from_linear(l, backend=backend) for l in linears]
        t = harness.time_calls([lambda q=q: q(x) for q in layers], device)
        rows.append(harness.gemm_row(f"W8A8Linear {backend}", m, n, k, t, bytes_e2e, ceilings, bf16.us))
    return rows
