"""The fused producers' Triton kernels launched from C++ (csrc/torch/triton_launch.h): where
w8a8._C is built, the ops' CUDA implementation (csrc/torch/sm90/routes.cpp) repeats the launch
Python made for arguments of the same signature, with no Python.

* Once Python has launched a signature, the op launches it from C++ (the registry's counter says
  so) and its outputs equal the Python launch's bit for bit, every output, outputs poisoned first:
  every dtype, odd M, K from 1 to the streaming path, 3-D inputs, gate / up as the strided halves
  of one tensor.
* A signature C++ has not seen runs Python, which hands it over: the next call runs from C++.
* Under CUDA-graph capture and under torch.compile the op launches from C++ with the same results.
* Operands outside the plain ones (a broadcast weight, a non-float eps path) still raise the op's
  own errors.
"""
from __future__ import annotations

import pytest
import torch

from w8a8 import dispatch, ops
from helpers import CUDA, FLOAT_DTYPES, poison_allocator
from fused_helpers import EPS, gate_up, norm_weight, rows

pytestmark = pytest.mark.skipif(not (CUDA and dispatch.load("_C")[0]), reason="needs a CUDA GPU and w8a8._C")

SHAPES = [(1, 4096), (5, 17), (33, 1), (7, 4096), (3, 14336), (129, 128)]


def from_cxx() -> int:
    """Launches made from C++ so far."""
    return torch.ops.w8a8._triton_launches()[0]


def python_then_cxx(op: str, *args):
    """The Triton kernel launched from Python (which hands it to C++), then the op, which must
    launch it from C++; both outputs, each over a poisoned allocator."""
    nbytes = max(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor)) * 2
    poison_allocator(nbytes, "cuda")
    want = dispatch.kernel(op, "triton")(*args)
    before = from_cxx()
    poison_allocator(nbytes, "cuda")
    got = getattr(torch.ops.w8a8, op).default(*args)
    torch.cuda.synchronize()
    assert from_cxx() == before + 1, f"{op} did not launch from C++"
    return want, got


def assert_outputs_equal(got, want) -> None:
    """Every output the same shape, dtype and bytes (NaN payloads and signed zeros included)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype and g.is_contiguous()
        assert torch.equal(g.view(torch.uint8), w.contiguous().view(torch.uint8)), f"{g.dtype} outputs differ"


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("m,k", SHAPES)
def test_norm_from_cxx_equals_python(dtype, m, k):
    x, weight, residual = rows(m, k, dtype, "cuda"), norm_weight(k, dtype, "cuda"), rows(m, k, dtype, "cuda")
    assert_outputs_equal(*reversed(python_then_cxx("rms_norm_quant", x, weight, EPS)))
    assert_outputs_equal(*reversed(python_then_cxx("add_rms_norm_quant", x, residual, weight, EPS)))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("m,f", SHAPES)
def test_silu_from_cxx_equals_python(dtype, m, f):
    gate, up = gate_up(m, f, dtype, "cuda")  # strided halves of one [m, 2f] tensor
    assert_outputs_equal(*reversed(python_then_cxx("silu_mul_quant", gate, up)))
    gate, up = gate.contiguous(), up.contiguous()
    assert_outputs_equal(*reversed(python_then_cxx("silu_mul_quant", gate, up)))


def test_three_dimensional_inputs():
    x = rows(6, 4096, torch.bfloat16, "cuda").view(2, 3, 4096)
    weight = norm_weight(4096, torch.bfloat16, "cuda")
    want, got = python_then_cxx("rms_norm_quant", x, weight, EPS)
    assert got[0].shape == (2, 3, 4096) and got[1].shape == (2, 3, 1)
    assert_outputs_equal(got, want)


def test_unseen_signature_runs_python_then_cxx():
    from w8a8.triton import _launch

    torch.ops.w8a8._forget_triton()
    _launch.forget_told()
    x, weight = rows(9, 256, torch.float16, "cuda"), norm_weight(256, torch.float16, "cuda")
    before = from_cxx()
    first = ops.rms_norm_quant(x, weight, EPS)
    assert from_cxx() == before  # Python ran it, and handed it over
    second = ops.rms_norm_quant(x, weight, EPS)
    assert from_cxx() == before + 1
    assert_outputs_equal(second, first)


def test_graph_capture_launches_from_cxx():
    x, weight = rows(16, 4096, torch.bfloat16, "cuda"), norm_weight(4096, torch.bfloat16, "cuda")
    gate, up = gate_up(16, 4096, torch.bfloat16, "cuda")
    ops.rms_norm_quant(x, weight, EPS)
    ops.silu_mul_quant(gate, up)
    torch.cuda.synchronize()
    before = from_cxx()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        normed_out = ops.rms_norm_quant(x, weight, EPS)
        silu_out = ops.silu_mul_quant(gate, up)
    assert from_cxx() == before + 2
    x.copy_(rows(16, 4096, torch.bfloat16, "cuda"))
    gate.copy_(gate_up(16, 4096, torch.bfloat16, "cuda")[0])
    graph.replay()
    torch.cuda.synchronize()
    assert_outputs_equal(normed_out, dispatch.kernel("rms_norm_quant", "triton")(x, weight, EPS))
    assert_outputs_equal(silu_out, dispatch.kernel("silu_mul_quant", "triton")(gate, up))


def test_compiled_launches_from_cxx():
    x, residual = rows(8, 4096, torch.bfloat16, "cuda"), rows(8, 4096, torch.bfloat16, "cuda")
    weight = norm_weight(4096, torch.bfloat16, "cuda")
    fn = torch.compile(lambda a, b: ops.rms_norm_quant(a, weight, EPS, residual=b), fullgraph=True)
    fn(x, residual)
    before = from_cxx()
    got = fn(x, residual)
    torch.cuda.synchronize()
    assert from_cxx() == before + 1
    assert_outputs_equal(got, dispatch.kernel("add_rms_norm_quant", "triton")(x, residual, weight, EPS))


def test_other_operands_keep_the_ops_errors():
    x, weight = rows(4, 64, torch.bfloat16, "cuda"), norm_weight(64, torch.bfloat16, "cuda")
    with pytest.raises(ValueError, match="rms_norm_quant"):
        torch.ops.w8a8.rms_norm_quant.default(x, weight.float(), EPS)
    with pytest.raises(ValueError, match="rms_norm_quant"):
        torch.ops.w8a8.rms_norm_quant.default(x, weight, -1.0)
    with pytest.raises(ValueError, match="silu_mul_quant"):
        torch.ops.w8a8.silu_mul_quant.default(x, x[:2])
