"""Model-level fusion in eager (w8a8.fusion): shared quantization, merged siblings, fused producers.

Every fused model is compared with the same quantized model unfused: on the CPU the ops run
the reference, whose norm and SiLU math is transformers' own, so logits are bit-identical;
on a GPU the fused norm's fp32 mean may round one bf16 ulp differently in rare elements.
"""
from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch
from torch import nn

import w8a8
from w8a8 import fusion
from w8a8.fusion import modules, plan
from w8a8.linear import QuantizedActivation, W8A8Linear
from helpers import DEVICES
from op_count import OpCount

transformers = pytest.importorskip("transformers")

TINY = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            vocab_size=128, num_hidden_layers=2, use_cache=False)


def _tiny(arch: str, device="cpu", dtype=torch.bfloat16):
    cfg_cls = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
               "qwen2": transformers.Qwen2Config}[arch]
    model_cls = {"llama": transformers.LlamaForCausalLM, "mistral": transformers.MistralForCausalLM,
                 "qwen2": transformers.Qwen2ForCausalLM}[arch]
    torch.manual_seed(0)
    cfg = cfg_cls(**TINY)
    model = model_cls(cfg).to(device=device, dtype=dtype).eval()
    with torch.no_grad():  # norms away from 1 so that a wrong weight would show
        for n, p in model.named_parameters():
            if "norm" in n:
                p.uniform_(0.5, 1.5)
    return model


def _quantized(model, **kw):
    """quantize_model on a copy; fused models recorded at once (on the CPU quantize_model
    arms the recording for the first forward instead of running a probe)."""
    m = copy.deepcopy(model)
    w8a8.quantize_model(m, progress=False, report=False, **kw)
    if kw.get("fuse", True):
        with torch.inference_mode():
            m(input_ids=torch.arange(8, device=m.device).reshape(1, 8))
    return m


