"""python -m w8a8 quantize: the model class from the folder, side files kept, user errors one line, exit 2."""
import json
import os
import subprocess
import sys

import pytest
import torch

import w8a8
from helpers import sentence_transformers_folder
from w8a8.__main__ import main

transformers = pytest.importorskip("transformers")




@pytest.fixture
def st(tmp_path, capsys):
    folder = sentence_transformers_folder(tmp_path)
    capsys.readouterr()  # transformers' own progress output while building the fixture
    return folder


def test_sentence_encoder_keeps_its_class_and_side_files(tmp_path, capsys, st):
    bert, src = st
    out = str(tmp_path / "q")
    assert main(["quantize", src, out]) == 0
    stdout = capsys.readouterr().out
    assert "replaced 7 Linear layers, skipped 0" in stdout  # query, key, value, attention output, intermediate, output, pooler
    for name in ("vocab.txt", "chat_template.jinja", "modules.json", "1_Pooling/config.json"):
        assert open(os.path.join(out, name)).read() == open(os.path.join(src, name)).read(), name
    cfg = json.load(open(os.path.join(out, "config.json")))
    assert cfg["architectures"] == ["BertModel"] and cfg["model_type"] == "bert"
    loaded = w8a8.from_pretrained(out, progress=False)
    assert type(loaded) is transformers.BertModel
    w8a8.quantize_model(bert, progress=False)
    ids = torch.randint(0, 100, (2, 6))
    with torch.no_grad():
        assert torch.equal(loaded(ids).last_hidden_state, bert(ids).last_hidden_state)


def test_folder_without_the_weights_of_its_class_is_refused(tmp_path, capsys, st):
    bert, src = st
    path = os.path.join(src, "config.json")
    cfg = json.load(open(path))
    cfg["architectures"] = ["BertForMaskedLM"]  # a head the folder does not hold: would be random
    json.dump(cfg, open(path, "w"))
    assert main(["quantize", src, str(tmp_path / "q")]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # above it: transformers' own loading bar
    assert last.startswith("python -m w8a8 quantize: error: ") and "does not hold" in last and "would be random" in last
    assert "Traceback" not in err
    assert not os.path.exists(tmp_path / "q")


@pytest.mark.parametrize("case", ["same", "parent", "missing", "hub", "quantized"])
def test_user_errors_are_one_line_exit_2(tmp_path, capsys, case, st):
    _, src = st
    before = sorted(os.listdir(src))
    args, match = {
        "same": ([src, src], "would replace the source folder"),
        "parent": ([src, str(tmp_path)], "would replace the source folder"),
        "missing": ([str(tmp_path / "nope"), str(tmp_path / "q")], f"{tmp_path / 'nope'} does not exist"),
        "hub": (["org/model", str(tmp_path / "q")], "'org/model' is not a local folder"),
        "quantized": (None, "is already quantized"),
    }[case]
    if case == "quantized":
        q = str(tmp_path / "q1")
        assert main(["quantize", src, q]) == 0
        capsys.readouterr()
        args = [q, str(tmp_path / "q2")]
    assert main(["quantize", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m w8a8 quantize: error: ") and match in err
    assert len(err.strip().splitlines()) == 1
    assert sorted(os.listdir(src)) == before


def test_subprocess_same_folder_keeps_the_float_model(tmp_path):
    _, src = sentence_transformers_folder(tmp_path)
    weights = open(os.path.join(src, "model.safetensors"), "rb").read()
    res = subprocess.run([sys.executable, "-m", "w8a8", "quantize", src, src], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert open(os.path.join(src, "model.safetensors"), "rb").read() == weights


def test_output_inside_the_source_is_refused_on_every_run(tmp_path, capsys, st):
    _, src = st
    before = sorted(os.listdir(src))
    for _ in range(2):  # a second run refuses the same way (it does not nest int8/int8/)
        assert main(["quantize", src, os.path.join(src, "int8")]) == 2
        err = capsys.readouterr().err
        assert f"the output folder {os.path.join(src, 'int8')} is inside the source folder {src}" in err, err
        assert len(err.strip().splitlines()) == 1
    assert sorted(os.listdir(src)) == before


def test_weight_files_in_source_subfolders_are_not_copied(tmp_path, capsys, st):
    _, src = st
    os.makedirs(os.path.join(src, "original"))
    for name in ("consolidated.00.pth", "params.json"):
        with open(os.path.join(src, "original", name), "w") as f:
            f.write(name)
    out = str(tmp_path / "q")
    assert main(["quantize", src, out, "--quiet"]) == 0
    assert sorted(os.listdir(os.path.join(out, "original"))) == ["params.json"]
