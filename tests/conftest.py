"""Shared test setup. Without a GPU, Triton kernels run in Triton's interpreter."""
import os

import torch

if not torch.cuda.is_available():
    # Must be set before any Triton kernel is decorated (they are imported lazily).
    os.environ.setdefault("TRITON_INTERPRET", "1")

import collections  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_seed(request):
    """A different, reported seed per test: fresh random inputs, reproducible from the log."""
    seed = abs(hash(request.node.nodeid)) % (2**31) ^ int.from_bytes(os.urandom(2), "little")
    torch.manual_seed(seed)
    request.node.user_properties.append(("seed", seed))
    yield


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU (skipped without one)")
    config.addinivalue_line("markers", "sm90: needs a Hopper GPU and the CUTLASS sm90 kernels")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords or "sm90" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test's report shows its seed (a section beside its captured output)."""
    report = (yield).get_result()
    if report.failed:
        for key, value in item.user_properties:
            if key == "seed":
                report.sections.append(("w8a8 seed", f"{item.nodeid}: {value}"))


def pytest_terminal_summary(terminalreporter):
    """Skips and xfails as one line per reason with a count (pytest.ini's -rfE lists failures and
    errors only; -rs gives pytest's own per-location list)."""
    for outcome in ("skipped", "xfailed"):
        reasons = collections.Counter(_reason(report) for report in terminalreporter.stats.get(outcome, []))
        if reasons:
            terminalreporter.write_sep("-", f"{sum(reasons.values())} {outcome}, by reason")
            for reason, count in reasons.most_common():
                terminalreporter.write_line(f"{count:5d}  {reason}")


def _reason(report) -> str:
    if hasattr(report, "wasxfail"):
        return report.wasxfail.removeprefix("reason: ") or "(no reason given)"
    if isinstance(report.longrepr, tuple):  # (path, line, "Skipped: reason")
        return report.longrepr[2].removeprefix("Skipped: ")
    return str(report.longrepr)


def pytest_runtest_logreport(report):
    """With W8A8_FAILURE_LOG set, each failure is appended to that file as it happens (a run cut
    off by a time limit still says which tests failed and why). Written by the controlling
    process only, under pytest-xdist."""
    path = os.environ.get("W8A8_FAILURE_LOG")
    if path and report.failed and not os.environ.get("PYTEST_XDIST_WORKER"):
        with open(path, "a") as f:
            sections = "".join(f"--- {name}\n{text[-2000:]}\n" for name, text in report.sections)
            f.write(f"=== {report.nodeid} ({report.when})\n{report.longreprtext[-4000:]}\n{sections}\n")
