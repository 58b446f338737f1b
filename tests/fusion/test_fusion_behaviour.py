"""What a user can rely on with a fused model, on tiny random Llama, Mistral, Qwen2
(transformers) and the hand-written TinyDecoder (tests/models.py), all on the CPU:

* fused == unfused bit for bit in fp32, fp16 and bf16 at odd widths, with the quantizations
  per layer counted;
* the fused modules are real classes: printed, importable, picklable (pickle, torch.save,
  copy.deepcopy), the state-dict keys those of the unfused model; .to(), .half() and
  load_state_dict keep fused == unfused;
* a change after fusion is followed, never ignored: a replaced child, another eps, hooks
  (which fire and see tensors), a norm called another way;
* outputs contiguous as nn.Linear's; backward raises the layers' inference-only error, fused
  or not; modules whose math is not exactly the fused op's are left alone.

Every comparison is against the same model quantized with ``fuse=False`` and changed the same way.
"""
from __future__ import annotations

import copy
import importlib
import io
import pickle
from collections import Counter
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import w8a8
from w8a8 import reference
from w8a8.fusion import modules as fused_modules
from models import DecoderSize, TinyDecoder
from op_count import OpCount

transformers = pytest.importorskip("transformers")

ARCHS = ["llama", "mistral", "qwen2", "tiny"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
LAYERS = 2


# --- models -------------------------------------------------------------------------------------


class Case:
    """A float model of ``arch`` and how to run it: ``inputs(seed)`` and ``run(model, inputs)``."""

    def __init__(self, arch: str, dtype=torch.float32, hidden: int = 48, ffn: int = 37):
        torch.manual_seed(0)
        self.arch, self.dtype = arch, dtype
        if arch == "tiny":
            self.model = TinyDecoder(DecoderSize(hidden=hidden, ffn=ffn, layers=LAYERS, tokens=8), vocab=64)
            self.hidden = hidden
        else:
            cfg_cls = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
                       "qwen2": transformers.Qwen2Config}[arch]
            model_cls = {"llama": transformers.LlamaForCausalLM, "mistral": transformers.MistralForCausalLM,
                         "qwen2": transformers.Qwen2ForCausalLM}[arch]
            cfg = cfg_cls(hidden_size=hidden, intermediate_size=ffn, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=16, vocab_size=64, num_hidden_layers=LAYERS, use_cache=False)
            self.model = model_cls(cfg)
        self.model = self.model.to(dtype).eval()
        with torch.no_grad():  # norms away from 1, so that a wrong weight would show
            for name, p in self.model.named_parameters():
                if p.dim() == 1 and "norm" in name:
                    p.uniform_(0.5, 1.5)

    def inputs(self, seed: int = 1, batch: int = 2, tokens: int = 11):
        g = torch.Generator().manual_seed(seed)
        if self.arch == "tiny":
            return torch.randn(batch, tokens, self.hidden, generator=g).to(self.dtype)
        return torch.randint(0, 64, (batch, tokens), generator=g)

    def run(self, model, inputs):
        with torch.inference_mode():
            out = model(inputs)
        return out if self.arch == "tiny" else out.logits

    def layers(self, model):
        return model.blocks if self.arch == "tiny" else model.model.layers

    def pair(self):
        """(unfused, fused) quantized copies; the fused one recorded and swapped in by a first forward."""
        plain, fused = copy.deepcopy(self.model), copy.deepcopy(self.model)
        w8a8.quantize_model(plain, progress=False, report=False, fuse=False)
        w8a8.quantize_model(fused, progress=False, report=False)
        self.run(fused, self.inputs(seed=0, batch=1, tokens=8))
        assert fused.w8a8_fusion.norms and fused.w8a8_fusion.mlps, fused.w8a8_fusion
        return plain, fused


def _mlp(layer):
    return layer.mlp


def _attn(case, layer):
    return layer if case.arch == "tiny" else layer.self_attn


def _norms(case, model):
    return [m for n, m in model.named_modules() if "norm" in n.rsplit(".", 1)[-1]]


def _eps_name(case) -> str:
    return "eps" if case.arch == "tiny" else "variance_epsilon"


def _act_name(case) -> str:
    return "act" if case.arch == "tiny" else "act_fn"


def _assert_same(case, fused, plain, seed=3):
    x = case.inputs(seed)
    got, want = case.run(fused, x), case.run(plain, x)
    assert got.dtype == want.dtype and torch.equal(got, want), float((got.float() - want.float()).abs().max())
    return got


# Per decoder layer, fused: the input norm quantizes for q/k/v (one merged GEMM), the
# post-attention norm for gate/up (one merged GEMM), SiLU-and-mul for down; o_proj quantizes
# its own input (w8a8.linear). Unfused: seven w8a8.linear.
FUSED_PER_LAYER = Counter(rms_norm_quant=2, silu_mul_quant=1, linear=1, scaled_mm=3)
UNFUSED_PER_LAYER = Counter(linear=7)


