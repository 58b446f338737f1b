"""Folders in the Hugging Face cache layout: a snapshot whose files (shards included) are links
into ``../../blobs/``. Every entry point reads them like plain folders."""
import json
import os

import pytest
import torch

import w8a8
from helpers import Tiny, hf_cache_layout
from w8a8.__main__ import main

transformers = pytest.importorskip("transformers")


def _float_llama(folder):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=128, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(cfg).eval()
    model.save_pretrained(folder, max_shard_size="100KB")
    assert len([n for n in os.listdir(folder) if n.endswith(".safetensors")]) >= 3
    return model


def _logits(model):
    ids = torch.arange(14).reshape(2, 7) % 128
    with torch.no_grad():
        return model(ids).logits


def _all_links(snapshot):
    names = [n for n in os.listdir(snapshot) if n.endswith((".safetensors", ".json"))]
    assert names and all(os.path.islink(os.path.join(snapshot, n)) for n in names)
    assert os.readlink(os.path.join(snapshot, names[0])).startswith("../../blobs/")


def test_sharded_float_snapshot_quantizes_while_loading_and_in_the_cli(tmp_path, capsys):
    _float_llama(tmp_path / "float")
    snapshot = hf_cache_layout(tmp_path / "float", tmp_path / "hub")
    _all_links(snapshot)
    plain = w8a8.from_pretrained(str(tmp_path / "float"), quantize=w8a8.W8A8Config(), progress=False)
    cached = w8a8.from_pretrained(snapshot, quantize=w8a8.W8A8Config(), progress=False)
    assert torch.equal(_logits(cached), _logits(plain))
    out = str(tmp_path / "cli")
    assert main(["quantize", snapshot, out, "--quiet", "--device", "cpu"]) == 0
    assert not any(os.path.islink(os.path.join(out, n)) for n in os.listdir(out))  # contents copied, not links
    assert torch.equal(_logits(w8a8.from_pretrained(out, progress=False)), _logits(plain))


def test_sharded_int8_snapshot_loads(tmp_path):
    model = w8a8.from_pretrained(str(_float_folder(tmp_path)), quantize=w8a8.W8A8Config(), progress=False)
    w8a8.save_quantized(model, str(tmp_path / "q"), max_shard_bytes=50_000, progress=False)
    index = json.load(open(tmp_path / "q" / "model.safetensors.index.json"))
    assert len(set(index["weight_map"].values())) >= 3
    snapshot = hf_cache_layout(tmp_path / "q", tmp_path / "hub")
    _all_links(snapshot)
    assert torch.equal(_logits(w8a8.from_pretrained(snapshot, progress=False)), _logits(model))


def _float_folder(tmp_path):
    _float_llama(tmp_path / "float")
    return tmp_path / "float"


def test_load_quantized_reads_a_linked_sharded_folder(tmp_path):
    model = Tiny()
    w8a8.quantize_model(model, progress=False)
    w8a8.save_quantized(model, str(tmp_path / "q"), max_shard_bytes=1000, progress=False)
    snapshot = hf_cache_layout(tmp_path / "q", tmp_path / "hub")
    x = torch.randn(3, 32)
    assert torch.equal(w8a8.load_quantized(Tiny(), snapshot)(x), model(x))
