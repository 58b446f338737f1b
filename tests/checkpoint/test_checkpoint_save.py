"""save_quantized writes folders that reload everywhere, atomically; save_pretrained never writes float garbage."""
import json
import os

import pytest
import torch
from torch import nn

import w8a8
from helpers import Tiny, sentence_transformers_folder

transformers = pytest.importorskip("transformers")




def _llama(**kw):
    cfg = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256, tie_word_embeddings=False, **kw,
    )
    return transformers.LlamaForCausalLM(cfg).eval()


def _quantized(model_fn=Tiny):
    model = model_fn()
    w8a8.quantize_model(model, progress=False)
    return model


def _quantized_llama_and_logits(batch, tokens):
    """A quantized 2-layer Llama, token ids of that shape, and its logits on them."""
    model = _quantized(_llama)
    ids = torch.randint(0, 256, (batch, tokens))
    with torch.no_grad():
        return model, ids, model(ids).logits


def _tensors(folder):
    from safetensors.torch import load_file

    out = {}
    for n in sorted(os.listdir(folder)):
        if n.endswith(".safetensors"):
            out.update(load_file(os.path.join(folder, n)))
    return out


def _siblings(folder):
    parent, base = os.path.split(os.path.abspath(folder))
    return sorted(n for n in os.listdir(parent) if n.startswith(f".{base}."))


# --- point 1: a transformers model's folder reloads with w8a8, transformers and keeps side files ----


def test_llama_save_reloads_without_writing_the_config_by_hand(tmp_path):
    model, ids, ref = _quantized_llama_and_logits(2, 7)
    out = str(tmp_path / "q")
    w8a8.save_quantized(model, out, progress=False)
    cfg = json.load(open(os.path.join(out, "config.json")))
    assert cfg["model_type"] == "llama" and cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["hidden_size"] == 64 and cfg["quantization_config"]["quant_method"] == "compressed-tensors"
    assert os.path.isfile(os.path.join(out, "generation_config.json"))
    loaded = w8a8.from_pretrained(out, progress=False)
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, ref)


def test_transformers_loads_our_folder_with_compressed_tensors(tmp_path):
    pytest.importorskip("compressed_tensors")
    model, ids, ref = _quantized_llama_and_logits(2, 7)
    out = str(tmp_path / "q")
    w8a8.save_quantized(model, out, progress=False)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    # compressed-tensors holds our int8 codes and scales bit for bit ...
    for name in ("model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj"):
        theirs, ours = hf.get_submodule(name), model.get_submodule(name)
        assert torch.equal(theirs.weight.data, ours.weight), name
        assert torch.equal(theirs.weight_scale.data.float().reshape(-1), ours.weight_scale), name
    # ... and fake-quantizes activations in float (its rounding, not the int32 GEMM): close, not equal.
    with torch.no_grad():
        out_hf = hf(ids).logits
    assert ((out_hf - ref).norm() / ref.norm()).item() < 2e-2


def test_save_pretrained_writes_the_int8_checkpoint(tmp_path):
    model, ids, ref = _quantized_llama_and_logits(1, 5)
    out = str(tmp_path / "sp")
    model.save_pretrained(out)
    cfg = json.load(open(os.path.join(out, "config.json")))
    assert "quantization_config" in cfg
    assert _tensors(out)["model.layers.0.mlp.up_proj.weight"].dtype == torch.int8
    with torch.no_grad():
        assert torch.equal(w8a8.from_pretrained(out, progress=False)(ids).logits, ref)
    with pytest.raises(ValueError, match=r"w8a8.save_quantized.*push_to_hub"):
        model.save_pretrained(out, push_to_hub=True)
    # A model loaded by w8a8.from_pretrained has it too.
    again = w8a8.from_pretrained(out, progress=False)
    again.save_pretrained(str(tmp_path / "sp2"))
    assert "quantization_config" in json.load(open(tmp_path / "sp2" / "config.json"))


def test_source_side_files_and_sentence_transformers_modules_are_kept(tmp_path):
    bert, src = sentence_transformers_folder(tmp_path)
    ids = torch.randint(0, 100, (2, 6))
    w8a8.quantize_model(bert, progress=False)
    with torch.no_grad():
        ref = bert(ids).last_hidden_state
    out = str(tmp_path / "q")
    w8a8.save_quantized(bert, out, source=src, progress=False)
    for name in ("vocab.txt", "chat_template.jinja", "added_tokens.json", "modules.json", "1_Pooling/config.json"):
        assert open(os.path.join(out, name)).read() == open(os.path.join(src, name)).read(), name
    assert json.load(open(os.path.join(out, "config.json")))["architectures"] == ["BertModel"]
    loaded = w8a8.from_pretrained(out, progress=False)  # BertModel from architectures, not a causal LM
    assert type(loaded).__name__ == "BertModel"
    with torch.no_grad():
        assert torch.equal(loaded(ids).last_hidden_state, ref)


# --- point 2: atomic writes ---------------------------------------------------------------------