# --- fused == unfused --------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_equals_unfused_bit_for_bit_at_odd_widths(arch, dtype):
    case = Case(arch, dtype, hidden=48, ffn=37)
    plain, fused = case.pair()
    for seed, batch, tokens in ((3, 2, 11), (4, 1, 1), (5, 3, 5)):
        x = case.inputs(seed, batch, tokens)
        with OpCount() as unfused_count:
            want = case.run(plain, x)
        with OpCount() as fused_count:
            got = case.run(fused, x)
        assert torch.equal(got, want), f"seed {seed}: max diff {float((got.float() - want.float()).abs().max())}"
    per_forward = lambda c: Counter({k: v // LAYERS for k, v in c.calls.items()})  # noqa: E731
    assert fused_count.calls == Counter({k: v * LAYERS for k, v in FUSED_PER_LAYER.items()})
    assert unfused_count.calls == Counter({k: v * LAYERS for k, v in UNFUSED_PER_LAYER.items()})
    assert sum(per_forward(fused_count)[k] for k in ("rms_norm_quant", "silu_mul_quant", "linear")) == 4


def test_the_reference_silu_does_not_depend_on_the_gates_strides():
    """A column half of a merged GEMM's output (row stride 2F) gives the contiguous gate's bits,
    fp32 included, at widths the CPU's vector loop does not divide."""
    for f in (37, 100, 333):
        both = torch.randn(7, 2 * f) * 3
        gate, up = both[:, :f], both[:, f:]
        assert torch.equal(reference.silu_mul(gate, up), reference.silu_mul(gate.contiguous(), up.contiguous()))
        assert torch.equal(reference.silu_mul(gate.contiguous(), up), F.silu(gate.contiguous()) * up)


# --- real module classes --------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_fused_modules_print_import_and_keep_the_state_dict(arch):
    case = Case(arch)
    plain, fused = case.pair()
    layer = case.layers(fused)[0]
    text = str(fused)
    for cls in ("QuantizingRMSNorm(", "QuantizingGatedMLP(", "SharedInputLinear("):
        assert cls in text, cls
    for m in (layer.mlp, _attn(case, layer).q_proj, _norms(case, layer)[0]):
        cls = type(m)
        assert getattr(importlib.import_module(cls.__module__), cls.__qualname__) is cls
        assert cls in (fused_modules.QuantizingGatedMLP, fused_modules.SharedInputLinear, fused_modules.QuantizingRMSNorm)
    assert isinstance(_attn(case, layer).q_proj, w8a8.W8A8Linear)
    sd_plain, sd_fused = plain.state_dict(), fused.state_dict()
    assert list(sd_fused) == list(sd_plain)
    assert all(torch.equal(sd_fused[k], sd_plain[k]) for k in sd_plain)


def _unbind_save_pretrained(model):
    """quantize_model binds save_pretrained on a transformers model's instance (w8a8.checkpoint),
    which pickling cannot restore; that binding is not the fusion's, tested on its own below."""
    model.__dict__.pop("save_pretrained", None)
    return model


@pytest.mark.parametrize("arch", ARCHS)
def test_pickle_save_and_deepcopy_of_a_fused_model(arch):
    case = Case(arch)
    plain, fused = case.pair()
    _unbind_save_pretrained(fused)
    want = case.run(plain, case.inputs(3))
    buf = io.BytesIO()
    torch.save(fused, buf)
    buf.seek(0)
    with mock.patch.object(torch, "cat", wraps=torch.cat) as concatenated:
        copies = {"torch.save": torch.load(buf, weights_only=False)}
    assert concatenated.call_count == 0  # torch.save keeps the members' rows in one block: taken over
    # pickle copies each member's storage, deepcopy each parameter: concatenated anew
    copies.update(pickle=pickle.loads(pickle.dumps(fused)), deepcopy=copy.deepcopy(fused))
    for how, twin in copies.items():
        layer = case.layers(twin)[0]
        assert type(layer.mlp) is fused_modules.QuantizingGatedMLP, how
        group = _attn(case, layer).q_proj._w8a8_group
        assert group.members[0] is _attn(case, layer).q_proj and group is not _attn(case, case.layers(fused)[0]).q_proj._w8a8_group
        assert group.merged and group.rows_are_views(), how  # merged again as soon as the copy is whole
        with OpCount() as count:
            got = case.run(twin, case.inputs(3))
        assert torch.equal(got, want), how
        assert count.calls == Counter({k: v * LAYERS for k, v in FUSED_PER_LAYER.items()}), how
    # the copy is independent of the original
    with torch.no_grad():
        _attn(case, case.layers(copies["deepcopy"])[0]).q_proj.weight.zero_()
    assert torch.equal(case.run(fused, case.inputs(3)), want)


def test_pickle_of_a_quantized_transformers_model_as_quantize_model_leaves_it():
    """The int8 save_pretrained a quantized transformers model gets pickles with it, and the copy's
    saves its own weights."""
    case = Case("llama")
    plain, fused = case.pair()
    for model in (plain, fused):
        copy_ = pickle.loads(pickle.dumps(model))
        assert copy_.save_pretrained.model is copy_
        assert torch.equal(case.run(copy_, case.inputs(3)), case.run(model, case.inputs(3)))


@pytest.mark.parametrize("arch", ARCHS)
def test_moves_casts_and_loads_keep_fused_equal_to_unfused(arch):
    case = Case(arch)
    plain, fused = case.pair()
    for change in (lambda m: m.half(), lambda m: m.to(torch.bfloat16), lambda m: m.float(), lambda m: m.to("cpu")):
        change(plain), change(fused)
        case.dtype = _norms(case, plain)[0].weight.dtype
        group = _attn(case, case.layers(fused)[0]).q_proj._w8a8_group
        assert group.merged and group.rows_are_views()  # merged again after the last member moved
        _assert_same(case, fused, plain)
    other = Case(arch)  # other weights: a load changes the outputs
    torch.manual_seed(1)
    for p in other.model.parameters():
        p.data.normal_(0, 0.2)
    other_q = copy.deepcopy(other.model)
    w8a8.quantize_model(other_q, progress=False, report=False, fuse=False)
    before = case.run(fused, case.inputs(3))
    for assign in (False, True):
        state = {k: v.clone() for k, v in other_q.state_dict().items()}
        fused.load_state_dict(state, assign=assign)
        plain.load_state_dict({k: v.clone() for k, v in state.items()}, assign=assign)
        group = _attn(case, case.layers(fused)[0]).q_proj._w8a8_group
        assert group.merged and group.rows_are_views()
        got = _assert_same(case, fused, plain)
        assert not torch.equal(got, before)


def test_load_state_dict_after_the_recorded_forward_under_inference_mode():
    """The merged tensors made during a forward under inference_mode are normal tensors: the
    parameters stay editable in place afterwards."""
    case = Case("llama")
    plain, fused = case.pair()  # recorded under inference_mode
    q = _attn(case, case.layers(fused)[0]).q_proj
    assert not q.weight.is_inference() and not q._w8a8_group.weight.is_inference()
    other = copy.deepcopy(case.model)
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(0.5)
    w8a8.quantize_model(other, progress=False, report=False, fuse=False)
    for model in (plain, fused):
        model.load_state_dict(other.state_dict())
    _assert_same(case, fused, plain)


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
def test_merged_outputs_are_contiguous(arch):
    """q/k/v and gate/up called by the model's code each get a contiguous output, as nn.Linear's."""
    case = Case(arch)
    plain, fused = case.pair()
    layer = case.layers(fused)[0]
    attn = _attn(case, layer)
    assert attn.q_proj._w8a8_group.merged
    h = torch.randn(3, 5, attn.q_proj.in_features, dtype=case.dtype)
    with torch.inference_mode():
        got = [attn.q_proj(h), attn.k_proj(h), attn.v_proj(h)]  # one merged GEMM, three outputs
        want = [w8a8.W8A8Linear.forward(m, h) for m in (attn.q_proj, attn.k_proj, attn.v_proj)]
    for g, w in zip(got, want):
        assert g.is_contiguous() and torch.equal(g, w)
        g.view(-1)


class Heads(nn.Module):
    """Two heads on one normed activation, read with .view(-1) (a VAE's mu / logvar)."""

    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(32, eps=1e-6)
        self.mu, self.logvar = nn.Linear(32, 8), nn.Linear(32, 8)

    def forward(self, x):
        h = self.norm(x)
        return self.mu(h).view(-1), self.logvar(h).view(-1)


def test_view_of_a_merged_output_works_on_every_forward():
    torch.manual_seed(0)
    model = Heads().eval()
    plain, fused = copy.deepcopy(model), copy.deepcopy(model)
    w8a8.quantize_model(plain, progress=False, skip=(), fuse=False)
    w8a8.quantize_model(fused, progress=False, skip=())
    x = torch.randn(4, 6, 32)
    with torch.inference_mode():
        for _ in range(3):  # recorded, then fused
            for g, w in zip(fused(x), plain(x)):
                assert torch.equal(g, w)
    assert fused.w8a8_fusion.merged == [["mu", "logvar"]]
    assert isinstance(fused.norm, fused_modules.QuantizingRMSNorm)  # torch's own RMSNorm: found by its math


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
