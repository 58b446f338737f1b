"""Checkpoints in the compressed-tensors int8 layout: round trips, files written by the library, bad files."""
import json
import os
import struct

import pytest
import torch
from torch import nn

import w8a8
from helpers import Tiny, assert_untouched, module_snapshot
from w8a8 import reference
from w8a8.checkpoint.safetensors_io import CheckpointError

# Test dependencies (the "test" extra): a missing one is an error, not a skip.
ct_quant = pytest.importorskip("compressed_tensors.quantization", reason="the compressed-tensors interop tests need the package (pip install .[test])")
import transformers
from compressed_tensors.compressors import ModelCompressor
from compressed_tensors.quantization.utils.helpers import calculate_qparams
from safetensors.torch import load_file, save_file


def _read_json(path):
    with open(path) as f:
        return json.load(f)


def _write_json(obj, path):
    with open(path, "w") as f:
        json.dump(obj, f)


def _saved(tmp_path, act_quant="dynamic", dtype=torch.float32):
    model = Tiny().to(dtype)
    scales = {"fc1": 0.05, "fc2": 0.02} if act_quant == "static" else None
    w8a8.quantize_model(model, act_quant=act_quant, input_scales=scales, progress=False)
    out = str(tmp_path / "ckpt")
    w8a8.save_quantized(model, out, progress=False)
    return model, out


# --- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("act_quant", ["dynamic", "static"])
def test_round_trip_identical_outputs(tmp_path, act_quant):
    model, out = _saved(tmp_path, act_quant)
    with torch.device("meta"):
        fresh = Tiny()
    w8a8.load_quantized(fresh, out)
    assert isinstance(fresh.fc1, w8a8.W8A8Linear) and isinstance(fresh.lm_head, nn.Linear)
    assert fresh.fc1.act_quant == act_quant
    for k, v in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k
    x = torch.randn(5, 32)
    assert torch.equal(fresh(x), model(x))


def test_round_trip_bf16_scales(tmp_path):
    """Default: scales stored in the model dtype (bf16), upcast on load; float32 on request is exact."""
    model, out = _saved(tmp_path, dtype=torch.bfloat16)
    sd = load_file(os.path.join(out, "model.safetensors"))
    assert sd["fc1.weight_scale"].dtype == torch.bfloat16 and sd["fc1.weight_scale"].shape == (48, 1)
    fresh = w8a8.load_quantized(Tiny().to(torch.bfloat16), out)
    assert torch.equal(fresh.fc1.weight_scale, model.fc1.weight_scale.bfloat16().float())
    w8a8.save_quantized(model, out, scale_dtype=torch.float32, progress=False)
    fresh = w8a8.load_quantized(Tiny().to(torch.bfloat16), out)
    x = torch.randn(3, 32, dtype=torch.bfloat16)
    assert torch.equal(fresh(x), model(x))


def test_sharded_and_existing_config_updated(tmp_path):
    model, out = _saved(tmp_path)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"model_type": "tiny", "compression_config": {"old": 1}}, f)
    paths = w8a8.save_quantized(model, out, max_shard_bytes=2000, progress=False)
    assert len(paths) > 1 and os.path.exists(os.path.join(out, "model.safetensors.index.json"))
    assert not os.path.exists(os.path.join(out, "model.safetensors")), "the earlier single file is gone (the folder is swapped whole)"
    cfg = _read_json(os.path.join(out, "config.json"))
    assert cfg["model_type"] == "tiny" and "compression_config" not in cfg
    qc = cfg["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors" and qc["format"] == "int-quantized"
    assert qc["ignore"] == ["lm_head"] and qc["config_groups"]["group_0"]["targets"] == ["Linear"]
    fresh = w8a8.load_quantized(Tiny(), out)
    x = torch.randn(2, 32)
    assert torch.equal(fresh(x), model(x))


def test_tiny_llama_from_pretrained(tmp_path):
    cfg = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256, tie_word_embeddings=False,
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    report = w8a8.quantize_model(model, progress=False)
    assert len(report.replaced) == 14
    ids = torch.randint(0, 256, (2, 7))
    with torch.no_grad():
        ref = model(ids).logits
    out = str(tmp_path / "llama")
    model.config.save_pretrained(out)
    w8a8.save_quantized(model, out, progress=False)
    loaded = w8a8.from_pretrained(out, progress=False)
    assert isinstance(loaded.model.layers[1].mlp.down_proj, w8a8.W8A8Linear)
    assert type(loaded.lm_head) is nn.Linear
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, ref)