def test_output_equal_to_source_is_refused_before_anything(tmp_path):
    _, src = sentence_transformers_folder(tmp_path)
    before = sorted(os.listdir(src))
    model = _quantized()
    for out in (src, str(tmp_path)):  # the source itself, or a folder holding it
        with pytest.raises(ValueError, match=r"would replace the source folder"):
            w8a8.save_quantized(model, out, source=src, progress=False)
    assert sorted(os.listdir(src)) == before


def test_bad_existing_config_is_named_before_writing(tmp_path):
    out = tmp_path / "q"
    out.mkdir()
    (out / "config.json").write_text("{not json")
    with pytest.raises(w8a8.CheckpointError, match=rf"{out / 'config.json'} is not a valid JSON config"):
        w8a8.save_quantized(_quantized(), str(out), progress=False)
    assert sorted(os.listdir(out)) == ["config.json"] and _siblings(out) == []


@pytest.mark.parametrize("first_shards,second_shards", [(2000, 10**9), (10**9, 2000), (3000, 2000)])
def test_resave_over_sharded_and_single_file(tmp_path, first_shards, second_shards):
    out = str(tmp_path / "q")
    w8a8.save_quantized(_quantized(), out, max_shard_bytes=first_shards, progress=False)
    model = _quantized()
    paths = w8a8.save_quantized(model, out, max_shard_bytes=second_shards, progress=False)
    weight_files = sorted(n for n in os.listdir(out) if n.endswith(".safetensors"))
    assert weight_files == sorted(os.path.basename(p) for p in paths)
    assert os.path.exists(os.path.join(out, "model.safetensors.index.json")) == (len(paths) > 1)
    fresh = w8a8.load_quantized(Tiny(), out)
    x = torch.randn(3, 32)
    assert torch.equal(fresh(x), model(x)) and _siblings(out) == []


def _interrupt_at(monkeypatch, k, exc=KeyboardInterrupt):
    import safetensors.torch

    real, calls = safetensors.torch.save_file, []

    def save_file(*args, **kwargs):
        calls.append(1)
        if len(calls) == k:
            real(*args, **kwargs)  # the shard is written, then the process is interrupted
            raise exc("interrupted")
        return real(*args, **kwargs)

    monkeypatch.setattr(safetensors.torch, "save_file", save_file)


def _n_shards(folder):
    return sum(n.endswith(".safetensors") for n in os.listdir(folder))


def test_interrupted_save_over_an_older_checkpoint_leaves_it_intact(tmp_path, monkeypatch):
    out = str(tmp_path / "q")
    old = _quantized()
    w8a8.save_quantized(old, out, max_shard_bytes=1000, progress=False)
    old_files = {n: open(os.path.join(out, n), "rb").read() for n in os.listdir(out)}
    n = _n_shards(out)
    assert n >= 3
    x = torch.randn(2, 32)
    for k in range(1, n + 1):
        with monkeypatch.context() as m:
            _interrupt_at(m, k)
            with pytest.raises(KeyboardInterrupt):
                w8a8.save_quantized(_quantized(), out, max_shard_bytes=1000, progress=False)
        assert {n: open(os.path.join(out, n), "rb").read() for n in os.listdir(out)} == old_files, k
        assert torch.equal(w8a8.load_quantized(Tiny(), out)(x), old(x)) and _siblings(out) == []


def test_interrupted_save_into_a_fresh_folder_leaves_nothing(tmp_path, monkeypatch):
    for k in (1, 2, 3):
        out = str(tmp_path / f"fresh{k}")
        with monkeypatch.context() as m:
            _interrupt_at(m, k, OSError)
            with pytest.raises(OSError):
                w8a8.save_quantized(_quantized(), out, max_shard_bytes=1000, progress=False)
        assert not os.path.exists(out) and _siblings(out) == []


def test_resave_of_a_model_memory_mapped_from_the_same_folder(tmp_path):
    model = _quantized()
    out = str(tmp_path / "q")
    w8a8.save_quantized(model, out, progress=False)
    loaded = w8a8.load_quantized(Tiny(), out)  # views of the files in out
    x = torch.randn(2, 32)
    ref = loaded(x)
    w8a8.save_quantized(loaded, out, max_shard_bytes=2000, progress=False)
    assert torch.equal(loaded(x), ref)
    assert torch.equal(w8a8.load_quantized(Tiny(), out)(x), ref)


# --- point 4: zero scales of all-zero rows ---------------------------------------------------------


def test_all_zero_rows_round_trip(tmp_path):
    model = Tiny()
    with torch.no_grad():
        model.fc1.weight[[0, 5]] = 0.0  # pruned rows
        model.fc1.bias[5] = 0.25
    w8a8.quantize_model(model, progress=False)
    assert model.fc1.weight_scale[0] == 0 and model.fc1.weight_scale[5] == 0
    out = str(tmp_path / "q")
    w8a8.save_quantized(model, out, progress=False)
    fresh = w8a8.load_quantized(Tiny(), out)
    assert torch.equal(fresh.fc1.weight_scale, model.fc1.weight_scale)
    x = torch.randn(4, 32)
    y = fresh.fc1(x)
    assert torch.equal(y, model.fc1(x)) and torch.all(y[:, 5] == 0.25) and torch.all(y[:, 0] == model.fc1.bias[0])
