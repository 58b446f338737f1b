"""What a user can rely on with a fused model, on tiny random Llama, Mistral, Qwen2
(transformers) and the hand-written TinyDecoder (tests/models.py), all on the CPU (the models:
tests/fusion/fusion_cases.py):

* fused == unfused bit for bit in fp32, fp16 and bf16 at odd widths, with the quantizations
  per layer counted;
* the fused modules are real classes: printed, importable, picklable (pickle, torch.save,
  copy.deepcopy), the state-dict keys those of the unfused model; .to(), .half() and
  load_state_dict keep fused == unfused;
* outputs contiguous as nn.Linear's.

When a fused model runs the model's own code instead, and what is never fused:
tests/fusion/test_fusion_steps_aside.py. Every comparison is against the same model quantized
with ``fuse=False`` and changed the same way.
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
from fusion_cases import ARCHS, DTYPES, FUSED_PER_LAYER, LAYERS, UNFUSED_PER_LAYER, Case, _assert_same, _attn, _norms
from op_count import OpCount


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


# --- outputs as nn.Linear's -------------------------------------------------------------------


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
