"""The benchmarks (benchmarks/, the lab beside the package) on the CPU, no timings asserted, and the
committed results' consistency: the product files and the evidence table, and the pages made of them."""
import json
import math
import re
from pathlib import Path

import pytest
import torch

from benchmarks import harness, report
from benchmarks.__main__ import main as benchmarks_main

ROOT = Path(__file__).resolve().parents[2]


def test_grid_suites_smoke_on_cpu(tmp_path, capsys):
    assert benchmarks_main(["--device", "cpu", "--shapes", "24x32,8x48", "--m", "1,3", "--out", str(tmp_path)]) == 0
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
    # Beside each layer row, its GEMM alone on the layer's codes (same run).
    from benchmarks.linear import KERNEL_ROW

    layer_rows = json.loads((tmp_path / "linear_cpu.json").read_text())["rows"]
    assert sorted((r["M"], r["N"]) for r in layer_rows if r["impl"] == f"{KERNEL_ROW} reference") == sorted(
        (m, n) for m in (1, 3) for n in (24, 8))


def test_layer_over_kernel_table():
    """The layer's time minus its kernel's, in us and in quantizer ideal times; under the spread: noise."""
    from benchmarks.linear import KERNEL_ROW

    def row(impl, m, us, spread=0.01):
        return {"impl": impl, "M": m, "N": 4096, "K": 4096, "us": us, "spread": spread}

    # At M = 2048 the quantizer's bytes are 3 * 2048 * 4096 + 4 * 2048 = 25174016: 25.174016 us at 1 TB/s.
    rows = [row("W8A8Linear sm90", 2048, 100.0), row(f"{KERNEL_ROW} sm90", 2048, 74.825984),
            row("W8A8Linear sm90", 8192, 400.0, spread=0.1), row(f"{KERNEL_ROW} sm90", 8192, 390.0)]
    lines = report.layer_over_kernel_table(rows, {"hbm_bytes_per_s": 1e12})
    assert lines[0] == "| N x K | M=512 | M=2048 | M=8192 |"
    assert lines[2] == "| 4096 x 4096 | - | 25.2 (1.00x) | within noise (40) |"


def test_kernel_suite_activations_quantized_are_the_quantizers_codes(tmp_path):
    from benchmarks import scaled_mm
    from w8a8 import reference

    ops = scaled_mm.operands(5, 8, 48, "cpu", "quantized")
    q, s = reference.quantize_per_token(ops.x)
    assert torch.equal(ops.a_q, q) and torch.equal(ops.a_s, s)
    assert benchmarks_main(["--device", "cpu", "--suites", "scaled_mm", "--shapes", "8x48", "--m", "5",
                            "--activations", "quantized", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "scaled_mm_cpu.json").read_text())["activations"] == "quantized"


def test_generate_suite_on_cpu(tmp_path, capsys):
    pytest.importorskip("transformers")
    assert benchmarks_main(["--device", "cpu", "--suites", "generate", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "generate_cpu.json").read_text())
    assert doc["kind"] == "generate" and doc["layers"] == 2 and doc["recipes"] == ["graph", "eager"]
    rows = doc["rows"]
    assert sorted((r["recipe"], r["impl"], r["batch"]) for r in rows) == sorted(
        (rc, impl, b) for rc in ("graph", "eager") for impl in ("bf16", "w8a8") for b in (1, 2))
    for r in rows:
        if r["recipe"] == "eager" and r["decode_ms"] <= 0:
            continue  # a difference of two wall times (all tokens, one token): noise on a loaded CPU
        # tokens/s is rounded to 0.1 and decode_ms to 1e-4 ms: compare within that rounding
        tokens_per_s = r["batch"] / r["decode_ms"] * 1e3
        assert r["decode_ms"] > 0 and abs(r["tokens_per_s"] - tokens_per_s) <= 0.05 + tokens_per_s * 1e-4 / r["decode_ms"]
        if r["recipe"] == "graph":
            assert r["step_gpu_us"] is None and r["prefill_eager_ms"] > 0
        if r["impl"] == "w8a8":
            assert 0 <= r["token_match"] <= 1 and r["x_bf16_decode"] > 0
    assert all(r["interleaved"] for r in rows)
    assert "| prompt | batch | recipe | impl | prefill ms |" in capsys.readouterr().out


