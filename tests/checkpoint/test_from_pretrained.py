"""from_pretrained: local folders only, dtype names, the model class from the config, thread-local meta construction."""
import json
import os
import threading

import pytest
import torch
from torch import nn

import w8a8
from w8a8 import CheckpointError

transformers = pytest.importorskip("transformers")


def _llama_folder(tmp_path):
    cfg = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=128, tie_word_embeddings=False,
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    w8a8.quantize_model(model, progress=False)
    out = str(tmp_path / "q")
    w8a8.save_quantized(model, out, progress=False)
    return model, out


def test_hub_id_is_refused_without_network(monkeypatch):
    import socket

    def no_network(*a, **k):
        raise AssertionError("network used")

    monkeypatch.setattr(socket.socket, "connect", no_network)  # any connection attempt fails the test
    with pytest.raises(CheckpointError, match=r"'meta-llama/Llama-3-8B' is not a local folder; .*never uses the network"):
        w8a8.from_pretrained("meta-llama/Llama-3-8B")


def test_missing_and_empty_folders_are_named(tmp_path):
    missing = str(tmp_path / "typo" / "model")
    with pytest.raises(CheckpointError, match=rf"{missing} does not exist"):
        w8a8.from_pretrained(missing)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"empty has no config.json \(not a model folder\)"):
        w8a8.from_pretrained(str(tmp_path / "empty"))
    (tmp_path / "empty" / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match=r"config.json has no model_type"):
        w8a8.from_pretrained(str(tmp_path / "empty"))


def test_float_folder_is_refused_before_building(tmp_path):
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, vocab_size=64)
    transformers.LlamaForCausalLM(cfg).save_pretrained(tmp_path / "f")
    with pytest.raises(CheckpointError, match=r"config.json has no quantization_config"):
        w8a8.from_pretrained(str(tmp_path / "f"))


@pytest.mark.parametrize("dtype", ["bfloat16", "torch.bfloat16", torch.bfloat16])
def test_dtype_strings(tmp_path, dtype):
    _, out = _llama_folder(tmp_path)
    model = w8a8.from_pretrained(out, dtype=dtype, progress=False)
    assert model.model.embed_tokens.weight.dtype == torch.bfloat16
    assert model.model.layers[0].mlp.up_proj.weight.dtype == torch.int8
    with pytest.raises(CheckpointError, match=r"dtype must be a float dtype"):
        w8a8.from_pretrained(out, dtype="int8")


def test_model_class_comes_from_architectures_and_mismatch_names_it(tmp_path):
    model, out = _llama_folder(tmp_path)
    assert type(w8a8.from_pretrained(out, progress=False)) is transformers.LlamaForCausalLM
    path = os.path.join(out, "config.json")
    cfg = json.load(open(path))
    cfg["architectures"] = ["LlamaModel"]  # the folder holds an LM head the base model has no place for
    json.dump(cfg, open(path, "w"))
    with pytest.raises(CheckpointError, match=r"unexpected .*lm_head.*\n.*model class LlamaModel, from config.json architectures 'LlamaModel'"):
        w8a8.from_pretrained(out, progress=False)


def test_meta_construction_is_local_to_the_loading_thread(tmp_path):
    _, out = _llama_folder(tmp_path)
    inside, built = threading.Event(), {}

    class Slow:
        @staticmethod
        def from_config(config):
            inside.set()
            assert built_event.wait(10)
            return transformers.LlamaForCausalLM._from_config(config)

    built_event = threading.Event()

    def other():
        assert inside.wait(10)
        lin = nn.Linear(4, 4)
        built["device"], built["dtype"] = lin.weight.device.type, lin.weight.dtype
        built["default"] = torch.get_default_dtype()
        built_event.set()

    t = threading.Thread(target=other)
    t.start()
    model = w8a8.from_pretrained(out, dtype=torch.bfloat16, model_class=Slow, progress=False)
    t.join()
    assert built == {"device": "cpu", "dtype": torch.float32, "default": torch.float32}
    assert model.model.embed_tokens.weight.dtype == torch.bfloat16 and not model.model.embed_tokens.weight.is_meta
    assert nn.Module.register_parameter is w8a8.checkpoint.hf._installed["original"] or \
        w8a8.checkpoint.hf._installed["users"] == 0
    assert not nn.Linear(2, 2).weight.is_meta
