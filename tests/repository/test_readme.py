"""The README's quickstart runs as written (on the CPU reference path here)."""
import os
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_quickstart_runs(tmp_path, monkeypatch):
    text = README.read_text()
    block = text[text.index("## Quickstart"):]
    code = block[block.index("```python") + len("```python"):]
    code = code[: code.index("```")]
    monkeypatch.chdir(tmp_path)  # it writes out_dir/
    namespace: dict = {}
    exec(compile(code, "README.md quickstart", "exec"), namespace)
    assert os.path.exists(tmp_path / "out_dir" / "config.json")
    assert namespace["report"].replaced and namespace["y"].shape == (4, 512)