# --- files written by compressed-tensors itself ---------------------------------------------


def _ct_checkpoint(tmp_path, weight_strategy="channel", act="dynamic", dtype=torch.bfloat16):
    """Quantize Tiny with compressed-tensors' own lifecycle and compressor; save like llm-compressor does."""
    QA = ct_quant.QuantizationArgs
    acts = {
        "dynamic": QA(num_bits=8, type="int", strategy="token", symmetric=True, dynamic=True),
        "static": QA(num_bits=8, type="int", strategy="tensor", symmetric=True, dynamic=False),
        "static_asym": QA(num_bits=8, type="int", strategy="tensor", symmetric=False, dynamic=False),
    }[act]
    scheme = ct_quant.QuantizationScheme(
        targets=["Linear"],
        weights=QA(num_bits=8, type="int", strategy=weight_strategy, symmetric=True, dynamic=False),
        input_activations=acts,
    )
    qc = ct_quant.QuantizationConfig(config_groups={"group_0": scheme}, ignore=["lm_head"], quantization_status="frozen")
    model = Tiny().to(dtype)
    float_state = {k: v.clone() for k, v in model.state_dict().items()}
    ct_quant.apply_quantization_config(model, qc, show_progress=False)
    for name in ("fc1", "fc2"):
        mod = getattr(model, name)
        w = mod.weight.data
        dims = (1,) if weight_strategy == "channel" else (0, 1)
        s, _ = calculate_qparams(w.amin(dims, keepdim=True).reshape(mod.weight_scale.shape),
                                 w.amax(dims, keepdim=True).reshape(mod.weight_scale.shape), scheme.weights)
        mod.weight_scale.data.copy_(s)
        if act != "dynamic":
            s, zp = calculate_qparams(torch.tensor([-3.0]), torch.tensor([5.0]), acts)
            mod.input_scale.data.copy_(s)
            mod.input_zero_point.data.copy_(zp)
    comp = ModelCompressor.from_pretrained_model(model)
    comp.compress_model(model)
    out = str(tmp_path / f"ct_{weight_strategy}_{act}")
    os.makedirs(out)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, os.path.join(out, "model.safetensors"))
    comp.update_config(out)
    return out, state, float_state


