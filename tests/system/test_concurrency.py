"""Concurrency: two threads making the first calls together.

What is initialised lazily, on first use: importing w8a8 (loads w8a8._C and registers the
ops; Python's import lock makes that once), the kernel choice (dispatch._best, an
lru_cache), W8A8Linear's route (linear._fused_route_cached), the first import of the
Triton kernels (ops._triton), each Triton kernel's compilation and the Triton config and
SM-count caches (triton/quant.py, triton/scaled_mm.py), and on the C++ side the device
table (torch_device_info.h, a function-local static: thread-safe by the language). Triton
itself guards neither its compile caches nor, in its interpreter, its global state
against two threads: w8a8/triton/_launch.py serialises w8a8's Triton launches.

Each case runs in a fresh interpreter (a subprocess), so that the initialisation really is
first: two threads wait at a barrier, then both import w8a8 and call every public op
(quantize_per_token, quantize_static, scaled_mm, W8A8Linear) a few times on their own
inputs - on a GPU each on its own CUDA stream. Every output must equal, bit for bit, a
serial run of the same calls made afterwards in the same process, and the reference
(codes and scales exactly, products within 1 ulp).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from w8a8 import dispatch

ROOT = Path(__file__).resolve().parents[1]
CUDA = torch.cuda.is_available()

SCRIPT = r'''
import contextlib, json, sys, threading, traceback
import torch

BACKEND, DEVICE, ITERS = sys.argv[1], sys.argv[2], int(sys.argv[3])
QUANT, MM = {"reference": ("reference", "reference"), "triton": ("triton", "triton"),
             "sm90": ("cuda", "sm90"), "auto": (None, None)}[BACKEND]
DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float32
M, N, K = (33, 256, 512) if DEVICE == "cuda" else (9, 24, 64)


def make_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g)
    x[1, 5] = float("nan")  # a special row: its scale is NaN in every thread
    inputs = dict(
        x=x.to(DTYPE), scale=torch.tensor([0.03]), zp=torch.tensor([2], dtype=torch.int32),
        a=torch.randint(-128, 128, (M, K), generator=g, dtype=torch.int8),
        b=torch.randint(-128, 128, (N, K), generator=g, dtype=torch.int8),
        sa=torch.rand(M, 1, generator=g) * 0.01, sb=torch.rand(N, generator=g) * 0.01, bias=torch.randn(N, generator=g),
        w=torch.randn(N, K, generator=g) * K ** -0.5, wb=torch.randn(N, generator=g),
    )
    return {k: v.to(DEVICE) for k, v in inputs.items()}


def calls(inp):
    import w8a8  # the first import races in the threads

    lin = torch.nn.Linear(K, N, device=DEVICE, dtype=DTYPE)
    with torch.no_grad():
        lin.weight.copy_(inp["w"])
        lin.bias.copy_(inp["wb"])
    layer = w8a8.W8A8Linear.from_linear(lin, backend=MM)
    q, s = w8a8.ops.quantize_per_token(inp["x"], backend=QUANT)
    qs = w8a8.ops.quantize_static(inp["x"], inp["scale"], inp["zp"], backend=QUANT)
    out = w8a8.ops.scaled_mm(inp["a"], inp["b"], inp["sa"], inp["sb"], inp["bias"], torch.bfloat16, backend=MM)
    y = layer(inp["x"])
    return [q, s, qs, out, y]


inputs = [make_inputs(seed) for seed in range(2)]
results, errors = [None, None], []
barrier = threading.Barrier(2)


def worker(i):
    try:
        stream = torch.cuda.Stream() if DEVICE == "cuda" else None
        if stream is not None:
            stream.wait_stream(torch.cuda.current_stream())
        barrier.wait()
        runs = []
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            for _ in range(ITERS):
                runs.append(calls(inputs[i]))
        if stream is not None:
            stream.synchronize()
        results[i] = [[t.cpu() for t in run] for run in runs]
    except BaseException:
        errors.append(f"thread {i}: " + traceback.format_exc())


threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()

mismatches, checked = [], 0
if not errors:
    import w8a8
    from w8a8 import reference

    def ulp_ok(got, ref):
        if not torch.equal(got.isnan(), ref.isnan()):
            return False
        a = got.nan_to_num(0).view(torch.int16).int()
        b = ref.nan_to_num(0).view(torch.int16).int()
        a = torch.where(a < 0, -(a + 32768), a)
        b = torch.where(b < 0, -(b + 32768), b)
        return bool(((a - b).abs() <= 1).all())

    for i in range(2):
        serial = [t.cpu() for t in calls(inputs[i])]  # the same calls, one thread, after the race
        for r, run in enumerate(results[i]):
            for j, (got, want) in enumerate(zip(run, serial)):
                checked += 1
                same = got.dtype == want.dtype and torch.equal(got.isnan(), want.isnan()) and torch.equal(
                    got.nan_to_num(0), want.nan_to_num(0))
                if not same:
                    mismatches.append(f"thread {i}, run {r}, output {j}: differs from the serial run")
        cpu = {k: v.cpu() for k, v in inputs[i].items()}
        rq, rs = reference.quantize_per_token(cpu["x"])
        q, s, qs, out, y = serial
        if not (torch.equal(q, rq) and torch.equal(s.isnan(), rs.isnan()) and torch.equal(s.nan_to_num(0), rs.nan_to_num(0))):
            mismatches.append(f"thread {i}: quantize_per_token differs from the reference")
        if not torch.equal(qs, reference.quantize_static(cpu["x"], cpu["scale"], cpu["zp"])):
            mismatches.append(f"thread {i}: quantize_static differs from the reference")
        ref = reference.scaled_mm(cpu["a"], cpu["b"], cpu["sa"], cpu["sb"], cpu["bias"], torch.bfloat16)
        if not ulp_ok(out, ref):
            mismatches.append(f"thread {i}: scaled_mm is more than 1 ulp from the reference")
        if not (y[1].isnan().all() and y[0].isfinite().all()):
            mismatches.append(f"thread {i}: W8A8Linear's NaN row is not NaN (or another row is not finite)")

print(json.dumps({"errors": errors, "mismatches": mismatches, "checked": checked}))
'''


def _run(tmp_path: Path, backend: str, device: str, iters: int) -> dict:
    script = tmp_path / "first_calls.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run([sys.executable, str(script), backend, device, str(iters)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _params():
    # The interpreter case is the CI one: on a GPU machine the real Triton cases below replace it
    # (it failed there once, 2026-11-23, with the message cut from the log; see docs/STATUS.md).
    interp = pytest.mark.skipif(torch.cuda.is_available(), reason="Triton's interpreter is the CPU (CI) path")
    out = [pytest.param("cpu", b, id=f"cpu-{b}", marks=interp if b == "triton" else ())
           for b in ("reference", "triton", "auto")]
    for b in ("sm90", "triton", "auto"):
        out.append(pytest.param("cuda", b, id=f"cuda-{b}", marks=pytest.mark.cuda))
    return out


@pytest.mark.parametrize("device,backend", _params())
def test_two_threads_first_calls(tmp_path, device, backend):
    if device == "cuda":
        needs = {"sm90": [("scaled_mm", "sm90"), ("quantize_per_token", "cuda")], "triton": [("scaled_mm", "triton")]}
        for op, kernel in needs.get(backend, []):
            reason = dispatch.unavailable_reason(op, kernel, torch.device("cuda"))
            if reason is not None:
                pytest.skip(reason)
    iters = 3 if device == "cpu" else 20
    report = _run(tmp_path, backend, device, iters)
    assert report["errors"] == [], "\n".join(report["errors"])
    assert report["mismatches"] == [], "\n".join(report["mismatches"])
    assert report["checked"] == 2 * iters * 5
