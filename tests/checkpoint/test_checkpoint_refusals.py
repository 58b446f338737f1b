"""Every refusal while loading is a CheckpointError naming the file; nothing is half-loaded."""
import json
import os
import struct

import pytest
import torch
from torch import nn

import w8a8
from helpers import Tiny, assert_untouched, module_snapshot
from w8a8 import CheckpointError


def _saved(tmp_path, **kw):
    model = Tiny()
    w8a8.quantize_model(model, progress=False)
    out = str(tmp_path / "ckpt")
    w8a8.save_quantized(model, out, progress=False, **kw)
    return model, out


def _refused(out, match, **kw):
    model = Tiny()
    before = module_snapshot(model)
    with pytest.raises(CheckpointError, match=match):
        w8a8.load_quantized(model, out, **kw)
    assert_untouched(model, before)


def _write_raw(path, header, data):
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def _header_and_data(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


# --- malformed safetensors headers ----------------------------------------------------------------


def _edit_first(header):
    return next(k for k in header if k != "__metadata__")


# Each damaged header, and the reason the safetensors library gives (after the file's name).
HEADER_EDITS = {
    "not an object": (lambda h: [1, 2], r"invalid type: sequence, expected struct HashMetadata"),
    "entry not an object": (lambda h: {**h, _edit_first(h): "x"}, r"expected struct TensorInfo"),
    "missing data_offsets": (lambda h: {**h, _edit_first(h): {"dtype": "I8", "shape": [1]}}, r"missing field `data_offsets`"),
    "unknown dtype": (lambda h: {**h, _edit_first(h): {**h[_edit_first(h)], "dtype": "Q7"}}, r"unknown variant `Q7`"),
    "dtype not a string": (lambda h: {**h, _edit_first(h): {**h[_edit_first(h)], "dtype": ["I8"]}}, r"invalid type: sequence"),
    "shape not a list": (lambda h: {**h, _edit_first(h): {**h[_edit_first(h)], "shape": "48"}}, r"expected a sequence"),
    "huge shape": (lambda h: {**h, _edit_first(h): {**h[_edit_first(h)], "shape": [10**30, 10**30]}}, r"expected usize"),
    "negative offset": (lambda h: {**h, _edit_first(h): {**h[_edit_first(h)], "data_offsets": [-4, 0]}}, r"integer `-4`, expected usize"),
    "float offset": (lambda h: {**h, _edit_first(h): {**h[_edit_first(h)], "data_offsets": [0.5, 1e400]}}, r"invalid JSON in header"),
    "metadata not strings": (lambda h: {**h, "__metadata__": {"format": 1}}, r"invalid type: integer `1`, expected a string"),
}


@pytest.mark.parametrize("case", list(HEADER_EDITS))
def test_malformed_header_entries(tmp_path, case):
    _, out = _saved(tmp_path)
    path = os.path.join(out, "model.safetensors")
    header, data = _header_and_data(path)
    edit, match = HEADER_EDITS[case]
    _write_raw(path, edit(header), data)
    _refused(out, rf"{path} is not a valid safetensors file \(safetensors: .*{match}")


@pytest.mark.parametrize("raw,match", [
    (b"\xff\xfe{", r"invalid UTF-8 in header"),
    (b"{\"a\": ", r"EOF while parsing a value"),
    (b"[" * 100000 + b"]" * 100000, r"invalid JSON in header"),
], ids=["not utf-8", "truncated json", "deeply nested"])
def test_header_not_json(tmp_path, raw, match):
    _, out = _saved(tmp_path)
    path = os.path.join(out, "model.safetensors")
    _write_raw(path, raw, b"")
    _refused(out, rf"{path} is not a valid safetensors file .*{match}")


def test_overlapping_offsets_are_refused(tmp_path):
    """Two tensors on the same bytes (safetensors refuses them; they must not alias silently)."""
    _, out = _saved(tmp_path)
    path = os.path.join(out, "model.safetensors")
    header, data = _header_and_data(path)
    a, b = header["fc2.weight_scale"], header["fc1.bias"]
    assert a["dtype"] == b["dtype"] == "F32"
    header["fc2.weight_scale"] = {**a, "data_offsets": [b["data_offsets"][0], b["data_offsets"][0] + 64]}
    _write_raw(path, header, data)
    _refused(out, rf"{path} is not a valid safetensors file .*invalid offset for tensor")


@pytest.mark.parametrize("cut", [16, -10, 5], ids=["trailing bytes", "truncated", "no header"])
def test_trailing_and_missing_bytes_are_refused(tmp_path, cut):
    _, out = _saved(tmp_path)
    path = os.path.join(out, "model.safetensors")
    raw = open(path, "rb").read()
    open(path, "wb").write(raw + b"\0" * cut if cut > 0 and cut != 5 else raw[:cut])
    _refused(out, rf"{path} is not a valid safetensors file .*(file not fully covered|header too small)")


def test_a_dtype_torch_has_no_type_for_names_the_tensor(tmp_path):
    _, out = _saved(tmp_path)
    path = os.path.join(out, "model.safetensors")
    header, data = _header_and_data(path)
    header["fc1.weight"]["dtype"] = "F8_E8M0"  # one byte, like I8: the library reads it, w8a8 does not
    _write_raw(path, header, data)
    _refused(out, rf"{path}: tensor 'fc1.weight' has dtype F8_E8M0, which w8a8 does not read")


def test_a_pickle_file_renamed_never_leaks_its_bytes(tmp_path):
    _, out = _saved(tmp_path)
    path = os.path.join(out, "model.safetensors")
    torch.save({"secret": torch.zeros(3)}, path)
    model = Tiny()
    with pytest.raises(CheckpointError, match=rf"{path}") as info:
        w8a8.load_quantized(model, out)
    assert "secret" not in str(info.value) and "PK" not in str(info.value)


# --- index files ----------------------------------------------------------------------------------


def _sharded(tmp_path):
    model, out = _saved(tmp_path, max_shard_bytes=1000)
    return model, out, os.path.join(out, "model.safetensors.index.json")


@pytest.mark.parametrize("target", ["../elsewhere/model.safetensors", "/etc/passwd", "sub/model.safetensors", ".."])
def test_index_entries_must_stay_inside_the_folder(tmp_path, target):
    _, out, index = _sharded(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    idx = json.load(open(index))
    idx["weight_map"]["fc1.weight"] = target
    json.dump(idx, open(index, "w"))
    _refused(out, rf"{index}: tensor 'fc1.weight' maps to .*which is not a file of")


@pytest.mark.parametrize("content,match", [
    ("{bad", r"is not a valid JSON index"),
    ("[]", r"must hold a JSON object"),
    ('{"weight_map": [1]}', r"weight_map must map tensor names to file names"),
    ('{"weight_map": {"fc1.weight": 3}}', r"weight_map must map"),
    ('{"weight_map": {"fc1.weight": "config.json"}}', r"only .safetensors files are read"),
])
def test_malformed_index(tmp_path, content, match):
    _, out, index = _sharded(tmp_path)
    open(index, "w").write(content)
    _refused(out, rf"{index}.*{match}|{index} {match}")


def test_index_disagreeing_with_the_files(tmp_path):
    _, out, index = _sharded(tmp_path)
    original = open(index).read()
    idx = json.loads(original)
    names = sorted(set(idx["weight_map"].values()))
    idx["weight_map"]["fc1.weight"] = next(n for n in names if n != idx["weight_map"]["fc1.weight"])
    json.dump(idx, open(index, "w"))
    _refused(out, r"tensor 'fc1.weight' maps to model-\d+-of-\d+.safetensors, but it is in")
    idx = json.loads(original)
    files = list(idx["weight_map"].values())
    shared = next(k for k, f in idx["weight_map"].items() if files.count(f) > 1)
    del idx["weight_map"][shared]
    json.dump(idx, open(index, "w"))
    _refused(out, rf"does not list 1 tensors of its files: \['{shared}'\]")


# --- config.json ----------------------------------------------------------------------------------


def _edit_config(out, edit):
    path = os.path.join(out, "config.json")
    cfg = json.load(open(path))
    edit(cfg)
    json.dump(cfg, open(path, "w"))
    return path


@pytest.mark.parametrize("content,match", [
    ("{bad", r"is not a valid JSON config"),
    ("[" * 100000, r"is not a valid JSON config"),
    ("[1]", r"must hold a JSON object"),
    ('{"model_type": "x"}', r"has no quantization_config"),
    ('{"quantization_config": 3}', r"quantization_config must be an object"),
    ('{"quantization_config": {"quant_method": "gptq"}}', r"quant_method is 'gptq', expected 'compressed-tensors'"),
    ('{"quantization_config": {"config_groups": [1]}}', r"config_groups must be an object"),
    ('{"quantization_config": {"config_groups": {"g": {"targets": ["re:("]}}}}', r"bad regex 're:\('"),
    ('{"quantization_config": {"config_groups": {"g": {"targets": 5}}}}', r"targets must be a list of strings"),
    ('{"quantization_config": {"config_groups": {"g": {"weights": 5}}}}', r"weights must be an object"),
])
def test_malformed_config(tmp_path, content, match):
    _, out = _saved(tmp_path)
    path = os.path.join(out, "config.json")
    open(path, "w").write(content)
    _refused(out, rf"{path}.*{match}|{path} {match}")


def test_unsupported_scheme_parts_are_refused_not_dropped(tmp_path):
    _, out = _saved(tmp_path)
    oa = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "tensor", "dynamic": False}
    path = _edit_config(out, lambda c: c["quantization_config"]["config_groups"]["group_0"].update(output_activations=oa))
    _refused(out, rf"{path}: layer 'fc1' \(group_0\) has an unsupported scheme: output_activations are quantized")
    path = _edit_config(out, lambda c: c["quantization_config"]["config_groups"]["group_0"].update(output_activations=None))
    path = _edit_config(out, lambda c: c["quantization_config"].update(kv_cache_scheme=oa))
    _refused(out, rf"{path}: kv_cache_scheme .* is not supported")


def test_scheme_errors_are_checkpoint_errors(tmp_path):
    _, out = _saved(tmp_path)
    _edit_config(out, lambda c: c["quantization_config"]["config_groups"]["group_0"]["weights"].update(num_bits=4))
    with pytest.raises(CheckpointError, match=r"unsupported scheme"):
        w8a8.load_quantized(Tiny(), out)


# --- arguments and late failures -------------------------------------------------------------------


def test_bad_dtype_is_refused_before_the_model_is_touched(tmp_path):
    _, out = _saved(tmp_path)
    _refused(out, r"dtype must be a float dtype .* got torch.int8", dtype=torch.int8)
    fresh = w8a8.load_quantized(Tiny(), out, dtype="bfloat16")
    assert fresh.lm_head.weight.dtype == torch.bfloat16


def test_a_late_failure_leaves_the_model_as_it_was(tmp_path, monkeypatch):
    _, out = _saved(tmp_path)
    model = Tiny()
    before = module_snapshot(model)

    def fail(self, *args, **kwargs):
        raise RuntimeError("late failure")

    monkeypatch.setattr(nn.Module, "load_state_dict", fail)
    with pytest.raises(RuntimeError, match="late failure"):
        w8a8.load_quantized(model, out)
    monkeypatch.undo()
    assert_untouched(model, before)


def test_missing_folder_is_named(tmp_path):
    missing = str(tmp_path / "nope")
    _refused(missing, rf"{missing} does not exist")


def test_zero_scale_of_a_nonzero_row_is_still_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    _, out = _saved(tmp_path)
    path = os.path.join(out, "model.safetensors")
    sd = load_file(path)
    sd["fc1.weight_scale"][3] = 0.0
    sd["fc1.weight"][3] = 1
    save_file(sd, path)
    _refused(out, r"fc1.weight_scale must be finite and > 0; 1 of 48 .*0 is accepted only for an all-zero weight row")
