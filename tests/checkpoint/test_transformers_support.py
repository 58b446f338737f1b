"""transformers' own loading path (the "w8a8" quantization method, registered lazily), the version
range of the hf extra, and the keywords the package passes to transformers."""
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import w8a8
from w8a8.config import W8A8Config

transformers = pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[2]


def _float_folder(tmp_path, dtype=torch.float32):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=128, tie_word_embeddings=False)
    src = str(tmp_path / "float")
    transformers.LlamaForCausalLM(cfg).to(dtype).eval().save_pretrained(src)
    return src


def _logits(model):
    ids = torch.arange(14).reshape(2, 7)
    with torch.no_grad():
        return model(ids).logits


def _assert_same(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k].dtype == sb[k].dtype and torch.equal(sa[k], sb[k]), k
    assert torch.equal(_logits(a), _logits(b))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_auto_model_quantizes_while_loading_like_w8a8_from_pretrained(tmp_path, dtype):
    pytest.importorskip("accelerate")  # transformers' device_map needs it
    src = _float_folder(tmp_path)
    config = W8A8Config(skip=["lm_head", "re:.*layers\\.1\\.mlp\\.down_proj"])
    model = transformers.AutoModelForCausalLM.from_pretrained(src, quantization_config=config, device_map="cpu",
                                                              dtype=dtype)
    ref = w8a8.from_pretrained(src, quantize=config, dtype=dtype, progress=False)
    assert isinstance(model.model.layers[0].mlp.down_proj, w8a8.W8A8Linear)
    assert type(model.model.layers[1].mlp.down_proj) is torch.nn.Linear
    assert model.w8a8_report.replaced == ref.w8a8_report.replaced and model.w8a8_report.sqnr_db == ref.w8a8_report.sqnr_db
    _assert_same(model, ref)
    qc = model.config.quantization_config  # what the checkpoint will say, in the format every tool reads
    assert qc["quant_method"] == "compressed-tensors" and qc["ignore"] == ["model.layers.1.mlp.down_proj", "lm_head"]
    out = str(tmp_path / "q")
    model.save_pretrained(out)
    assert json.load(open(os.path.join(out, "config.json")))["quantization_config"] == qc
    reloaded = w8a8.from_pretrained(out, progress=False)
    if dtype == torch.float32:  # scales are stored in the model's dtype: exact in fp32
        _assert_same(reloaded, model)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(out)  # compressed-tensors reads it
    name = "model.layers.0.self_attn.q_proj"
    assert torch.equal(theirs.get_submodule(name).weight.data, model.get_submodule(name).weight)


def test_registration_is_lazy_and_happens_when_transformers_asks():
    code = (
        "import sys, w8a8\n"
        "c = w8a8.W8A8Config()\n"
        "print('transformers' in sys.modules)\n"
        "from transformers.quantizers.auto import AUTO_QUANTIZER_MAPPING as M\n"
        "print('w8a8' in M)\n"
        "print(c.quant_method, M['w8a8'].__name__)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env,
                         cwd=str(ROOT)).stdout.split()
    assert out == ["False", "False", "w8a8", "W8A8HfQuantizer"]


def test_a_dict_config_and_a_folder_claiming_w8a8(tmp_path):
    from w8a8.checkpoint.hf_quantizer import register

    register()
    src = _float_folder(tmp_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(src, quantization_config={"quant_method": "w8a8", "skip": []})
    assert "lm_head" in model.w8a8_report.replaced
    _assert_same(model, w8a8.from_pretrained(src, quantize=W8A8Config(skip=[]), progress=False))
    path = os.path.join(src, "config.json")
    cfg = json.load(open(path))
    cfg["quantization_config"] = {"quant_method": "w8a8"}
    json.dump(cfg, open(path, "w"))
    with pytest.raises(ValueError, match=r"says quant_method 'w8a8', which no w8a8 checkpoint holds"):
        transformers.AutoModelForCausalLM.from_pretrained(src)


def test_generator_uses_the_cache_keyword(tmp_path):
    """transformers deprecates ``past_key_values=`` (a FutureWarning, removed in 5.40): the decode steps
    pass ``cache=``."""
    model = transformers.AutoModelForCausalLM.from_pretrained(_float_folder(tmp_path), quantization_config=W8A8Config())
    ids = torch.arange(5).reshape(1, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        tokens = w8a8.Generator(model, cuda_graph=False).generate(ids, max_new_tokens=3)
    assert tokens.shape == (1, 8) and torch.equal(tokens[:, :5], ids)


def _hf_range():
    text = (ROOT / "setup.py").read_text()
    spec = re.search(r'"hf": \["transformers>=([\d.]+),<([\d.]+)"\]', text)
    assert spec, "setup.py states the hf extra as transformers>=LOW,<HIGH"
    return spec.groups()


def test_installed_transformers_is_inside_the_stated_range_and_ci_tests_the_lower_end():
    from packaging.version import Version

    low, high = _hf_range()
    assert Version(low) <= Version(transformers.__version__) < Version(high), (transformers.__version__, low, high)
    assert f"transformers=={low}" in (ROOT / ".ci" / "run").read_text()  # the lower end, pinned in CI
    assert re.search(rf'"transformers>={re.escape(low)},<{re.escape(high)}"', (ROOT / "setup.py").read_text())
