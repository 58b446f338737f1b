"""The examples/ scripts run end to end on tiny random models (CPU reference path, no download),
and every runnable python block of docs/GUIDE.md runs as written."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
GUIDE = ROOT / "docs" / "GUIDE.md"

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
sys.path.insert(0, str(EXAMPLES))
import make_tiny_models  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {"llama": make_tiny_models.tiny_llama(str(root / "tiny-llama")),
            "encoder": make_tiny_models.tiny_encoder(str(root / "tiny-encoder"))}


def run_example(script: str, *args: str) -> str:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, f"{script} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_llama_quantize_save_reload_generate(tiny, tmp_path):
    out = tmp_path / "int8"
    text = run_example("hf_llama_quantize_save_reload_generate.py", "--model", tiny["llama"], "--out", str(out))
    assert "replaced 14 Linear layers, skipped 1" in text  # 2 layers x (q, k, v, o, gate, up, down); lm_head float
    assert "reloaded as LlamaForCausalLM" in text
    assert "reloaded logits == quantized logits: True" in text
    assert "reloaded generate == quantized generate: True" in text
    ids = re.search(r"generated token ids: \[([\d, ]+)\]", text)
    assert ids and len(ids.group(1).split(",")) == 8, text
    agree = re.search(r"next-token argmax agreement (\d+)%", text)
    assert agree and int(agree.group(1)) >= 80, text
    # the folder the script wrote: int8 weights + the source's tokenizer and generation config
    for name in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json"):
        assert (out / name).exists(), name


def test_sentence_encoder(tiny):
    text = run_example("sentence_encoder.py", "--model", tiny["encoder"])
    assert "pooling: mean" in text
    assert "replaced 7 Linear layers, skipped 0" in text  # query, key, value, attention out, intermediate, output, pooler
    assert "reloaded embeddings == quantized embeddings: True" in text
    assert "'1_Pooling'" in text and "'modules.json'" in text  # sentence-transformers files carried over
    cos = [float(c) for c in re.findall(r"cosine\(int8, float\) ([\d.]+)", text)]
    assert len(cos) == 3 and min(cos) > 0.99, text


@pytest.mark.parametrize("script", ["hf_llama_quantize_save_reload_generate.py", "sentence_encoder.py",
                                    "make_tiny_models.py"])
def test_help(script, capsys):
    """--help prints the usage and the module docstring (in this process: a subprocess costs an import of torch)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(script[:-3], EXAMPLES / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage:") and module.__doc__.splitlines()[0] in out


def guide_blocks() -> list[str]:
    """The python blocks of GUIDE.md, except those right after a ``<!-- not run: ... -->`` line."""
    blocks = re.findall(r"(<!-- not run[^>]*-->\n)?```python\n(.*?)```", GUIDE.read_text(), re.S)
    return [code for marker, code in blocks if not marker]


# The guide's last block shows quantize_model's warning on a model it cannot change, on purpose.
@pytest.mark.filterwarnings("ignore:quantize_model. replaced no layer:UserWarning")
def test_guide_blocks_run(tiny, tmp_path, monkeypatch):
    """Run in order, in one namespace, in a folder holding ``float-llama/`` and ``float-encoder/``."""
    import shutil

    for package in ("sentence_transformers", "compressed_tensors"):  # the guide's encoder block loads through both
        pytest.importorskip(package, reason=f"the guide's sentence-transformers block needs {package} (the test extra)")

    shutil.copytree(tiny["llama"], tmp_path / "float-llama")
    shutil.copytree(tiny["encoder"], tmp_path / "float-encoder")
    monkeypatch.chdir(tmp_path)
    blocks = guide_blocks()
    assert len(blocks) >= 5
    namespace: dict = {}
    for i, code in enumerate(blocks):
        exec(compile(code, f"GUIDE.md python block {i + 1}", "exec"), namespace)


def test_api_reference_is_current():
    """docs/API.md is what docs/gen_api.py makes of today's docstrings (run it after changing one)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_api", ROOT / "docs" / "gen_api.py")
    gen_api = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_api)
    assert gen_api.OUT.read_text() == gen_api.render(), "docs/API.md is out of date: run python docs/gen_api.py"
