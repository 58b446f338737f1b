"""from_pretrained(float_folder, quantize=W8A8Config(...)): quantized while loading, layer by
layer, to the same int8 model as quantize_model on the float model loaded normally."""
import json
import os
import weakref

import pytest
import torch

import w8a8
from w8a8 import CheckpointError
from w8a8.config import W8A8Config

transformers = pytest.importorskip("transformers")


def _float_folder(tmp_path, tie=False, dtype=None):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=128, tie_word_embeddings=tie,
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    if dtype is not None:
        model = model.to(dtype)
    src = str(tmp_path / "float")
    model.save_pretrained(src)
    return src


def _reference(src, config):
    model = transformers.LlamaForCausalLM.from_pretrained(src, dtype="auto").eval()
    report = w8a8.quantize_model(model, config, progress=False)
    return model, report


def _assert_same(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k].dtype == sb[k].dtype and torch.equal(sa[k], sb[k]), k
    ids = torch.randint(0, 128, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(a(ids).logits, b(ids).logits)


@pytest.mark.parametrize("config", [
    W8A8Config(),
    W8A8Config(skip=(), include=["*.mlp.*", "lm_head"], filter_fn=lambda m, n: not n.endswith("down_proj")),
], ids=["default", "include-filter_fn"])
def test_equals_quantize_model_on_the_float_model(tmp_path, config):
    src = _float_folder(tmp_path)
    got = w8a8.from_pretrained(src, quantize=config, progress=False)
    ref, ref_report = _reference(src, config)
    assert type(got) is transformers.LlamaForCausalLM and not got.training
    assert got.w8a8_report.replaced == ref_report.replaced and got.w8a8_report.skipped == ref_report.skipped
    assert got.w8a8_report.sqnr_db == ref_report.sqnr_db
    _assert_same(got, ref)


def test_tied_lm_head_and_bf16_and_static_input_scales(tmp_path):
    src = _float_folder(tmp_path, tie=True, dtype=torch.bfloat16)
    ref0 = transformers.LlamaForCausalLM.from_pretrained(src, dtype="auto")
    names = [n for n, m in ref0.named_modules() if isinstance(m, torch.nn.Linear)]
    config = W8A8Config(act_quant="static", skip=(), input_scales={n: 0.01 * (i + 1) for i, n in enumerate(names)})
    got = w8a8.from_pretrained(src, quantize=config, progress=False)
    ref, _ = _reference(src, config)
    assert "lm_head" in got.w8a8_report.replaced  # quantized from the tied embedding
    assert got.model.embed_tokens.weight.dtype == torch.bfloat16
    _assert_same(got, ref)


def test_one_float_linear_weight_at_a_time(tmp_path, monkeypatch):
    """Each float weight handed to the quantizer is gone (freed) before the next one is read,
    and no float Linear remains in the result."""
    src = _float_folder(tmp_path)
    seen, alive_at_call = [], []
    original = w8a8.W8A8Linear.from_linear.__func__

    def spy(cls, linear, *args, **kwargs):
        alive_at_call.append(sum(r() is not None for r in seen))
        seen.append(weakref.ref(linear.weight))
        return original(cls, linear, *args, **kwargs)

    monkeypatch.setattr(w8a8.W8A8Linear, "from_linear", classmethod(spy))
    model = w8a8.from_pretrained(src, quantize=W8A8Config(skip=()), progress=False)
    assert len(seen) == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer, and lm_head
    assert alive_at_call == [0] * len(seen), alive_at_call
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert not any(t.is_meta for t in (*model.parameters(), *model.buffers()))


def test_saved_and_reloaded_is_the_same_model(tmp_path):
    src = _float_folder(tmp_path)
    got = w8a8.from_pretrained(src, quantize=W8A8Config(), progress=False)
    out = str(tmp_path / "q")
    got.save_pretrained(out)
    _assert_same(w8a8.from_pretrained(out, progress=False), got)


def test_refusals(tmp_path):
    src = _float_folder(tmp_path)
    with pytest.raises(TypeError, match=r"quantize must be a w8a8.W8A8Config or None, got dict"):
        w8a8.from_pretrained(src, quantize={"act_quant": "dynamic"})
    with pytest.raises(ValueError, match=r"needs the float model run on the batches"):
        w8a8.from_pretrained(src, quantize=W8A8Config(act_quant="static", calibration=[torch.zeros(1, 2, dtype=torch.long)]))
    with pytest.raises(ValueError, match=r"act_quant='static' needs input_scales for every layer"):
        w8a8.from_pretrained(src, quantize=W8A8Config(act_quant="static"))
    q = str(tmp_path / "q")
    w8a8.from_pretrained(src, quantize=W8A8Config(), progress=False).save_pretrained(q)
    with pytest.raises(CheckpointError, match=r"is already quantized; drop quantize="):
        w8a8.from_pretrained(q, quantize=W8A8Config())
    cfg = json.load(open(os.path.join(src, "config.json")))
    cfg["architectures"] = ["LlamaForSequenceClassification"]  # a head the folder does not hold
    json.dump(cfg, open(os.path.join(src, "config.json"), "w"))
    with pytest.raises(CheckpointError, match=r"does not hold 1 weights of LlamaForSequenceClassification .*'score.weight'.*would be random"):
        w8a8.from_pretrained(src, quantize=W8A8Config())


@pytest.mark.parametrize("name,shape", [
    ("model.layers.0.mlp.down_proj.weight", (1, 64)),  # broadcast over the layer, once loaded silently
    ("model.layers.1.self_attn.q_proj.weight", (64, 32)),
    ("model.norm.weight", (32,)),
])
def test_wrong_shapes_are_refused_before_building(tmp_path, name, shape):
    from safetensors.torch import load_file, save_file

    src = _float_folder(tmp_path)
    path = os.path.join(src, "model.safetensors")
    state = load_file(path)
    expected = list(state[name].shape)
    state[name] = torch.randn(shape)
    save_file(state, path, metadata={"format": "pt"})
    built = []
    original = w8a8.W8A8Linear.from_linear.__func__
    with pytest.MonkeyPatch.context() as m:
        m.setattr(w8a8.W8A8Linear, "from_linear", classmethod(lambda cls, *a, **k: built.append(1) or original(cls, *a, **k)))
        with pytest.raises(CheckpointError) as info:
            w8a8.from_pretrained(src, quantize=W8A8Config(report=False), progress=False)
    assert built == []
    assert f"{path}: {name} has shape {list(shape)}, expected {expected}" in str(info.value)
    assert "does not match LlamaForCausalLM (from config.json architectures 'LlamaForCausalLM')" in str(info.value)
