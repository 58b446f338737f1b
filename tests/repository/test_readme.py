"""The README's quickstart runs as written (on the CPU reference path here); the test files the docs and code name exist."""
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


def test_test_files_named_in_docs_and_code_exist():
    """Every ``tests/....py`` path that the README, docs/, benchmarks/, w8a8/, csrc/ or tests/ name is a file."""
    import glob
    import re

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sources = [os.path.join(root, "README.md")]
    for pattern in ("docs/**/*.md", "benchmarks/**/*.py", "w8a8/**/*.py", "csrc/**/*.*", "tests/**/*.py"):
        sources += glob.glob(os.path.join(root, pattern), recursive=True)
    missing = set()
    for path in sources:
        with open(path, encoding="utf-8", errors="replace") as f:
            named = re.findall(r"\btests/[\w/]+\.py\b", f.read())
        missing |= {f"{os.path.relpath(path, root)}: {t}" for t in named if not os.path.isfile(os.path.join(root, t))}
    assert not missing, sorted(missing)
