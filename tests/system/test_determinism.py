"""Determinism: identical inputs give bitwise-identical outputs.

* Every backend available here, 100 runs of scaled_mm, quantize_per_token and
  quantize_static (and W8A8Linear) on the same inputs: every output equals the first,
  bit for bit. The allocator is poisoned between runs (NaN bytes where the next outputs
  will likely land), so a kernel that reads or leaves memory it never wrote shows up as
  a difference. On the CPU the Triton kernels run in Triton's interpreter: their shapes
  are small (this file runs in seconds there).
* On a GPU: 100 CUDA-graph replays of each kernel backend (and of a W8A8Linear on the
  single-op path) equal each other and the eager call; CUTLASS split-K (split_k=4) and
  stream-K equal each other, the unsplit kernel and themselves over 100 runs and 100 graph
  replays (the split-K fix-up runs CUTLASS's deterministic reduction on int32 partial sums).

test_fuzz.py::test_same_bits_every_run and test_split_k.py::test_deterministic_over_runs
do 10 runs of scaled_mm; this file is the 100-run version over every op.
"""
from __future__ import annotations

import pytest
import torch

import w8a8
from w8a8 import dispatch
from helpers import kernel_params
from helpers import capture_graph, poison_allocator, rand_int8, rand_scale

RUNS = 100
CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])
# Shapes: K not a multiple of any K tile (masked tails), N % 8 == 0 and K % 16 == 0 (CUTLASS).
SHAPES = {"cpu": (17, 24, 48), "cuda": (33, 1032, 4112)}
QUANT_SHAPES = {"cpu": (9, 100), "cuda": (257, 4104)}


