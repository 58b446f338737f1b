"""Packaging: what ``import w8a8`` pulls in, the version, the typing marker."""
import re
import subprocess
import sys
from pathlib import Path

import w8a8
from w8a8 import dispatch

# Imported where they are used, never by ``import w8a8``: torch._dynamo and triton cost
# about 1.3 s and 0.2 s, transformers several seconds.
LAZY = ("torch._dynamo", "triton", "transformers", "safetensors", "compressed_tensors")


def test_import_w8a8_leaves_heavy_modules_unimported():
    code = f"import sys, w8a8; print(' '.join(m for m in {LAZY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == []


def test_assume_constant_result_marks_like_dynamo():
    """dispatch marks ``choose`` without importing dynamo; dynamo's decorator sets the same attributes."""
    import torch._dynamo

    def f():
        return 0

    def g():
        return 0

    assert vars(dispatch._assume_constant_result(f)) == vars(torch._dynamo.assume_constant_result(g)) != {}
    assert getattr(dispatch.choose, "_dynamo_marked_constant", False)


def test_version_and_typing_marker():
    root = Path(w8a8.__file__).parent
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+|rc\d+)?", w8a8.__version__)
    assert (root / "py.typed").is_file()
