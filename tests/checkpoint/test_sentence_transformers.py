"""sentence-transformers: quantized while loading or in place, saved with its own ``save``, read back.

The path that works, as docs/GUIDE.md gives it:

* ``SentenceTransformer(float_folder, model_kwargs={"quantization_config": w8a8.W8A8Config()})`` or
  ``w8a8.quantize_model(st)``: the encoder's Linears become W8A8Linear;
* ``st.save(out)``: sentence-transformers calls the encoder's ``save_pretrained``, which w8a8 installed
  on it: the compressed-tensors checkpoint beside ``modules.json`` and ``1_Pooling/``;
* ``SentenceTransformer(out, model_kwargs={"quantization_config": CompressedTensorsConfig(dequantize=True)})``
  reads it (float weights), and ``w8a8.load_quantized(st[0].auto_model, out)`` puts the int8 layers back.
"""
import json
import os
import sys
from pathlib import Path

import pytest
import torch

import w8a8

transformers = pytest.importorskip("transformers")
from sentence_transformers import SentenceTransformer  # noqa: E402  (the test extra installs it)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import make_tiny_models  # noqa: E402

SENTENCES = ["the cat sat on the mat", "a big red dog ran to the house", "int8 weights are fast"]


@pytest.fixture
def encoder(tmp_path):
    return make_tiny_models.tiny_encoder(str(tmp_path / "encoder"))


def _embed(st):
    return st.encode(SENTENCES, convert_to_tensor=True)


def test_quantize_save_and_read_back(tmp_path, encoder):
    st = SentenceTransformer(encoder, device="cpu")
    report = w8a8.quantize_model(st, progress=False)
    assert len(report.replaced) == 7
    want = _embed(st)
    out = str(tmp_path / "int8")
    st.save(out)
    cfg = json.load(open(os.path.join(out, "config.json")))
    assert cfg["quantization_config"]["quant_method"] == "compressed-tensors"  # it was absent: int8 codes read as floats
    assert {"modules.json", "1_Pooling", "config_sentence_transformers.json"} <= set(os.listdir(out))
    assert torch.equal(w8a8.from_pretrained(out, progress=False).embeddings.word_embeddings.weight,
                       st[0].auto_model.embeddings.word_embeddings.weight)
    with pytest.warns(UserWarning, match=r"quantization_config"):  # transformers: the folder's config is used
        back = SentenceTransformer(out, device="cpu", model_kwargs={
            "quantization_config": transformers.CompressedTensorsConfig(dequantize=True)})
    dequantized = _embed(back)
    assert ((dequantized - want).norm() / want.norm()).item() < 1e-3  # float weights, float activations
    w8a8.load_quantized(back[0].auto_model, out)
    assert torch.equal(_embed(back), want)


def test_quantized_while_loading_equals_quantize_model(encoder):
    config = w8a8.W8A8Config(skip=())
    loaded = SentenceTransformer(encoder, device="cpu", model_kwargs={"quantization_config": config})
    assert isinstance(loaded[0].auto_model.encoder.layer[0].attention.self.query, w8a8.W8A8Linear)
    st = SentenceTransformer(encoder, device="cpu")
    w8a8.quantize_model(st, config, progress=False)
    assert torch.equal(_embed(loaded), _embed(st))
