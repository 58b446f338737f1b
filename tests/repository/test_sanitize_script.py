"""benchmarks/sanitize.sh and its driver stay runnable without a GPU: the shell script parses and
the driver builds its case list in --dry-run (the sanitizer itself runs on the H100)."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from w8a8 import dispatch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_sanitize_sh_parses():
    subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "sanitize.sh")], check=True)


def test_sanitize_cases_dry_run():
    driver = str(ROOT / "benchmarks" / "sanitize_cases.py")
    full = subprocess.run([sys.executable, driver, "--dry-run"], capture_output=True, text=True, check=True).stdout.splitlines()
    small = subprocess.run([sys.executable, driver, "--dry-run", "--set", "small"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    names, small_names = full[:-1], small[:-1]
    assert full[-1] == f"{len(names)} cases (full)" and small[-1] == f"{len(small_names)} cases (small)"
    assert len(set(names)) == len(names), "case names must be unique"
    assert set(small_names) < set(names)
    # Every CUTLASS config bucket, the split-K / stream-K paths, the quantizers and Triton are there.
    for prefix in ("sm90_split_k4_", "sm90_streamk_", "sm90_heuristic_split", "cuda_per_token_",
                   "cuda_static_", "linear_sm90_", "triton_mm_", "triton_per_token_", "triton_static_"):
        assert any(n.startswith(prefix) for n in small_names), prefix
    # Every config entry of both tables (the built tables on a GPU, a nominal one in a dry run without).
    for family in ("sm90", "sm80"):
        entries = dispatch.config_names(family) or [f"config{i}" for i in range(3)]
        for entry in entries:
            assert f"{family}_{entry}_small" in small_names, (family, entry)


def test_sanitize_cases_split_by_output_writer():
    """initcheck's two parts (sanitize.sh): the TMA-store cases (sm90 CUTLASS) and the rest partition the set."""
    driver = str(ROOT / "benchmarks" / "sanitize_cases.py")

    def names(*extra):
        out = subprocess.run([sys.executable, driver, "--dry-run", "--set", "small", *extra], capture_output=True,
                             text=True, check=True).stdout.splitlines()
        return set(out[:-1])

    every, tma, other = names(), names("--outputs", "tma"), names("--outputs", "other")
    assert tma and other and not (tma & other) and tma | other == every
    assert all(n.startswith(("sm90_", "linear_sm90_")) for n in tma)
    sm90_other = {n for n in other if n.startswith(("sm90_", "linear_sm90_"))}
    if not dispatch.config_names("sm90"):  # no sm90 extension: every sm90 case counts as TMA
        assert not sm90_other
    else:  # the sm90 op's decode kernels (GEMV M <= 4, skinny GEMM 5..16, or forced) write with plain stores
        assert {"sm90_gemv_m3", "sm90_skinny_m9"} <= sm90_other and "sm90_ladder_m200_n2048" in tma


def test_initcheck_leaves_out_the_pad_row_readers():
    """initcheck's runs (--written-inputs) drop exactly the single-op cases at a padded token count:
    the GEMM reads pad rows of codes and scales that the padding contract leaves unwritten."""
    from w8a8.padding import padded_rows

    driver = str(ROOT / "benchmarks" / "sanitize_cases.py")

    def names(*extra):
        out = subprocess.run([sys.executable, driver, "--dry-run", "--set", "small", *extra], capture_output=True,
                             text=True, check=True).stdout.splitlines()
        return set(out[:-1])

    every, written = names(), names("--written-inputs")
    dropped = every - written
    assert written <= every and "linear_sm90_dynamic_m4" in written
    if padded_rows(160) > 160:  # the sm90 extension states the padding rule
        assert dropped == {"linear_sm90_dynamic_m160_cluster", "linear_sm90_dynamic_m230_cluster"}
    else:  # nothing is padded without it
        assert not dropped
