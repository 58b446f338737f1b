"""Quant suite: the per-token (dynamic) quantizers alone, against the bytes they must move.

    python -m benchmarks --suites quant [--m M,...] [--k K,...] [--sweep] [--out DIR]

Bytes counted: x read once (bf16) + q written (int8) + scales written (fp32); ``ideal_us``
is those bytes at the measured HBM rate. The calls rotate over copies of x (up to 64) that
together exceed 3x L2 where 64 do (``harness.rotation_count``), so that x is read from HBM: one
x called back to back stays in L2 (a copy kernel on it ran past 100% of the HBM rate up to about
15M values, M x K = 1024 x 14336, H200). ``on_target``: at least TARGET_PCT_HBM % of that rate
where the ideal time is at least TARGET_MIN_IDEAL_US, else within TARGET_SLACK_US of the ideal
(below it, the launch dominates). The default grid: M = 1..8192 and the K values of the Llama-3
8B / 70B projections. ``--sweep`` also times every Triton launch config candidate, to tune
``per_token_config``.
"""
from __future__ import annotations

import torch

from benchmarks import harness
from w8a8.triton import quant


def candidates(k: int) -> list[quant.PerTokenConfig]:
    """The heuristic's pick first, then single-pass variants over warps and rows per program."""
    out = [quant.per_token_config(k)]
    block = max(16, 1 << (k - 1).bit_length())
    if block <= 16384:
        for rows in (1, 2, 4):
            for warps in (4, 8, 16, 32):
                cfg = quant.PerTokenConfig(block, rows, True, warps)
                if cfg not in out and block * rows // (32 * warps) >= 4 and block * rows // (32 * warps) <= 64:
                    out.append(cfg)
    for block_k in (512, 1024, 2048, 4096):  # the two-pass streaming path
        for rows in (1, 2, 4):
            for warps in (1, 2, 4, 8, 16):
                cfg = quant.PerTokenConfig(block_k, rows, False, warps)
                per_thread = block_k * rows // (32 * warps)
                if block_k < k and cfg not in out and 4 <= per_thread <= 64:
                    out.append(cfg)
    return out


def _cuda_quantizer_available() -> bool:
    from w8a8 import dispatch

    return dispatch.unavailable_reason("quantize_per_token", "sm90", torch.device("cuda")) is None


M_VALUES = (1, 16, 128, 256, 512, 1024, 2048, 4096, 8192)
K_VALUES = (4096, 8192, 14336, 28672)
# The quantizer's target: a share of the HBM rate where moving its bytes takes long enough for
# the rate to be reachable, else an absolute slack over the ideal time (launch-bound sizes).
TARGET_PCT_HBM, TARGET_MIN_IDEAL_US, TARGET_SLACK_US = 85.0, 10.0, 1.5


def row(op: str, m: int, k: int, config: str, heuristic: bool, us: float, moved: int, ceilings: dict) -> dict:
    rate = ceilings["hbm_bytes_per_s"]
    ideal, pct = moved / rate * 1e6, 100 * moved / (us * 1e-6) / rate
    on_target = pct >= TARGET_PCT_HBM if ideal >= TARGET_MIN_IDEAL_US else us - ideal <= TARGET_SLACK_US
    return {"op": op, "impl": op, "M": m, "K": k, "config": config, "heuristic": heuristic, "us": round(us, 3),
            "gbps": round(moved / us / 1e3, 1), "ideal_us": round(ideal, 3), "pct_hbm": round(pct, 1),
            "on_target": on_target}


def run(args, device: torch.device, ceilings: dict) -> list[dict]:
    """``python -m benchmarks --suites quant``: run, print, write ``quant_<tag>.json`` with ``--out``."""
    if device.type != "cuda":
        raise SystemExit("benchmarks: the quant suite needs a CUDA GPU (it times against the HBM rate)")
    rows = []
    for k in args.k or K_VALUES:
        for m in args.m or M_VALUES:
            xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                  for _ in range(harness.rotation_count(2 * m * k))]
            q = torch.empty(m, k, dtype=torch.int8, device="cuda")
            s = torch.empty(m, 1, dtype=torch.float32, device="cuda")
            moved = harness.quantizer_bytes(m, k)
            start = len(rows)
            if _cuda_quantizer_available():
                t = harness.time_graph([lambda x=x: torch.ops.w8a8.quantize_per_token_sm90(x) for x in xs], replays=20)
                rows.append(row("quantize_per_token sm90", m, k, "csrc/quantize/quantize.cu", True, t.us, moved,
                                 ceilings))
            for i, cfg in enumerate(candidates(k) if args.sweep else candidates(k)[:1]):
                t = harness.time_graph([lambda x=x, c=cfg: quant.quantize_per_token_out(x, q, s, c) for x in xs], replays=20)
                rows.append(row("quantize_per_token triton", m, k, repr(cfg), i == 0, t.us, moved, ceilings))
            for r in rows[start:]:
                print(f"M={m:5d} K={k:5d} {r['op']:28s} {r['us']:8.2f} us (ideal {r['ideal_us']:7.2f}) "
                      f"{r['pct_hbm']:5.1f}% of HBM{'' if r['on_target'] else '  (off target)'}", flush=True)
    if args.out:
        harness.write_suite(args, "quant", rows, ceilings, {"kind": "activation quantization"}, device)
    return rows
