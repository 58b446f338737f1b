"""The benchmark harness on the CPU (no timings asserted) and the committed report's consistency."""
import json
import math
import re
from pathlib import Path

import pytest

from w8a8 import __main__ as cli
from w8a8.bench import harness, report


def test_cli_bench_smoke_on_cpu(tmp_path, capsys):
    assert cli.main(["bench", "--device", "cpu", "--shapes", "24x32,8x48", "--m", "1,3", "--out", str(tmp_path)]) == 0
    for suite, impl in (("scaled_mm", "w8a8 reference"), ("linear", "W8A8Linear reference")):
        doc = json.loads((tmp_path / f"{suite}_cpu.json").read_text())
        assert doc["environment"]["device"] == "cpu" and doc["ceilings"] == {}
        rows = doc["rows"]
        assert {(r["M"], r["N"], r["K"]) for r in rows} == {(m, n, k) for m in (1, 3) for n, k in ((24, 32), (8, 48))}
        ours = [r for r in rows if r["impl"] == impl]
        # x_bf16 is rounded to 3 decimals: the reference runs ~20x slower than bf16 here, and a
        # CPU busy elsewhere can push the ratio under 0.0005 (read as 0.0).
        assert len(ours) == 4 and all(r["us"] > 0 and r["x_bf16"] is not None for r in ours)
        assert all(r["tops"] == pytest.approx(2 * r["M"] * r["N"] * r["K"] / r["us"] / 1e6, rel=1e-2, abs=1e-3) for r in ours)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["linear_cpu.json", "scaled_mm_cpu.json"]
    assert "geomean x bf16" in capsys.readouterr().out


def test_stream_bench_needs_a_gpu(monkeypatch):
    from w8a8.bench import stream

    monkeypatch.setattr(stream.torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        stream.main([])


def test_token_counts_take_ranges():
    from w8a8.bench import _ints

    assert _ints("1..4,8,16..17") == [1, 2, 3, 4, 8, 16, 17]
    assert _ints("64") == [64]
    with pytest.raises(Exception, match=r"A\.\.B ranges, got '1,\.\.\.,4'"):
        _ints("1,...,4")


def test_report_commands_parse():
    """The commands PERFORMANCE.md gives for each file take the --m the CLI accepts."""
    from w8a8.bench import _ints

    for _, command in report.SOURCES.values():
        match = re.search(r"--m (\S+)", command)
        if match:
            assert _ints(match.group(1)), command


def test_cli_bench_refuses_unavailable_backend():
    with pytest.raises(SystemExit, match="backend 'sm90' cannot run on cpu: the sm90 kernels need a CUDA device"):
        cli.main(["bench", "--device", "cpu", "--backends", "sm90", "--shapes", "8x16", "--m", "1"])


def test_gemm_row_bound_and_ratio():
    ceilings = {"int8_practical_ops": 1e15, "bf16_flops": 5e14, "hbm_bytes_per_s": 1e12}
    row = harness.gemm_row("x", 1, 1000, 1000, harness.Timing(2.0, 0.0), 10**6, ceilings, bf16_us=4.0)
    # 1 MB at 1 TB/s = 1 us of the 2 us measured: memory bound at 50%.
    assert row["bound"] == "memory" and row["pct_of_bound"] == 50.0 and row["x_bf16"] == 2.0
    assert harness.geomean([1.0, 4.0]) == pytest.approx(2.0) and math.isnan(harness.geomean([]))


def test_committed_performance_doc_matches_results():
    doc = Path(__file__).resolve().parents[1] / "docs" / "PERFORMANCE.md"
    assert doc.read_text() == report.render_markdown(plots=True), (
        "docs/PERFORMANCE.md is out of date: run python -m w8a8.bench.report"
    )


def test_committed_results_are_the_reports_sources():
    """benchmarks/results holds exactly the files report.SOURCES lists (and docs cite)."""
    kept = sorted(p.name for p in report.RESULTS.iterdir())
    assert kept == sorted(report.SOURCES), "add the file to report.SOURCES (with its command) or delete it"


def test_docs_links_resolve():
    docs = report.DOCS
    for page in sorted(docs.glob("*.md")):
        for target in re.findall(r"\]\(([^)#\s]+)[^)]*\)", page.read_text()):
            if "://" not in target and not target.startswith("mailto:"):
                assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"
