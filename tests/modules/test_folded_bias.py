"""W8A8Linear's folded bias with an input zero point (static asymmetric activations): computed
once in eager and kept, bit for bit today's formula, computed again after every change of the
tensors it is made from (in-place edits, reassignment, load_state_dict, casts and moves), never
in the state dict or the parameters; computed in the graph under torch.compile (one opaque op), during CUDA-graph
capture, for inference tensors and when a gradient flows into it."""
import copy
import importlib
import pickle
import weakref

import pytest
import torch
from torch import nn

import w8a8
from w8a8 import reference
from helpers import assert_ulp_close, capture_graph, rand_int8, ref_linear

linear_module = importlib.import_module("w8a8.linear")  # `w8a8.linear` is the op; this is the module
K, N = 64, 48  # test_linear's layer widths, which every GEMM kernel takes


def _layer(bias=True, zero_point=-7, device="cpu"):
    lin = nn.Linear(K, N, bias=bias, device=device)
    layer = w8a8.W8A8Linear(K, N, bias=bias, act_quant="static", input_zero_point=True, device=device)
    layer.load_state_dict(w8a8.W8A8Linear.from_linear(lin, act_quant="static", input_scale=0.03).state_dict(),
                          strict=False)
    with torch.no_grad():
        layer.input_zero_point.fill_(zero_point)
    return layer


def _formula(layer) -> torch.Tensor:
    """bias - input_scale * weight_scale * zp * rowsum(weight), in fp32 (the row sum in int64)."""
    rowsum = layer.weight.long().sum(1).float()
    corr = layer.input_scale * layer.weight_scale * (layer.input_zero_point.float() * rowsum)
    return -corr if layer.bias is None else layer.bias.float() - corr


def _expected(layer, x) -> torch.Tensor:
    """The layer's definition with the folded bias computed now from its tensors."""
    q = reference.quantize_static(x, layer.input_scale, layer.input_zero_point)
    return reference.scaled_mm(q, layer.weight, layer.input_scale, layer.weight_scale, _formula(layer), x.dtype)


@pytest.fixture
def folds(monkeypatch):
    """The number of times the folded bias has been computed (every path calls _fold_zero_point)."""
    calls = []
    fold = linear_module._fold_zero_point

    def counted(*args):
        calls.append(1)
        return fold(*args)

    monkeypatch.setattr(linear_module, "_fold_zero_point", counted)
    return calls


@pytest.mark.parametrize("bias", [True, False])
def test_kept_value_is_the_formula_bit_for_bit(bias):
    layer = _layer(bias=bias)
    x = torch.randn(5, K)
    assert torch.equal(layer(x), _expected(layer, x))
    kept = layer.folded_bias()
    assert kept.dtype == torch.float32 and torch.equal(kept, _formula(layer))
    assert torch.equal(kept, linear_module._fold_zero_point(
        layer.weight, layer.weight_scale, layer.input_scale, layer.input_zero_point, layer.bias))


def test_computed_once_over_forwards_with_unchanged_tensors(folds):
    layer = _layer()
    x = torch.randn(5, K)
    outs = [layer(x) for _ in range(4)]
    with torch.inference_mode():
        outs.append(layer(x))
    assert len(folds) == 1
    assert all(torch.equal(out, outs[0]) for out in outs)
    assert layer.folded_bias() is layer.folded_bias() and len(folds) == 1


def _param(t):
    return nn.Parameter(t, requires_grad=False)


def _other_state():
    lin = nn.Linear(K, N)
    state = w8a8.W8A8Linear.from_linear(lin, act_quant="static", input_scale=0.05).state_dict()
    return {**state, "input_zero_point": torch.tensor([9], dtype=torch.int8)}


def _edit_in_inference_mode(layer):
    with torch.inference_mode():
        layer.weight_scale.mul_(3)


