"""The command line: info and the demo (the README's main job)."""
import re
import subprocess
import sys


def _run(*args):
    return subprocess.run([sys.executable, "-m", "w8a8", *args], capture_output=True, text=True, timeout=600)


def test_info_reports_backends():
    res = _run("info")
    assert res.returncode == 0, res.stderr
    assert "torch" in res.stdout and "backends on cpu:" in res.stdout
    assert re.search(r"scaled_mm/reference\s+available", res.stdout)
    assert "default: scaled_mm ->" in res.stdout


def test_demo_prints_error_and_times():
    res = _run("demo", "--device", "cpu", "--repeats", "2")
    assert res.returncode == 0, res.stderr
    err = float(re.search(r"relative L2 ([0-9.]+)", res.stdout).group(1))
    assert 0 < err < 0.1
    assert re.search(r"float [0-9.]+ ms, w8a8 [0-9.]+ ms", res.stdout)


def test_bad_command_fails():
    res = _run("nope")
    assert res.returncode != 0 and "invalid choice" in res.stderr