def test_generate_mixed_sampled_recipe_on_cpu(tmp_path):
    """The mixed-sampled recipe: left-padded prompts of P down to about P/2 tokens, sampled."""
    pytest.importorskip("transformers")
    assert benchmarks_main(["--device", "cpu", "--suites", "generate", "--recipes", "mixed-sampled",
                            "--batches", "3", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "generate_cpu.json").read_text())["rows"]
    assert [(r["recipe"], r["impl"]) for r in rows] == [("mixed-sampled", "bf16"), ("mixed-sampled", "w8a8")]
    assert all(r["lengths"] == [8, 7, 6] and r["prefill_ms"] > 0 and "tokens_per_s" in r for r in rows)
    assert all(r["interleaved"] for r in rows)  # a small point: both models timed round by round


def test_generate_timing_interleaves_the_models_and_records_a_failure():
    """_time_points samples each point's calls in order, model after model each round; a call that
    raises ends its point's timing with the error as its row, the other point goes on."""
    import torch

    from benchmarks import generate

    order = []

    def boom():
        order.append("w8a8.one")
        raise RuntimeError("overwritten by a subsequent run")

    points = {"bf16": generate._Point({"one": lambda: order.append("bf16.one"), "n": lambda: order.append("bf16.n")},
                                      finish=lambda ms: ({}, None)),
              "w8a8": generate._Point({"one": boom, "n": lambda: order.append("w8a8.n")}, finish=lambda ms: ({}, None))}
    medians = generate._time_points(points, torch.device("cpu"))
    assert order == ["bf16.one", "bf16.n", "w8a8.one"] + ["bf16.one", "bf16.n"] * (generate.REPEATS - 1)
    assert set(medians["bf16"]) == {"one", "n"} and medians["w8a8"] == {}
    assert points["bf16"].failed is None
    assert points["w8a8"].failed["failed"] == "RuntimeError: overwritten by a subsequent run"


def test_generate_a_set_up_that_raises_is_its_row_and_eager_always_interleaves(monkeypatch):
    """A recipe whose set-up raises (out of memory at the largest points) is a point whose row is the
    error; eager is timed round by round at every size, hf-compile never, the others up to a size."""
    import torch

    from benchmarks import generate

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 3.50 GiB")

    monkeypatch.setattr(generate, "mixed_point", out_of_memory)
    point = generate._point("mixed-sampled", None, torch.zeros(1, 1, dtype=torch.long), 2, torch.device("cpu"))
    assert point.failed["failed"] == "RuntimeError: CUDA out of memory. Tried to allocate 3.50 GiB"
    assert point.timed == {}
    assert generate._interleaved("eager", 64, 2048, 128) and not generate._interleaved("hf-compile", 1, 8, 2)
    assert generate._interleaved("graph", 1, 128, 128) and not generate._interleaved("mixed-sampled", 64, 2048, 128)


@pytest.mark.parametrize("suite", ["quant", "host", "split_k", "sm80"])
def test_gpu_suites_refuse_the_cpu(suite):
    with pytest.raises(SystemExit, match=r"needs (a CUDA GPU|the sm[89]0 backend)"):
        benchmarks_main(["--device", "cpu", "--suites", suite])


