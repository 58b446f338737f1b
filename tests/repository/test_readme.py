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


def test_no_merge_conflict_markers():
    """No tracked text file holds a merge's conflict markers (README.md once did, and every test passed)."""
    import re
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    listed = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True)
    if listed.returncode == 0:
        files = listed.stdout.split()
    else:  # not a git checkout: the tree, without hidden and build folders
        files = [os.path.relpath(os.path.join(d, f), root) for d, dirs, names in os.walk(root) for f in names
                 if not any(part.startswith(".") or part in ("build", "dist") or part.endswith(".egg-info")
                            for part in os.path.relpath(d, root).split(os.sep) if part != ".")]
    marked = []
    for name in files:
        if not name.endswith((".py", ".md", ".cu", ".cuh", ".cpp", ".h", ".sh", ".toml", ".cfg", ".txt", ".yml", ".yaml")):
            continue
        with open(os.path.join(root, name), encoding="utf-8", errors="replace") as f:
            text = f.read()
        if re.search(r"^(<{7} |>{7} )", text, re.M):
            marked.append(name)
    assert not marked, marked
