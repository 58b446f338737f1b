"""Long runs on a GPU: nothing drifts, nothing leaks.

* A stack of W8A8Linear layers (dynamic, static and split-K layers, bf16) captured in a
  CUDA graph and replayed STEPS times with a new input copied into the static input each
  step. Every CHECK_EVERY steps each layer's output is checked against the exact
  reference applied to the layer's input (<= 1 ulp) and the replay against an eager run
  of the stack (bit for bit), and torch.cuda.memory_allocated() must equal its value after
  capture: replays allocate nothing.
* The same stack called eagerly STEPS times with M changing every call (decode and
  prefill sizes, both W8A8Linear paths): after a warm-up over every size, the caching
  allocator serves every call from its pool (memory_reserved() does not grow) and
  memory_allocated() returns to its baseline whenever the outputs are dropped.

Steps: the environment variable W8A8_LONG_RUN_STEPS (default 2000, so that the normal
suite stays fast); a soak run is 100000 steps:

    W8A8_LONG_RUN_STEPS=100000 python -m pytest -q tests/system/test_long_run.py

W8A8_LONG_RUN_CHECK_EVERY sets how often results and memory are checked (default:
STEPS // 20, so every run checks 20 times whatever its length).
"""
from __future__ import annotations

import gc
import os

import pytest
import torch

import w8a8
from w8a8 import reference
from helpers import assert_ulp_close, capture_graph

pytestmark = pytest.mark.cuda

STEPS = int(os.environ.get("W8A8_LONG_RUN_STEPS", "2000"))
CHECK_EVERY = int(os.environ.get("W8A8_LONG_RUN_CHECK_EVERY", "0")) or max(1, STEPS // 20)
DEV = "cuda"
DTYPE = torch.bfloat16
WIDTHS = (1024, 2048, 1024, 512)  # layer i maps WIDTHS[i] -> WIDTHS[i + 1]
EAGER_M = (1, 2, 3, 8, 16, 17, 33, 64, 65, 100, 128, 257, 512, 1000)


class Stack(torch.nn.Module):
    """W8A8Linear layers in a row; forward returns every layer's output (the checks need them)."""

    def __init__(self) -> None:
        super().__init__()
        layers = []
        for i, (k, n) in enumerate(zip(WIDTHS[:-1], WIDTHS[1:])):
            lin = torch.nn.Linear(k, n, device=DEV, dtype=DTYPE)
            torch.nn.init.normal_(lin.weight, std=k**-0.5)  # unit-scale outputs, layer after layer
            static = i == 1  # calibrated-looking per-tensor scale: |x| <= ~4 over 127 codes
            layers.append(w8a8.W8A8Linear.from_linear(lin, act_quant="static" if static else "dynamic",
                                                       input_scale=4.0 / 127 if static else None))
        self.layers = torch.nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        outs = []
        for layer in self.layers:
            x = layer(x)
            outs.append(x)
        return outs


def _layer_reference(layer: w8a8.W8A8Linear, x: torch.Tensor) -> torch.Tensor:
    """The exact math of one layer on its actual input (reference.py; on the GPU, exact there too)."""
    if layer.act_quant == "dynamic":
        q, s = reference.quantize_per_token(x)
    else:
        s = layer.input_scale
        q = reference.quantize_static(x, s, layer.input_zero_point)
    return reference.scaled_mm(q, layer.weight, s, layer.weight_scale, layer.folded_bias(), x.dtype)


def _check_layers(model: Stack, x: torch.Tensor, outs: list[torch.Tensor], where: str) -> None:
    """Each layer's output against the reference on the input it was given."""
    inputs = [x, *outs[:-1]]
    for i, (layer, inp, out) in enumerate(zip(model.layers, inputs, outs)):
        try:
            assert_ulp_close(out, _layer_reference(layer, inp), max_ulp=1)
        except AssertionError as exc:
            raise AssertionError(f"{where}, layer {i}: {exc}") from None


def _check_outputs(model: Stack, x: torch.Tensor, outs: list[torch.Tensor], step: int) -> None:
    """Each layer against the reference on the input it was given; the whole stack against eager."""
    _check_layers(model, x, outs, f"step {step}")
    eager = model(x)
    for i, (e, o) in enumerate(zip(eager, outs)):
        assert torch.equal(e, o), f"step {step}, layer {i}: replay differs from an eager call on the same input"


def _settle() -> None:
    """Before reading the allocator's counters: the GPU idle, and tensors that only the garbage
    collector frees (held by reference cycles of the checks' Python objects) freed now rather
    than at the collector's next pass, whose timing varies."""
    torch.cuda.synchronize()
    gc.collect()


def _inputs(m: int, count: int = 16) -> list[torch.Tensor]:
    """A pool of inputs over four decades of magnitude, one token of each a zero row."""
    g = torch.Generator(device=DEV).manual_seed(m)
    pool = []
    for i in range(count):
        x = torch.randn(m, WIDTHS[0], device=DEV, generator=g) * 10 ** (i % 4 - 2)
        x[i % m] = 0
        pool.append(x.to(DTYPE))
    return pool


@pytest.mark.parametrize("m", [4, 100])  # decode (the single C++ op per layer on sm90) and the composed path
def test_graph_replays_long_run(m):
    model = Stack()
    pool = _inputs(m)
    with torch.inference_mode():
        static_x = pool[0].clone()
        graph, static_outs = capture_graph(lambda: model(static_x), warmups=2)
        graph.replay()
        torch.cuda.synchronize()
        _check_outputs(model, static_x, static_outs, step=-1)  # also allocates what the checks keep (cuBLAS workspace)
        _settle()
        allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        for step in range(STEPS):
            static_x.copy_(pool[step % len(pool)])
            graph.replay()
            if step % CHECK_EVERY == 0 or step == STEPS - 1:
                torch.cuda.synchronize()
                _check_outputs(model, static_x, static_outs, step)
                _settle()
                assert torch.cuda.memory_allocated() == allocated, (
                    f"step {step}: {torch.cuda.memory_allocated() - allocated} bytes more allocated than after capture"
                )
                assert torch.cuda.memory_reserved() <= reserved, (
                    f"step {step}: the allocator reserved {torch.cuda.memory_reserved() - reserved} more bytes"
                )


def _eager_step(model: Stack, m: int, step: int, check: bool) -> None:
    x = torch.randn(m, WIDTHS[0], device=DEV, dtype=DTYPE)
    outs = model(x)
    if check:
        _check_layers(model, x, outs, f"step {step}, M = {m}")


def test_eager_calls_with_changing_m_stay_in_the_pool():
    model = Stack()
    rng = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        # Warm-up: every size, largest first and then in order, and the checks' own buffers.
        for m in sorted(EAGER_M, reverse=True) + list(EAGER_M):
            _eager_step(model, m, -1, check=True)
        _settle()
        allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        for step in range(STEPS):
            m = EAGER_M[int(torch.randint(len(EAGER_M), (1,), generator=rng))]
            check = step % CHECK_EVERY == 0 or step == STEPS - 1
            _eager_step(model, m, step, check)
            if check:
                _settle()
                assert torch.cuda.memory_allocated() == allocated, (
                    f"step {step}: {torch.cuda.memory_allocated() - allocated} bytes still allocated after the call"
                )
                assert torch.cuda.memory_reserved() <= reserved, (
                    f"step {step}: the caching allocator grew by {torch.cuda.memory_reserved() - reserved} bytes "
                    "beyond its pool after the warm-up"
                )