def test_stream_bench_needs_a_gpu(monkeypatch):
    from benchmarks import stream

    monkeypatch.setattr(stream.torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        stream.main([])


def test_token_counts_take_ranges():
    assert harness.parse_ints("1..4,8,16..17") == [1, 2, 3, 4, 8, 16, 17]
    assert harness.parse_ints("64") == [64]
    with pytest.raises(Exception, match=r"A\.\.B ranges, got '1,\.\.\.,4'"):
        harness.parse_ints("1,...,4")


def test_suites_and_the_product_alias():
    with pytest.raises(SystemExit, match=r"unknown suites \['nope'\]"):
        benchmarks_main(["--device", "cpu", "--suites", "nope"])


def test_report_commands_parse():
    """The commands PERFORMANCE.md gives for each file take the --m / --k the runner accepts."""
    for _, command in report.PRODUCT.values():
        for option in ("--m", "--k"):
            match = re.search(option + r" (\S+)", command)
            if match:
                assert harness.parse_ints(match.group(1)), command


def test_unavailable_backend_is_refused():
    with pytest.raises(SystemExit, match="backend 'sm90' cannot run on cpu: the sm90 kernels need a CUDA device"):
        benchmarks_main(["--device", "cpu", "--backends", "sm90", "--shapes", "8x16", "--m", "1"])


def test_gemm_row_bound_and_ratio():
    ceilings = {"int8_practical_ops": 1e15, "bf16_flops": 5e14, "hbm_bytes_per_s": 1e12}
    row = harness.gemm_row("x", 1, 1000, 1000, harness.Timing(2.0, 0.0), 10**6, ceilings, bf16_us=4.0)
    # 1 MB at 1 TB/s = 1 us of the 2 us measured: memory bound at 50%.
    assert row["bound"] == "memory" and row["pct_of_bound"] == 50.0 and row["x_bf16"] == 2.0
    assert harness.geomean([1.0, 4.0]) == pytest.approx(2.0) and math.isnan(harness.geomean([]))


def test_committed_pages_match_results():
    assert (report.DOCS / "PERFORMANCE.md").read_text() == report.render_markdown(plots=True), (
        "docs/PERFORMANCE.md is out of date: run python -m benchmarks.report")
    assert (report.DOCS / "EVIDENCE.md").read_text() == report.render_evidence(), (
        "docs/EVIDENCE.md is out of date: run python -m benchmarks.report")


def test_results_hold_the_product_files_and_the_evidence_table():
    """benchmarks/results holds exactly the product files report.PRODUCT lists and the evidence table."""
    kept = sorted(p.name for p in report.RESULTS.iterdir())
    assert kept == sorted([*report.PRODUCT, report.EVIDENCE]), "add the file to report.PRODUCT (with its command) or delete it"


def test_evidence_rules_are_cited_and_complete():
    """Every rule of the evidence table has its fields, a unique id, and is named in the code it
    describes (``where``); every id the code cites is on the page."""
    rules = report.load(report.EVIDENCE)["rules"]
    ids = [r["id"] for r in rules]
    assert len(ids) == len(set(ids))
    for rule in rules:
        assert rule["rule"] and rule["reason"] and rule["figures"] and rule["measured"], rule["id"]
        path = ROOT / rule["where"].split(":")[0]
        assert rule["id"] in path.read_text(), f"{rule['id']} is not cited in {path}"
    cited = set()
    for path in [*ROOT.glob("csrc/**/*.cu*"), *ROOT.glob("csrc/**/*.h"), *ROOT.glob("w8a8/**/*.py")]:
        cited |= set(re.findall(r"\[evidence ([\w.-]+)\]", path.read_text()))
    assert cited <= set(ids), f"cited but not on the evidence page: {sorted(cited - set(ids))}"


def test_docs_links_resolve():
    for page in sorted(report.DOCS.glob("*.md")):
        for target in re.findall(r"\]\(([^)#\s]+)[^)]*\)", page.read_text()):
            if "://" not in target and not target.startswith("mailto:"):
                assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"


def test_quantizer_shape_sweep_candidates_and_its_gpu_requirement():
    from benchmarks.sweep import quant

    shapes = [(32, 16), (64, 8), (128, 4), (128, 5), (256, 2), (256, 4), (512, 1), (1024, 1), (256, 0)]
    # The fewest vectors per thread count that hold the row, then the two-pass shapes.
    assert quant.candidates(4096, shapes) == [(32, 16), (64, 8), (128, 4), (256, 2), (512, 1), (1024, 1), (256, 0)]
    assert quant.candidates(8192, shapes) == [(256, 4), (1024, 1), (256, 0)]
    # The table's (threads, vectors) pairs: the shape macro of quant_shapes.cuh.
    text = (ROOT / "benchmarks" / "sweep" / "quant_shapes.cuh").read_text()
    table = [(int(t), int(v)) for t, v in re.findall(r"S\((\d+), (\d+)\)", text)]
    assert len(table) == len(set(table)) and (128, 4) in table and (256, 0) in table
    assert {t for t, _ in table} == {32, 64, 128, 256, 512, 1024}
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="sm_90 GPU"):
            quant.main(["--k", "4096", "--m", "256"])


def test_timeline_splits_a_layer_call_at_its_kernels_ends():
    """benchmarks.timeline: gaps between kernels, and per call the quantizer's time past the GEMM
    before it and the GEMM's past the quantizer (their sum: the call's share of the stream)."""
    from benchmarks import timeline

    # The GEMM's mangled name holds "Dequantize" (its epilogue's function): still the GEMM.
    quant = "void w8a8::quantize_per_token_kernel<...>"
    gemm = "_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversal...Sm90ComputeINS7_12DequantizeFnE..."
    events = [(quant, 100.0, 110.0), (gemm, 109.0, 154.0), (quant, 143.0, 165.0), (gemm, 163.5, 212.0)]
    rows = timeline.kernel_rows(events)
    assert [r["kernel"] for r in rows] == ["quantizer", "gemm", "quantizer", "gemm"]
    assert [r["gap_us"] for r in rows] == [None, -1.0, -11.0, -1.5]
    assert rows[2]["start_us"] == 43.0 and rows[2]["us"] == 22.0
    assert timeline.layer_splits(rows) == [
        {"quantizer_past_gemm_us": 11.0, "gemm_past_quantizer_us": 47.0, "call_us": 58.0}]
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="needs a CUDA GPU"):
            timeline.main(["--m", "16"])