@pytest.mark.parametrize("weight_strategy,act", [("channel", "dynamic"), ("tensor", "static"), ("channel", "static_asym")])
def test_loads_checkpoint_written_by_compressed_tensors(tmp_path, weight_strategy, act):
    out, state, float_state = _ct_checkpoint(tmp_path, weight_strategy, act)
    assert state["fc1.weight"].dtype == torch.int8 and state["fc1.weight_scale"].dtype == torch.bfloat16
    assert ("fc1.input_zero_point" in state) == (act == "static_asym")
    model = Tiny().to(torch.bfloat16)
    w8a8.load_quantized(model, out)
    assert type(model.lm_head) is nn.Linear and torch.equal(model.lm_head.weight, float_state["lm_head.weight"])
    n_min = 0
    for name in ("fc1", "fc2"):
        layer = getattr(model, name)
        assert torch.equal(layer.weight, state[f"{name}.weight"])  # bit for bit
        n_min += int((layer.weight == -128).sum())
        w_scale = state[f"{name}.weight_scale"].float().reshape(-1).expand(layer.out_features)
        assert layer.weight_scale.dtype == torch.float32 and torch.equal(layer.weight_scale, w_scale)
        # The float dequantized weight, as compressed-tensors defines it (int8 * bf16 scale, exact in fp32).
        deq = state[f"{name}.weight"].float() * state[f"{name}.weight_scale"].float()
        assert torch.equal(layer.dequantized_weight(), deq)
        x = torch.randn(6, layer.in_features, dtype=torch.bfloat16)
        if act == "dynamic":
            q, a_scale = reference.quantize_per_token(x)
            bias = layer.bias
        else:
            a_scale = state[f"{name}.input_scale"].float()
            zp = state.get(f"{name}.input_zero_point")
            q = reference.quantize_static(x, a_scale, zp)
            if zp is not None:  # dequantize the activations exactly: (q - zp) in int, as compressed-tensors does
                q16 = q.to(torch.int32) - zp.to(torch.int32)
                expected = a_scale * (q16.double() @ layer.weight.double().t()).float() * w_scale
                expected = (expected + (layer.bias.float() if layer.bias is not None else 0)).to(torch.bfloat16)
                assert (expected - layer(x)).abs().max() <= 2 * expected.abs().max() * 2**-8
            bias = layer.folded_bias()
        ref = reference.scaled_mm(q, layer.weight, a_scale, layer.weight_scale, bias, torch.bfloat16)
        assert torch.equal(layer(x), ref)
    if weight_strategy == "channel":  # absmax / 127.5 puts -128 in ~40% of rows (per tensor: at most one)
        assert n_min > 0


def test_our_folder_is_accepted_by_compressed_tensors(tmp_path):
    model, out = _saved(tmp_path, dtype=torch.bfloat16)
    cfg = _read_json(os.path.join(out, "config.json"))
    qc = ct_quant.QuantizationConfig.model_validate(cfg["quantization_config"])
    assert qc.format == "int-quantized" and qc.quantization_status == "compressed"
    target = Tiny().to(torch.bfloat16)
    ct_quant.apply_quantization_config(target, qc, show_progress=False)
    comp = ModelCompressor(quantization_config=qc)
    comp.compress_model(target)  # the compressed layout compressed-tensors expects to load into
    result = target.load_state_dict(load_file(os.path.join(out, "model.safetensors")), strict=True, assign=True)
    assert not result.missing_keys and not result.unexpected_keys
    comp.decompress_model(target)
    ours = w8a8.load_quantized(Tiny().to(torch.bfloat16), out)
    for name in ("fc1", "fc2"):
        assert torch.equal(getattr(target, name).weight, getattr(ours, name).dequantized_weight().bfloat16())


# --- static asymmetric folding -------------------------------------------------------------


def test_static_zero_point_folds_exactly():
    lin = nn.Linear(64, 24)
    layer = w8a8.W8A8Linear.from_linear(lin, act_quant="static", input_scale=0.03)
    zp_layer = w8a8.W8A8Linear(64, 24, act_quant="static", input_zero_point=True)
    zp_layer.load_state_dict({**layer.state_dict(), "input_zero_point": torch.tensor([-17], dtype=torch.int8)})
    x = torch.randn(7, 64) + 1.0
    zp = zp_layer.input_zero_point
    q = reference.quantize_static(x, zp_layer.input_scale, zp)
    # out = s_a * s_w * ((q - zp) @ W^T) + bias, accumulated exactly in integers.
    acc = reference.int_mm_exact(q, layer.weight) - zp.int() * layer.weight.int().sum(1)
    folded = layer.bias - zp_layer.input_scale * layer.weight_scale * (zp.float() * layer.weight.int().sum(1).float())
    assert torch.equal(zp_layer.folded_bias(), folded)
    expected = reference.scaled_mm(q, layer.weight, zp_layer.input_scale, layer.weight_scale, folded, torch.float32)
    assert torch.equal(zp_layer(x), expected)
    direct = zp_layer.input_scale * (layer.weight_scale * acc.float()) + layer.bias
    assert torch.allclose(zp_layer(x), direct, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="input_zero_point needs act_quant='static', got 'dynamic'"):
        w8a8.W8A8Linear(8, 8, input_zero_point=True)


