"""When a fused model steps aside, on the models of tests/fusion/fusion_cases.py (tiny random
Llama, Mistral, Qwen2 and TinyDecoder, all on the CPU):

* a change after fusion is followed, never ignored: a replaced child, another eps, hooks
  (which fire and see tensors), a norm called another way;
* backward raises the layers' inference-only error, fused or not; torch.export gets the
  model's own code; modules whose math is not exactly the fused op's are left alone.

What a fused model is (equal to unfused, real module classes): tests/fusion/test_fusion_behaviour.py.
Every comparison is against the same model quantized with ``fuse=False`` and changed the same way.
"""
from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import w8a8
from w8a8.fusion import modules as fused_modules
from fusion_cases import ARCHS, FUSED_PER_LAYER, LAYERS, Case, _act_name, _assert_same, _attn, _eps_name, _norms
from op_count import OpCount


# --- changes after fusion are followed ------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_replaced_children_are_followed(arch):
    """A child replaced after quantization (down_proj kept in float, a new gate_proj, GELU for
    SiLU, a float q_proj) changes the fused model's outputs as it changes the unfused one's."""
    case = Case(arch)
    plain, fused = case.pair()
    h, f = 48, 37
    torch.manual_seed(2)
    edits = [
        ("mlp", "down_proj", nn.Linear(f, h, bias=False)),
        ("mlp", "gate_proj", w8a8.W8A8Linear.from_linear(nn.Linear(h, f, bias=False))),
        ("mlp", _act_name(case), nn.GELU()),
        ("attn", "q_proj", nn.Linear(h, h if case.arch == "tiny" else 64, bias=case.arch == "qwen2")),
    ]
    before = case.run(fused, case.inputs(3))
    for where, name, new in edits:
        for model in (plain, fused):
            layer = case.layers(model)[0]
            owner = layer.mlp if where == "mlp" else _attn(case, layer)
            setattr(owner, name, copy.deepcopy(new))
        got = _assert_same(case, fused, plain)
        assert not torch.equal(got, before), name
        before = got


@pytest.mark.parametrize("arch", ARCHS)
def test_a_changed_eps_is_followed(arch):
    case = Case(arch)
    plain, fused = case.pair()
    before = case.run(fused, case.inputs(3))
    for model in (plain, fused):
        for norm in _norms(case, model):
            setattr(norm, _eps_name(case), 0.25)
    assert isinstance(_norms(case, fused)[0], fused_modules.QuantizingRMSNorm)
    with OpCount() as count:
        got = _assert_same(case, fused, plain)
    assert not torch.equal(got, before)
    assert count.calls["rms_norm_quant"] == 2 * LAYERS  # still fused, with the new eps


@pytest.mark.parametrize("arch", ARCHS)
def test_hooks_fire_and_see_what_they_see_unfused(arch):
    """Forward hooks on gate/up fire; a pre-hook on down receives the float product; a pre-hook
    that replaces q_proj's input is honoured; a global hook sees tensors. While a hook is
    registered the module it would miss runs the model's own code; removed, fusion resumes."""
    case = Case(arch)
    plain, fused = case.pair()
    seen = {}

    def install(model, key):
        layer = case.layers(model)[0]
        log = seen[key] = []
        return [
            layer.mlp.gate_proj.register_forward_hook(lambda m, a, out: log.append(("gate", out))),
            layer.mlp.up_proj.register_forward_hook(lambda m, a, out: log.append(("up", out))),
            layer.mlp.down_proj.register_forward_pre_hook(lambda m, a: log.append(("down in", a[0]))),
            _attn(case, layer).q_proj.register_forward_pre_hook(lambda m, a: (a[0] * 2,)),
        ]

    handles = install(plain, "plain") + install(fused, "fused")
    _assert_same(case, fused, plain)
    assert [k for k, _ in seen["fused"]] == [k for k, _ in seen["plain"]] and len(seen["fused"]) == 3
    for (_, a), (_, b) in zip(seen["fused"], seen["plain"]):
        assert type(a) is torch.Tensor and torch.equal(a, b)
    for h in handles:
        h.remove()
    with OpCount() as count:
        case.run(fused, case.inputs(3))
    assert count.calls == Counter({k: v * LAYERS for k, v in FUSED_PER_LAYER.items()})

    inputs = []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda m, a, out: inputs.append(a[0]) if isinstance(m, w8a8.W8A8Linear) else None)
    try:
        _assert_same(case, fused, plain)
    finally:
        handle.remove()
    assert len(inputs) == 2 * 7 * LAYERS and all(type(t) is torch.Tensor for t in inputs)


@pytest.mark.parametrize("arch", ARCHS)
def test_backward_raises_inference_only_fused_or_not(arch):
    case = Case(arch)
    plain, fused = case.pair()
    errors = []
    for model in (plain, fused):
        x = case.inputs(3)
        if case.arch == "tiny":
            x.requires_grad_()
        out = model(x) if case.arch == "tiny" else model(input_ids=x).logits
        with pytest.raises(RuntimeError, match="inference only") as err:
            out.float().sum().backward()
        errors.append(str(err.value))
    assert errors[0] == errors[1]


# --- what is left alone ----------------------------------------------------------------------------


class GatedRMSNorm(nn.Module):
    """Mamba2's gated RMSNorm: norm(x * silu(gate)) when a gate is given, else a plain RMSNorm."""

    def __init__(self, k):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(k) + 0.5)
        self.variance_epsilon = 1e-6

    def forward(self, x, gate=None):
        if gate is not None:
            x = x * F.silu(gate.float()).to(x.dtype)
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(x.dtype)


