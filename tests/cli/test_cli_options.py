"""python -m w8a8: help shows defaults and no RST markup, --version, and quantize's
--dtype / --device / --quiet / --calib-data / --smoothquant (tiny random Llama, offline tokenizer)."""
import os

import pytest
import torch

import w8a8
from w8a8.__main__ import main
from w8a8.config import W8A8Config

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away"]
LINES = ["the cat sat on a mat", "a dog ran far away", "", "the dog sat", "cat on a mat far away the end"]


def _help(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", [[], ["info"], ["demo"], ["quantize"]])
def test_help_has_defaults_descriptions_and_no_rst(command, capsys):
    out = _help([*command, "--help"], capsys)
    assert "``" not in out
    if command in (["info"], ["demo"]):
        assert out.count("\n\n") >= 2 and ("Print the versions" in out or "Build a random transformers Llama" in out)
    if command == ["quantize"]:
        flat = " ".join(out.split())
        device = "cuda" if torch.cuda.is_available() else "cpu"
        for option, default in [("--act", "dynamic"), ("--skip", "['lm_head']"), ("--dtype", "auto"), ("--device", device),
                                ("--calib-data", "None"), ("--calib-batches", "8"), ("--calib-seq-len", "128"),
                                ("--smoothquant", "None"), ("--quiet", "False")]:
            assert option in flat and f"(default: {default})" in flat, option


def test_version(capsys):
    assert _help(["--version"], capsys).strip() == f"w8a8 {w8a8.__version__}"


def _folder(tmp_path, tokenizer=True):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=1, vocab_size=len(WORDS) + 2, tie_word_embeddings=False)
    src = tmp_path / "float"
    transformers.LlamaForCausalLM(cfg).eval().save_pretrained(src)
    if tokenizer:
        vocab = {"[UNK]": 0, "[PAD]": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
        tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
        tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
        transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]").save_pretrained(src)
    data = tmp_path / "calib.txt"
    data.write_text("\n".join(LINES) + "\n")
    return str(src), str(data)


def _batches(src, seq_len=128):
    tok = transformers.AutoTokenizer.from_pretrained(src, local_files_only=True)
    out = []
    for line in LINES:
        if line:
            enc = tok(line, return_tensors="pt", truncation=True, max_length=seq_len)
            out.append({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]})
    return out


def _float(src):
    """The float model on the CPU: the tests comparing the CLI with the config path run both there (``--device cpu``),
    since calibration's float reductions give the same bits on one device only."""
    return transformers.LlamaForCausalLM.from_pretrained(src, dtype="auto").eval()


def _assert_same_state(out, model, scale_dtype=torch.float32):
    """The folder holds ``model``; scales as the format stores them (the model's dtype, then fp32 again)."""
    got = w8a8.from_pretrained(out, progress=False).state_dict()
    ref = model.state_dict()
    assert got.keys() == ref.keys()
    for k in ref:
        want = ref[k].to(scale_dtype) if k.endswith(("weight_scale", "input_scale")) else ref[k]
        assert torch.equal(got[k], want.to(got[k].dtype)), k


def test_calib_data_static_scales_equal_calibrate_on_the_tokenized_lines(tmp_path, capsys):
    src, data = _folder(tmp_path)
    out = str(tmp_path / "q")
    assert main(["quantize", src, out, "--act", "static", "--calib-data", data, "--device", "cpu", "--quiet"]) == 0
    model = _float(src)
    w8a8.quantize_model(model, W8A8Config(act_quant="static", calibration=_batches(src)), progress=False)
    _assert_same_state(out, model)


def test_smoothquant_equals_the_config_path(tmp_path, capsys):
    src, data = _folder(tmp_path)
    out = str(tmp_path / "q")
    assert main(["quantize", src, out, "--act", "static", "--calib-data", data, "--smoothquant", "0.5", "--device", "cpu", "--quiet"]) == 0
    model = _float(src)
    w8a8.quantize_model(model, W8A8Config(act_quant="static", calibration=_batches(src), smoothquant_alpha=0.5),
                        progress=False)
    _assert_same_state(out, model)
    plain = _float(src)
    w8a8.quantize_model(plain, W8A8Config(act_quant="static", calibration=_batches(src)), progress=False)
    ln = "model.layers.0.input_layernorm.weight"
    assert not torch.equal(model.state_dict()[ln], plain.state_dict()[ln])  # SmoothQuant did rescale