def _params(op: str):
    return kernel_params("scaled_mm" if op == "scaled_mm" else "quantize_per_token", devices=DEVICES)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as integers (so -0.0 != +0.0 and NaN payloads count)."""
    view = {1: torch.int8, 2: torch.int16, 4: torch.int32}[t.element_size()]
    return t.contiguous().view(view)


def _assert_same_bits(runs: list, what: str) -> None:
    first = [_bits(t) for t in runs[0]]
    for i, outputs in enumerate(runs[1:], start=1):
        for j, (t, f) in enumerate(zip(outputs, first)):
            assert torch.equal(_bits(t), f), f"{what}: run {i}, output {j} differs from run 0"


def _as_list(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _repeat(fn, device: str, nbytes: int) -> list:
    runs = []
    for _ in range(RUNS):
        poison_allocator(nbytes, device)
        runs.append([t.clone() for t in _as_list(fn())])
    return runs


def _mm_operands(device: str):
    m, n, k = SHAPES[device]
    wide = rand_int8(m, k + 16, device=device)
    a = wide[:, :k]  # row-strided, as the quantized activations of a larger buffer may be
    return a, rand_int8(n, k, device=device), rand_scale(m, 1, device=device), rand_scale(n, device=device), torch.randn(n, device=device)


def _x(device: str, dtype=torch.bfloat16) -> torch.Tensor:
    rows, k = QUANT_SHAPES[device]
    x = (torch.randn(rows, k, device=device) * torch.logspace(-3, 3, rows, device=device)[:, None]).to(dtype)
    x[1, 3] = float("nan")  # special rows too: their NaN scales must be the same bits every run
    x[2] = 0
    return x


@pytest.mark.parametrize("device,backend", _params("scaled_mm"))
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_scaled_mm_100_runs(device, backend, out_dtype):
    a, b, sa, sb, bias = _mm_operands(device)
    runs = _repeat(lambda: w8a8.ops.scaled_mm(a, b, sa, sb, bias, out_dtype, backend=backend), device, a.shape[0] * b.shape[0] * 2)
    _assert_same_bits(runs, f"scaled_mm {backend}")
    assert runs[0][0].isfinite().all()


@pytest.mark.parametrize("device,backend", _params("quantize"))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_quantizers_100_runs(device, backend, dtype):
    x = _x(device, dtype)
    scale = torch.tensor([0.05], device=device)
    zp = torch.tensor([-3], dtype=torch.int8, device=device)
    runs = _repeat(lambda: (*w8a8.ops.quantize_per_token(x, backend=backend), w8a8.ops.quantize_static(x, scale, zp, backend=backend)),
                   device, x.numel() * 4)
    _assert_same_bits(runs, f"quantizers {backend}")
    q, s, _ = runs[0]
    assert s[1].isnan().all() and (q[1] == 0).all() and float(s[2]) == 0.0  # the special rows were there


@pytest.mark.parametrize("device,backend", _params("scaled_mm") + [pytest.param(d, None, id=f"{d}-auto") for d in DEVICES])
def test_w8a8linear_100_runs(device, backend):
    dtype = torch.bfloat16
    layer = w8a8.W8A8Linear.from_linear(torch.nn.Linear(64, 48, device=device, dtype=dtype), backend=backend)
    x = torch.randn(5, 64, device=device, dtype=dtype)
    runs = _repeat(lambda: layer(x), device, 5 * 48 * 2)
    _assert_same_bits(runs, f"W8A8Linear {backend}")


# --- GPU: graph replays, split-K ---------------------------------------------------------------


def _graph(fn):
    """Capture fn() (after a warm-up on a side stream); returns (graph, static outputs)."""
    graph, out = capture_graph(fn)
    return graph, _as_list(out)


def _replays_equal_eager(fn, what: str) -> None:
    eager = [t.clone() for t in _as_list(fn())]
    graph, static = _graph(fn)
    runs = []
    for _ in range(RUNS):
        graph.replay()
        runs.append([t.clone() for t in static])
    torch.cuda.synchronize()
    _assert_same_bits([eager] + runs, f"{what} (run 0 = eager, then graph replays)")


@pytest.mark.cuda
@pytest.mark.parametrize("backend", ["sm90", "sm80", "triton"])
def test_scaled_mm_graph_replays(backend):
    if dispatch.unavailable_reason("scaled_mm", backend, torch.device("cuda")) is not None:
        pytest.skip(f"backend {backend!r}: {dispatch.unavailable_reason('scaled_mm', backend, torch.device('cuda'))}")
    a, b, sa, sb, bias = _mm_operands("cuda")
    _replays_equal_eager(lambda: w8a8.ops.scaled_mm(a, b, sa, sb, bias, torch.bfloat16, backend=backend), f"scaled_mm {backend}")


@pytest.mark.cuda
@pytest.mark.parametrize("backend", ["sm90", "triton"])
def test_quantizer_graph_replays(backend):
    if dispatch.unavailable_reason("quantize_per_token", backend, torch.device("cuda")) is not None:
        pytest.skip(dispatch.unavailable_reason("quantize_per_token", backend, torch.device("cuda")))
    x = _x("cuda")
    scale, zp = torch.tensor([0.05], device="cuda"), torch.tensor([5], dtype=torch.int32, device="cuda")
    _replays_equal_eager(
        lambda: (*w8a8.ops.quantize_per_token(x, backend=backend), w8a8.ops.quantize_static(x, scale, zp, backend=backend)),
        f"quantizers {backend}",
    )


@pytest.mark.cuda
@pytest.mark.parametrize("m", [4, 100, 256])  # the single C++ op (<= 128 tokens on sm90) and the composed path
def test_w8a8linear_graph_replays(m):
    layer = w8a8.W8A8Linear.from_linear(torch.nn.Linear(4096, 1024, device="cuda", dtype=torch.bfloat16))
    x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
    _replays_equal_eager(lambda: layer(x), f"W8A8Linear M={m}")


def _need_cutlass_sm90():
    reason = dispatch.unavailable_reason("scaled_mm", "sm90", torch.device("cuda"))
    if reason is not None:
        pytest.skip(reason)
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("split_k / scheduler steer the sm90 kernels")


@pytest.mark.sm90
@pytest.mark.parametrize("split_k,scheduler", [(4, "auto"), (None, "stream_k"), (None, "auto")],
                         ids=["split_k=4", "stream_k", "heuristic"])
def test_split_k_deterministic_over_runs_and_replays(split_k, scheduler):
    _need_cutlass_sm90()
    m, n, k = 3, 4096, 14336  # decode through a long K: the heuristic runs the GEMV here (tests/kernels/test_sm90.py)
    a, b = rand_int8(m, k, device="cuda"), rand_int8(n, k, device="cuda")
    sa, sb, bias = rand_scale(m, 1, device="cuda"), rand_scale(n, device="cuda"), torch.randn(n, device="cuda")
    op = torch.ops.w8a8.scaled_mm_sm90
    plan = tuple(torch.ops.w8a8.scaled_mm_sm90_plan(m, n, k, "", split_k, scheduler))
    if split_k is not None:
        assert plan[1:] == ("split_k", 4), plan
    run = lambda: op(a, b, sa, sb, bias, torch.bfloat16, "", split_k, scheduler)  # noqa: E731
    runs = _repeat(run, "cuda", m * n * 2)
    unsplit = op(a, b, sa, sb, bias, torch.bfloat16, "", 1, "auto")
    _assert_same_bits([[unsplit]] + runs, f"sm90 split_k={split_k} {scheduler} (run 0 = split_k=1)")
    _replays_equal_eager(run, f"sm90 split_k={split_k} {scheduler} graph")
