"""Shared test setup. Without a GPU, Triton kernels run in Triton's interpreter."""
import os

import torch

if not torch.cuda.is_available():
    # Must be set before any Triton kernel is decorated (they are imported lazily).
    os.environ.setdefault("TRITON_INTERPRET", "1")

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


def pytest_runtest_makereport(item, call):
    """Print the seed of a failing test."""
    if call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception):
        for key, value in item.user_properties:
            if key == "seed":
                print(f"\n[w8a8] seed for {item.nodeid}: {value}")