def test_dtype_device_and_quiet(tmp_path, capsys):
    src, _ = _folder(tmp_path)
    out = str(tmp_path / "q")
    capsys.readouterr()
    assert main(["quantize", src, out, "--dtype", "bfloat16", "--device", "cpu", "--quiet"]) == 0
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err == ""
    loaded = w8a8.from_pretrained(out, progress=False)
    assert loaded.model.embed_tokens.weight.dtype == torch.bfloat16
    model = _float(src).to(torch.bfloat16)
    w8a8.quantize_model(model, progress=False)
    _assert_same_state(out, model, scale_dtype=torch.bfloat16)
    out2 = str(tmp_path / "q2")
    assert main(["quantize", src, out2]) == 0
    loud = capsys.readouterr().out
    assert "weight SQNR" in loud and f"wrote {out2}" in loud  # what --quiet left out


@pytest.mark.parametrize("case", ["no-tokenizer", "sq-no-data", "sq-range", "data-unused", "empty-data", "missing-data"])
def test_user_errors_are_one_line_exit_2(tmp_path, capsys, case):
    src, data = _folder(tmp_path, tokenizer=case != "no-tokenizer")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n")
    args, match = {
        "no-tokenizer": (["--act", "static", "--calib-data", data], "has no tokenizer (tokenizer.json / tokenizer_config.json): --calib-data needs one"),
        "sq-no-data": (["--smoothquant", "0.5"], "--smoothquant needs calibration text (--calib-data FILE)"),
        "sq-range": (["--calib-data", data, "--smoothquant", "2"], "--smoothquant ALPHA must be in [0, 1], got 2.0"),
        "data-unused": (["--calib-data", data], "--calib-data is used for --act static or --smoothquant; neither is set"),
        "empty-data": (["--act", "static", "--calib-data", str(empty)], "holds no non-empty line"),
        "missing-data": (["--act", "static", "--calib-data", str(tmp_path / "nope.txt")], "No such file or directory"),
    }[case]
    capsys.readouterr()
    assert main(["quantize", src, str(tmp_path / "q"), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m w8a8 quantize: error: ") and match in err, err
    assert len(err.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "q")


def test_bad_dtype_is_an_argparse_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["quantize", str(tmp_path), str(tmp_path / "q"), "--dtype", "int8"])
    assert exc.value.code == 2 and "invalid choice: 'int8'" in capsys.readouterr().err


def test_device_defaults_to_the_gpu_where_there_is_one(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    flat = " ".join(_help(["quantize", "--help"], capsys).split())
    assert "else cpu (default: cuda)" in flat


@pytest.mark.parametrize("device,match", [
    ("cuda", "--device 'cuda': torch is a CPU build (torch "),
    ("cuda:3", "--device 'cuda:3': torch is a CPU build"),
    ("tpu", "--device 'tpu' is not a device"),
    ("meta", "--device 'meta': only cpu and cuda devices are supported"),
])
def test_device_is_checked_before_loading(tmp_path, capsys, monkeypatch, device, match):
    if torch.version.cuda is not None:
        pytest.skip("the CPU-build messages (a CUDA build says what it finds instead)")
    src, _ = _folder(tmp_path, tokenizer=False)

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded before --device was checked")

    monkeypatch.setattr(transformers.LlamaForCausalLM, "from_pretrained", never)
    capsys.readouterr()
    assert main(["quantize", src, str(tmp_path / "q"), "--device", device]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m w8a8 quantize: error: ") and match in err, err
    assert len(err.strip().splitlines()) == 1 and not os.path.exists(tmp_path / "q")