CHANGES = {
    "weight.copy_": lambda m: m.weight.copy_(rand_int8(N, K)),
    "weight[0].fill_ (a view)": lambda m: m.weight[0].fill_(100),
    "weight_scale.mul_": lambda m: m.weight_scale.mul_(2),
    "input_scale.fill_": lambda m: m.input_scale.fill_(0.5),
    "input_zero_point.fill_": lambda m: m.input_zero_point.fill_(11),
    "bias.add_": lambda m: m.bias.add_(1),
    "an edit in inference_mode": _edit_in_inference_mode,
    "weight reassigned": lambda m: setattr(m, "weight", _param(rand_int8(N, K))),
    "weight.data reassigned": lambda m: setattr(m.weight, "data", rand_int8(N, K)),
    "input_scale reassigned": lambda m: setattr(m, "input_scale", _param(torch.tensor([0.25]))),
    "input_zero_point reassigned": lambda m: setattr(m, "input_zero_point", _param(torch.tensor([3]).to(torch.int8))),
    "bias reassigned": lambda m: setattr(m, "bias", _param(torch.randn(N))),
    "bias = None": lambda m: setattr(m, "bias", None),
    "load_state_dict": lambda m: m.load_state_dict(_other_state()),
    "load_state_dict(assign=True)": lambda m: m.load_state_dict(_other_state(), assign=True),
    ".half()": lambda m: m.half(),
    ".bfloat16().float()": lambda m: m.bfloat16().float(),
    ".double()": lambda m: m.double(),
    ".to(torch.float64)": lambda m: m.to(torch.float64),
    ".to('cpu')": lambda m: m.to("cpu"),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_of_a_source_tensor_computes_it_again(change, folds):
    layer = _layer()
    x = torch.randn(5, K)
    layer(x)
    before = layer.folded_bias()
    with torch.no_grad():
        CHANGES[change](layer)
    after = layer.folded_bias()
    assert len(folds) == 2, "computed again, once"
    assert torch.equal(after, _formula(layer))
    if not change.startswith("."):  # casts and moves keep the values (only .half() rounds the bias)
        assert not torch.equal(after, before), "the change should change the folded bias"
    if layer.bias is None or layer.bias.dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = x.to(layer.bias.dtype if layer.bias is not None else torch.float32)
        assert torch.equal(layer(x), _expected(layer, x))
    assert len(folds) == 2 and layer.folded_bias() is after


def test_a_replaced_tensor_is_not_kept_alive():
    layer = _layer()
    layer(torch.randn(3, K))
    old = weakref.ref(layer.weight)
    layer.weight = _param(rand_int8(N, K))
    assert old() is None
    assert torch.equal(layer.folded_bias(), _formula(layer))


def test_not_in_the_state_dict_nor_a_parameter_nor_a_buffer():
    layer = _layer()
    keys, n_params = list(layer.state_dict()), sum(p.numel() for p in layer.parameters())
    layer(torch.randn(3, K))
    assert list(layer.state_dict()) == keys == ["weight", "weight_scale", "input_scale", "input_zero_point", "bias"]
    assert sum(p.numel() for p in layer.parameters()) == n_params and not list(layer.buffers())


def test_copies_and_pickles_compute_their_own(folds):
    layer = _layer()
    x = torch.randn(3, K)
    y = layer(x)
    for twin in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        with torch.no_grad():
            twin.weight.copy_(rand_int8(N, K))
        assert torch.equal(twin(x), _expected(twin, x))
    assert torch.equal(layer(x), y) and len(folds) == 3


@pytest.mark.parametrize("act_quant", ["dynamic", "static"])
def test_layers_without_a_zero_point_return_their_bias(act_quant, folds):
    scale = 0.03 if act_quant == "static" else None
    layer = w8a8.W8A8Linear.from_linear(nn.Linear(K, N), act_quant=act_quant, input_scale=scale)
    layer(torch.randn(3, K))
    assert layer.folded_bias() is layer.bias and not folds


def test_inference_tensors_are_computed_every_call(folds):
    with torch.inference_mode():
        layer = _layer()
        x = torch.randn(3, K)
        layer(x)
        layer.weight.copy_(rand_int8(N, K))  # inference tensors have no version counter to watch
        assert torch.equal(layer(x), _expected(layer, x))
    assert len(folds) == 2


def test_a_gradient_into_the_bias_computes_it_every_call(folds):
    layer = _layer()
    layer.bias.requires_grad_(True)
    a, b = layer.folded_bias(), layer.folded_bias()
    assert a.requires_grad and a is not b and len(folds) == 2
    a.sum().backward()
    assert torch.equal(layer.bias.grad, torch.ones(N))
    with torch.no_grad():
        kept = layer.folded_bias()
    assert not kept.requires_grad and len(folds) == 3 and torch.equal(kept, _formula(layer))


def test_compiled_layer_folds_inside_the_graph():
    """Under torch.compile the fold is traced (nothing kept): the graph sees in-place edits."""
    torch._dynamo.reset()
    layer = _layer()
    compiled = torch.compile(layer, backend="eager", fullgraph=True)
    x = torch.randn(5, K)
    assert torch.equal(compiled(x), _expected(layer, x))
    assert "_w8a8_folded_bias" not in layer.__dict__
    with torch.no_grad():
        layer.weight.copy_(rand_int8(N, K))
        layer.input_zero_point.fill_(4)
    assert torch.equal(compiled(x), _expected(layer, x))


def test_compiled_and_exported_graphs_call_the_fold_op():
    """Traced, the fold is the op w8a8::fold_zero_point, which Inductor calls rather than
    regenerates (its Triton code would contract the multiply-subtract into an FMA): compiled
    with Inductor, the output is eager's bit for bit."""
    layer = _layer()
    x = torch.randn(17, K)
    graph = torch.export.export(layer, (x,)).graph
    assert torch.ops.w8a8.fold_zero_point.default in [n.target for n in graph.nodes]
    torch._dynamo.reset()
    assert torch.equal(torch.compile(layer, fullgraph=True)(x), layer(x))


@pytest.mark.cuda
def test_cuda_graph_replay_sees_an_in_place_edit(folds):
    """Captured, the fold is part of the graph (nothing kept): a replay after weight.copy_ reads it."""
    layer = _layer(device="cuda")
    x = torch.randn(16, K, device="cuda")
    graph, y = capture_graph(lambda: layer(x))  # a warm-up on a side stream, then the capture
    assert len(folds) == 2
    with torch.no_grad():
        layer.weight.copy_(rand_int8(N, K, device="cuda"))
        layer.input_scale.fill_(0.05)
    graph.replay()
    torch.cuda.synchronize()
    assert_ulp_close(y, ref_linear(layer, x))
    assert torch.equal(layer.folded_bias(), _formula(layer))


@pytest.mark.cuda
def test_another_cuda_stream_computes_its_own(folds):
    layer = _layer(device="cuda")
    x = torch.randn(16, K, device="cuda")
    y = layer(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y_side = layer(x)
        layer(x)
    torch.cuda.current_stream().wait_stream(side)
    assert len(folds) == 2 and torch.equal(y_side, y)