# --- bad files: a clear error, and the model as it was ---------------------------------------


def _rewrite(out, edit):
    path = os.path.join(out, "model.safetensors")
    sd = load_file(path)
    edit(sd)
    save_file(sd, path)


def _set(key, value):
    return lambda sd: sd.__setitem__(key, value)


BAD_FILES = {
    "missing tensor": (lambda sd: sd.pop("fc2.weight_scale"), r"missing 1 tensors: \['fc2.weight_scale'\]"),
    "wrong dtype": (_set("fc1.weight", torch.zeros(48, 32)), r"fc1.weight: expected dtype int8, got torch.float32"),
    "wrong shape": (_set("fc1.weight", torch.zeros(48, 31, dtype=torch.int8)), r"fc1.weight: expected shape \[48, 32\], got \[48, 31\]"),
    "unexpected key": (_set("fc9.weight", torch.zeros(2)), r"unexpected 1 tensors: \['fc9.weight'\]"),
    "nan scale": (_set("fc1.weight_scale", torch.full((48, 1), float("nan"))), r"fc1.weight_scale must be finite and > 0; 48 of 48"),
    "inf scale": (_set("fc2.input_scale", torch.tensor([float("inf")])), r"fc2.input_scale must be finite and > 0"),
    "zero scale": (_set("fc1.input_scale", torch.tensor([0.0])), r"fc1.input_scale must be finite and > 0; 1 of 1 .*0.0"),
    "negative scale": (lambda sd: sd["fc2.weight_scale"].neg_(), r"fc2.weight_scale must be finite and > 0; 16 of 16"),
    "nonzero symmetric zero point": (
        _set("fc1.weight_zero_point", torch.ones(48, 1, dtype=torch.int8)),
        r"fc1.weight_zero_point is nonzero, but its group's scheme is symmetric",
    ),
}


def test_zero_zero_points_of_symmetric_schemes_are_accepted(tmp_path):
    """Older files hold all-zero zero points for symmetric weights and activations."""
    model, out = _saved(tmp_path, act_quant="static")
    _rewrite(out, lambda sd: sd.update({
        "fc1.weight_zero_point": torch.zeros(48, 1, dtype=torch.int8),
        "fc1.input_zero_point": torch.zeros(1, dtype=torch.int8),
    }))
    fresh = w8a8.load_quantized(Tiny(), out)
    assert fresh.fc1.input_zero_point is None
    x = torch.randn(3, 32)
    assert torch.equal(fresh(x), model(x))


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_file_clear_error_and_model_untouched(tmp_path, case):
    _, out = _saved(tmp_path, act_quant="static")
    edit, message = BAD_FILES[case]
    _rewrite(out, edit)
    model = Tiny()
    before = module_snapshot(model)
    with pytest.raises(CheckpointError, match=message):
        w8a8.load_quantized(model, out)
    assert_untouched(model, before)


def test_unexpected_key_is_a_warning_when_not_strict(tmp_path):
    _, out = _saved(tmp_path)
    _rewrite(out, _set("extra", torch.zeros(1)))
    with pytest.warns(UserWarning, match=r"unexpected 1 tensors: \['extra'\]"):
        w8a8.load_quantized(Tiny(), out, strict=False)


@pytest.mark.parametrize("cut", [4, 100, -10])
def test_truncated_file(tmp_path, cut):
    _, out = _saved(tmp_path)
    path = os.path.join(out, "model.safetensors")
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    with open(path, "wb") as f:
        f.write(data[: cut if 0 < cut < 8 + n else len(data) + cut])
    model = Tiny()
    before = module_snapshot(model)
    with pytest.raises(CheckpointError, match=r"truncated"):
        w8a8.load_quantized(model, out)
    assert_untouched(model, before)