class GatedPair(nn.Module):
    def __init__(self, gated: bool):
        super().__init__()
        self.norm, self.gate = GatedRMSNorm(32), nn.Linear(32, 32)
        self.a, self.b = nn.Linear(32, 16), nn.Linear(32, 24)
        self.gated = gated

    def forward(self, x):
        h = self.norm(x, self.gate(x)) if self.gated else self.norm(x)
        return torch.cat([self.a(h), self.b(h)], -1)


def test_a_gated_norm_is_left_alone_and_a_norm_called_otherwise_steps_aside():
    for gated in (True, False):
        torch.manual_seed(0)
        model = GatedPair(gated).eval()
        plain, fused = copy.deepcopy(model), copy.deepcopy(model)
        w8a8.quantize_model(plain, progress=False, skip=(), fuse=False)
        w8a8.quantize_model(fused, progress=False, skip=())
        x = torch.randn(3, 32)
        with torch.inference_mode():
            for _ in range(2):
                assert torch.equal(fused(x), plain(x))
        assert fused.w8a8_fusion.norms == ([] if gated else ["norm"])
    fused.gated = plain.gated = True  # the fused norm, now called as norm(x, gate): the model's own code
    with torch.inference_mode():
        assert torch.equal(fused(x), plain(x))


class ShiftedRMSNorm(nn.Module):
    """RMSNorm plus something else: a shift, an eps it does not read, or a weight it ignores."""

    def __init__(self, k, kind):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(k) + 0.5)
        self.eps, self.kind = 1e-6, kind

    def forward(self, x):
        h = x.float()
        eps = 1e-6 if self.kind == "constant eps" else self.eps
        h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
        if self.kind == "shift":
            return self.weight * h + 1e-3
        if self.kind == "no weight":
            return h
        return self.weight * h


@pytest.mark.parametrize("kind", ["shift", "constant eps", "no weight"])
def test_a_norm_computing_something_else_is_left_alone(kind):
    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.a, self.b = ShiftedRMSNorm(32, kind), nn.Linear(32, 16), nn.Linear(32, 24)

        def forward(self, x):
            h = self.norm(x)
            return self.a(h), self.b(h)

    torch.manual_seed(0)
    model = Pair().eval()
    plain, fused = copy.deepcopy(model), copy.deepcopy(model)
    w8a8.quantize_model(plain, progress=False, skip=(), fuse=False)
    w8a8.quantize_model(fused, progress=False, skip=())
    x = torch.randn(5, 32)
    with torch.inference_mode():
        fused(x)
        assert fused.w8a8_fusion.norms == [] and fused.w8a8_fusion.groups == [["a", "b"]]
        for g, w in zip(fused(x), plain(x)):
            assert torch.equal(g, w)
    assert type(fused.norm) is ShiftedRMSNorm


class DropoutMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate, self.up, self.down = nn.Linear(32, 40), nn.Linear(32, 40), nn.Linear(40, 32)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.down(self.drop(F.silu(self.gate(x)) * self.up(x)))


def test_an_mlp_with_dropout_is_fused_in_eval_mode_only():
    torch.manual_seed(0)
    model = DropoutMLP().eval()
    w8a8.quantize_model(model, progress=False, skip=())
    x = torch.randn(4, 32)
    rng = torch.get_rng_state()
    with torch.inference_mode():
        model(x)  # recorded; the probe in training mode draws its dropout from a forked generator
        assert model.w8a8_fusion.mlps == [""] and torch.equal(torch.get_rng_state(), rng)
        with OpCount() as count:
            model(x)
        assert count.calls["silu_mul_quant"] == 1
        model.train()
        torch.manual_seed(5)
        got = model(x)
        torch.manual_seed(5)
        want = DropoutMLP.forward(model, x)
    assert torch.equal(got, want)  # dropout ran: the model's own code


@pytest.mark.parametrize("strict", [False, True])
def test_torch_export_of_a_fused_model_is_the_unfused_program(strict):
    """An exported program gets no Inductor pass to join the fused modules' ops: the fused
    modules export the model's own code (one w8a8.linear per layer, nothing else lifted)."""
    case = Case("tiny")
    plain, fused = case.pair()
    x = case.inputs(3)
    with torch.no_grad():
        ep = torch.export.export(fused, (x,), strict=strict)
    code = ep.graph_module.code
    assert code.count("w8a8.linear") == 7 * LAYERS and "rms_norm_quant" not in code and not ep.constants
    with torch.no_grad():
        assert torch.equal(ep.module()(x), case.run(plain, x))


@pytest.mark.parametrize("strict", [False, True])
def test_exporting_is_true_under_export_only(strict):
    """The fused modules' export check: False while torch.compile traces (Dynamo in torch 2.11
    folds torch.compiler.is_exporting() to True there), True while torch.export traces."""
    from w8a8.fusion.checks import _exporting

    class Probe(nn.Module):
        def forward(self, x):
            return x + 1 if _exporting() else x - 1

    x = torch.zeros(2)
    assert not _exporting()
    assert torch.equal(torch.compile(Probe(), fullgraph=True, backend="eager")(x), x - 1)
    assert torch.equal(torch.export.export(Probe(), (x,), strict=strict).module()(x), x + 1)