@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen2"])
@pytest.mark.parametrize("merge", [True, False])
def test_transformers_models_fused_equal_unfused(arch, merge):
    model = _tiny(arch)
    plain, fused = _quantized(model, fuse=False), _quantized(model, merge=merge)
    ids = torch.randint(0, 128, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        want = plain(input_ids=ids).logits
        with OpCount() as count:
            got = fused(input_ids=ids).logits
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    layers = TINY["num_hidden_layers"]
    # one quantization per distinct activation: qkv <- input norm, gate/up <- post-attention norm,
    # down <- silu*mul, o_proj on its own; merged: one GEMM for q/k/v and one for gate/up
    gemms = 3 if merge else 6
    assert count.calls == Counter(rms_norm_quant=2 * layers, silu_mul_quant=layers, linear=layers,
                                  scaled_mm=gemms * layers)


def test_fusion_report_names_groups_norms_and_mlps():
    fused = copy.deepcopy(_tiny("llama"))
    assert w8a8.quantize_model(fused, progress=False, report=False).fusion is None  # on the CPU: armed
    report = fusion.fuse_model(fused, input_ids=torch.arange(8).reshape(1, 8))
    assert report.groups[0] == ["model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
                                "model.layers.0.self_attn.v_proj"]
    assert ["model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj"] in report.groups
    assert report.merged == report.groups
    assert report.norms == [f"model.layers.{i}.{n}" for i in range(2) for n in ("input_layernorm", "post_attention_layernorm")]
    assert report.mlps == ["model.layers.0.mlp", "model.layers.1.mlp"]
    assert "4 groups" in report.summary()


def test_merged_parameters_are_views_and_the_state_dict_keeps_its_layout():
    model = _tiny("llama")
    plain, fused = _quantized(model, fuse=False), _quantized(model)
    sd_plain, sd_fused = plain.state_dict(), fused.state_dict()
    assert list(sd_plain) == list(sd_fused)
    for k in sd_plain:
        assert sd_fused[k].shape == sd_plain[k].shape and torch.equal(sd_fused[k], sd_plain[k]), k
    attn = fused.model.layers[0].self_attn
    base = attn.q_proj._w8a8_group.weight
    assert attn.k_proj.weight.data_ptr() == base.data_ptr() + attn.q_proj.out_features * base.shape[1]


def test_save_and_reload_of_a_fused_model(tmp_path):
    fused = _quantized(_tiny("llama"))
    w8a8.save_quantized(fused, str(tmp_path / "q"), progress=False)
    loaded = w8a8.from_pretrained(str(tmp_path / "q"), progress=False)  # fused again at its first forward
    plain = copy.deepcopy(loaded)
    fusion.unfuse_model(plain)
    assert list(plain.state_dict()) == list(fused.state_dict())
    ids = torch.arange(9).reshape(1, 9)
    with torch.inference_mode():
        for _ in range(2):  # recorded, then fused
            torch.testing.assert_close(loaded(input_ids=ids).logits, plain(input_ids=ids).logits, rtol=0, atol=0)
    group = loaded.model.layers[0].self_attn.k_proj._w8a8_group
    assert group.merged and group.rows_are_views()


def test_casts_moves_and_assign_loads_rebuild_the_group():
    model = _tiny("llama", dtype=torch.float32)
    fused, plain = _quantized(model), _quantized(model, fuse=False)
    ids = torch.arange(7).reshape(1, 7)
    fused.to(torch.bfloat16)  # members' parameters cast one by one: no longer views
    plain.to(torch.bfloat16)
    with torch.inference_mode():
        torch.testing.assert_close(fused(input_ids=ids).logits, plain(input_ids=ids).logits, rtol=0, atol=0)
    group = fused.model.layers[0].self_attn.q_proj._w8a8_group
    assert group.merged and group.rows_are_views()  # merged again after the last member was cast


def test_a_load_with_assign_merges_the_assigned_tensors():
    fused = _quantized(_tiny("llama"))
    attn = fused.model.layers[0].self_attn
    state = {k: v.clone() for k, v in fused.state_dict().items()}
    fused.load_state_dict(state, assign=True)
    group = attn.q_proj._w8a8_group
    assert group.merged and group.rows_are_views()  # merged again at the load, before any forward
    ids = torch.arange(5).reshape(1, 5)
    plain = _quantized(_tiny("llama"), fuse=False)
    with torch.inference_mode():
        torch.testing.assert_close(fused(input_ids=ids).logits, plain(input_ids=ids).logits, rtol=0, atol=0)


def test_deepcopy_of_a_fused_model_is_independent():
    fused = _quantized(_tiny("llama"))
    twin = copy.deepcopy(fused)
    g, g2 = fused.model.layers[0].self_attn.q_proj._w8a8_group, twin.model.layers[0].self_attn.q_proj._w8a8_group
    assert g2 is not g and g2.members[0] is twin.model.layers[0].self_attn.q_proj
    assert twin.model.layers[0].input_layernorm._w8a8_readers is g2
    # the copy's members are views of one copied block: taken over as the merged tensor, not copied again
    assert g2.merged and g2.rows_are_views() and g2.weight.data_ptr() == twin.model.layers[0].self_attn.q_proj.weight.data_ptr()
    ids = torch.arange(5).reshape(1, 5)
    with torch.inference_mode():
        torch.testing.assert_close(twin(input_ids=ids).logits, fused(input_ids=ids).logits, rtol=0, atol=0)


def test_unfuse_restores_every_layer():
    fused = _quantized(_tiny("llama"))
    fusion.unfuse_model(fused)
    assert not any(isinstance(m, modules.FUSED_CLASSES) for m in fused.modules())
    assert not any(k.startswith("_w8a8_") for m in fused.model.modules() for k in m.__dict__)
    with torch.inference_mode(), OpCount() as count:
        fused(input_ids=torch.arange(4).reshape(1, 4))
    assert count.calls == Counter(linear=14)


class TwoOnOne(nn.Module):
    """Two Linears on one input, a third on their sum: found without names."""

    def __init__(self):
        super().__init__()
        self.left, self.right, self.out = nn.Linear(32, 48), nn.Linear(32, 16, bias=True), nn.Linear(48, 8)

    def forward(self, x):
        a, b = self.left(x), self.right(x)
        return self.out(a + b.repeat(1, 1, 3)[..., :48])


def _two_on_one(device="cpu"):
    torch.manual_seed(0)
    m = TwoOnOne().to(device).eval()
    plain, fused = copy.deepcopy(m), copy.deepcopy(m)
    w8a8.quantize_model(plain, progress=False, fuse=False, skip=())
    w8a8.quantize_model(fused, progress=False, skip=())
    return plain, fused


@pytest.mark.parametrize("device", DEVICES)
def test_a_plain_module_is_fused_at_its_first_forward(device):
    plain, fused = _two_on_one(device)
    assert fused.left.__dict__.get("_w8a8_group") is None  # armed, not yet recorded
    x = torch.randn(2, 5, 32, device=device)
    with torch.inference_mode():
        torch.testing.assert_close(fused(x), plain(x), rtol=0, atol=0)  # the recorded forward
        assert fused.left._w8a8_group is fused.right._w8a8_group
        assert fused.w8a8_fusion.groups == [["left", "right"]] and fused.w8a8_fusion.merged == [["left", "right"]]
        with OpCount() as count:
            got = fused(x)
        torch.testing.assert_close(got, plain(x), rtol=0, atol=0)
    assert count.calls == Counter(quantize_per_token=1, scaled_mm=1, linear=1)  # one for left+right, one in out


@pytest.mark.parametrize("device", DEVICES)
def test_never_stale(device):
    """A new input, the same tensor object changed in place between forwards (inference tensors
    carry no version counter), and a member called alone with another tensor: all fresh."""
    plain, fused = _two_on_one(device)
    with torch.inference_mode():
        x = torch.randn(3, 32, device=device)
        fused(x)  # recorded
        for _ in range(3):
            torch.testing.assert_close(fused(x), plain(x), rtol=0, atol=0)
            x.mul_(-1.5).add_(0.25)
        y = torch.randn(3, 32, device=device)
        fused.left(x)  # a round begun on x ...
        torch.testing.assert_close(fused.right(y), plain.right(y), rtol=0, atol=0)  # ... is not used for y
    x = torch.randn(3, 32, device=device)  # outside inference_mode: the version counter guards too
    with torch.no_grad():
        fused.left(x)
        x.add_(1)
        torch.testing.assert_close(fused.right(x), plain.right(x), rtol=0, atol=0)


def test_an_input_changed_between_siblings_is_not_grouped():
    class Mutates(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

        def forward(self, x):
            y = self.a(x)
            x.mul_(2)
            return y + self.b(x)

    torch.manual_seed(0)
    m = Mutates().eval()
    w8a8.quantize_model(m, progress=False, skip=())
    with torch.no_grad():
        m(torch.randn(4, 16))
    assert m.a.__dict__.get("_w8a8_group") is None


def test_quantized_activation_input():
    torch.manual_seed(0)
    layer = W8A8Linear.from_linear(nn.Linear(64, 32).to(torch.bfloat16))
    x = torch.randn(3, 5, 64, dtype=torch.bfloat16)
    codes, scales = w8a8.ops.quantize_per_token(x)
    got = layer(QuantizedActivation(codes, scales, torch.bfloat16))
    torch.testing.assert_close(got, layer(x), rtol=0, atol=0)
    assert got.shape == (3, 5, 32)
    with pytest.raises(ValueError, match=r"W8A8Linear: QuantizedActivation codes must have last dim 64, got shape \[3, 5, 63\]"):
        layer(QuantizedActivation(codes[..., :63], scales, torch.bfloat16))
    with pytest.raises(ValueError, match=r"scales must have shape \[3, 5, 1\], got \[15, 1\]"):
        layer(QuantizedActivation(codes, scales.reshape(-1, 1), torch.bfloat16))
    static = W8A8Linear.from_linear(nn.Linear(64, 32), act_quant="static", input_scale=0.1)
    with pytest.raises(ValueError, match="needs act_quant='dynamic'"):
        static(QuantizedActivation(codes, scales, torch.float32))


def test_fuse_false_and_unknown_modules_keep_todays_behaviour():
    model = _tiny("llama")
    plain = _quantized(model, fuse=False)
    assert not any(isinstance(m, modules.FUSED_CLASSES) or "forward" in m.__dict__ for m in plain.modules())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graph_capture_and_replay_with_changed_inputs():
    model = _tiny("llama", device="cuda")
    plain, fused = _quantized(model, fuse=False), _quantized(model)
    static = torch.randint(0, 128, (1, 16), device="cuda")
    with torch.inference_mode():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fused(input_ids=static)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fused(input_ids=static).logits
        for seed in range(3):
            static.copy_(torch.randint(0, 128, (1, 16), generator=torch.Generator().manual_seed(seed)))
            graph.replay()
            want = plain(input_ids=static).logits
            assert (out.float() - want.float()).norm() <= 2e-2 * want.float().norm()


class _Norm(nn.Module):
    """RMSNorm-like by its name and attributes; ``offset`` makes it Gemma's (1 + weight)."""

    def __init__(self, dim, offset=0.0):
        super().__init__()
        self.weight, self.eps, self.offset = nn.Parameter(torch.rand(dim) + 0.5), 1e-6, offset

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() + self.offset).to(x.dtype) * h.to(x.dtype) if self.offset else self.weight * h.to(x.dtype)


_Norm.__name__ = "ToyRMSNorm"


class _NormedPair(nn.Module):
    def __init__(self, offset=0.0):
        super().__init__()
        self.norm, self.a, self.b = _Norm(32, offset), nn.Linear(32, 16), nn.Linear(32, 16)

    def forward(self, x):
        h = self.norm(x)
        return self.a(h) + self.b(h) + self.a(x)  # self.a runs twice: it cannot be in a group


def test_what_is_left_alone():
    """A layer called twice per forward, a norm whose math differs (Gemma's 1 + weight), static layers."""
    torch.manual_seed(0)
    for offset in (0.0, 1.0):
        m = _NormedPair(offset).eval()
        plain = copy.deepcopy(m)
        w8a8.quantize_model(plain, progress=False, skip=(), fuse=False)
        w8a8.quantize_model(m, progress=False, skip=(), fuse=False)
        report = fusion.fuse_model(m, torch.randn(3, 32))
        # a runs twice, so h's readers form no group, and the norm feeds none
        assert report.groups == [] and report.norms == [] and report.mlps == []
        x = torch.randn(5, 32)
        with torch.inference_mode():
            torch.testing.assert_close(m(x), plain(x), rtol=0, atol=0)
    torch.manual_seed(0)
    m = TwoOnOne().eval()
    calib = {n: 0.05 for n in ("left", "right", "out")}
    w8a8.quantize_model(m, progress=False, skip=(), act_quant="static", input_scales=calib)
    report = fusion.fuse_model(m, torch.randn(2, 32))
    assert report.groups == []


def test_a_norm_feeding_a_group_is_fused_only_when_its_math_is_ours():
    class Pair(nn.Module):
        def __init__(self, offset):
            super().__init__()
            self.norm, self.a, self.b = _Norm(32, offset), nn.Linear(32, 16), nn.Linear(32, 24)

        def forward(self, x):
            h = self.norm(x)
            return torch.cat([self.a(h), self.b(h)], -1)

    for offset, fused_norms in ((0.0, ["norm"]), (1.0, [])):
        torch.manual_seed(0)
        m = Pair(offset).eval()
        plain = copy.deepcopy(m)
        w8a8.quantize_model(plain, progress=False, skip=(), fuse=False)
        w8a8.quantize_model(m, progress=False, skip=(), fuse=False)
        report = fusion.fuse_model(m, torch.randn(3, 32))
        assert report.groups == [["a", "b"]] and report.norms == fused_norms
        x = torch.randn(4, 32)
        with torch.inference_mode():
            torch.testing.assert_close(m(x), plain(x), rtol=0, atol=0)


def test_recording_keeps_no_activation_alive():
    """A recorded forward (the first one, perhaps a long prefill) holds no activation: only an
    empty tensor and two numbers per activation."""
    import gc
    import weakref

    _, fused = _two_on_one()
    rec = plan._Recorder(fused)
    x = torch.randn(64, 32)
    with torch.inference_mode():
        fused(x)
    rec.remove()
    assert all(t.numel() == 0 for t in rec.like.values()) and all(t.numel() == 2 for t in rec._prints.values())
    ref = weakref.ref(x)
    del x
    gc.collect()
    assert ref() is None