UNSUPPORTED = {
    "asymmetric weights": ("weights", {"symmetric": False}, "asymmetric weights"),
    "group strategy": ("weights", {"strategy": "group", "group_size": 16}, "weight strategy 'group'"),
    "4-bit": ("weights", {"num_bits": 4}, "weights num_bits=4"),
    "dynamic asymmetric": ("input_activations", {"symmetric": False}, "input_activations dynamic=True strategy='token' symmetric=False"),
}


@pytest.mark.parametrize("case", list(UNSUPPORTED))
def test_unsupported_scheme_names_layer_and_scheme(tmp_path, case):
    _, out = _saved(tmp_path)
    field, change, why = UNSUPPORTED[case]
    path = os.path.join(out, "config.json")
    cfg = _read_json(path)
    cfg["quantization_config"]["config_groups"]["group_0"][field].update(change)
    _write_json(cfg, path)
    model = Tiny()
    before = module_snapshot(model)
    with pytest.raises(ValueError, match=rf"layer 'fc1' \(group_0\) has an unsupported scheme: {why}.*supported: weights int8 symmetric"):
        w8a8.load_quantized(model, out)
    assert_untouched(model, before)


def test_no_safetensors_never_unpickles(tmp_path):
    _, out = _saved(tmp_path)
    os.remove(os.path.join(out, "model.safetensors"))
    torch.save({}, os.path.join(out, "pytorch_model.bin"))
    with pytest.raises(CheckpointError, match=r"holds no .safetensors files \(found \['pytorch_model.bin'\]: pickle files are never loaded\)"):
        w8a8.load_quantized(Tiny(), out)


def test_from_pretrained_without_transformers_says_how(monkeypatch, tmp_path):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "transformers" or name.startswith("transformers."):
            raise ImportError("no transformers")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match=r"pip install w8a8\[hf\]"):
        w8a8.from_pretrained(str(tmp_path))


# --- python -m w8a8 quantize ------------------------------------------------------------------


def test_cli_quantize_folder(tmp_path):
    import subprocess
    import sys

    cfg = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256, tie_word_embeddings=False,
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    src, out = str(tmp_path / "float"), str(tmp_path / "int8")
    model.save_pretrained(src)
    res = subprocess.run(
        [sys.executable, "-m", "w8a8", "quantize", src, out, "--act", "dynamic"],
        capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "model.layers.0.self_attn.q_proj" in res.stdout and "weight SQNR" in res.stdout
    assert "replaced 14 Linear layers, skipped 1" in res.stdout
    w8a8.quantize_model(model, progress=False)
    ids = torch.randint(0, 256, (1, 9))
    loaded = w8a8.from_pretrained(out, progress=False)
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)


def test_mixed_schemes_get_one_group_each(tmp_path):
    model = Tiny()
    w8a8.quantize_model(model, skip=("fc2", "lm_head"), progress=False)
    model.fc2 = w8a8.W8A8Linear.from_linear(model.fc2, act_quant="static", input_scale=0.04)
    out = str(tmp_path / "mixed")
    w8a8.save_quantized(model, out, progress=False)
    qc = _read_json(os.path.join(out, "config.json"))["quantization_config"]
    ct_quant.QuantizationConfig.model_validate(qc)
    assert sorted(g["targets"][0] for g in qc["config_groups"].values()) == ["fc1", "fc2"]
    fresh = w8a8.load_quantized(Tiny(), out)
    assert (fresh.fc1.act_quant, fresh.fc2.act_quant) == ("dynamic", "static")
    x = torch.randn(4, 32)
    assert torch.equal(fresh(x), model(x))


def test_dtype_override_casts_float_tensors_only(tmp_path):
    model, out = _saved(tmp_path, act_quant="static")
    fresh = w8a8.load_quantized(Tiny(), out, dtype=torch.bfloat16)
    assert fresh.lm_head.weight.dtype == torch.bfloat16 and fresh.fc1.bias.dtype == torch.bfloat16
    assert fresh.fc1.weight_scale.dtype == torch.float32 and fresh.fc1.input_scale.dtype == torch.float32
    assert torch.equal(fresh.fc1.weight, model.fc1.weight)
