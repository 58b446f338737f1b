"""The command line: info and the demo (the README's main job)."""
import re
import subprocess
import sys


def _run(*args):
    return subprocess.run([sys.executable, "-m", "w8a8", *args], capture_output=True, text=True, timeout=600)


def test_info_reports_kernels_and_why_not():
    res = _run("info")
    assert res.returncode == 0, res.stderr
    assert "torch" in res.stdout and "kernels on cpu:" in res.stdout
    assert re.search(r"extension w8a8\._C: .*; sm90 kernels for \[", res.stdout)
    assert re.search(r"extension w8a8\._C_sm80: .*; sm80 kernels for \[", res.stdout)
    assert re.search(r"scaled_mm/reference\s+available", res.stdout)
    assert re.search(r"scaled_mm/sm90\s+the sm90 kernels need a CUDA device \(got cpu\)", res.stdout)
    assert re.search(r"quantize_static/sm90\s+", res.stdout)
    assert "default: scaled_mm -> reference, quantize_per_token -> reference, quantize_static -> reference" in res.stdout


def test_demo_prints_error_and_times():
    res = _run("demo", "--device", "cpu", "--repeats", "2")
    assert res.returncode == 0, res.stderr
    err = float(re.search(r"relative L2 error ([0-9.]+)", res.stdout).group(1))
    assert 0 < err < 0.1
    assert re.search(r"float [0-9.]+ ms, w8a8 [0-9.]+ ms", res.stdout)


def test_bad_command_fails():
    res = _run("nope")
    assert res.returncode != 0 and "invalid choice" in res.stderr
