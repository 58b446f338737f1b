"""Sweep-only sm90 configs: a bench-only build of the sm90 library with the sweep table appended.

    python -m benchmarks.sweep          # build (once; cached in benchmarks/sweep/build) and list the entries

The build compiles the product's sm90 sources (setup.py's rule for ``w8a8._C``) with
``-DW8A8_SWEEP_CONFIGS``, which appends ``W8A8_SM90_SWEEP_TABLE`` (``sm90_sweep_configs.cuh``)
to the product table, and registers the ops in the namespace ``w8a8_sweep``
(``torch.ops.w8a8_sweep.scaled_mm_sm90``, ``linear_sm90``, ``sm90_config_names``) beside the
package's own. ``python -m benchmarks --configs NAME`` loads it when NAME is not a product
entry. It needs what ``pip install -e .`` needs on a GPU machine (nvcc, the CUTLASS headers)
and takes a few minutes.

``python -m benchmarks.sweep.quant`` is the quantizer's: the product's per-token kernel at
every launch shape of ``quant_shapes.cuh``, a library of its own (``w8a8_qsweep``), timed alone
and before the GEMM (``quant.py``).
"""
from __future__ import annotations

import functools
import os
import runpy
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
NAMESPACE = "w8a8_sweep"


@functools.lru_cache(maxsize=None)
def setup_scope() -> dict:
    """setup.py's names (flags, archs, sources), read without running the build."""
    return runpy.run_path(str(ROOT / "setup.py"), run_name="w8a8_setup")


def build_library(name: str, sources: list[str], build: Path, defines=(), includes=()) -> None:
    """Compiles ``sources`` into the op library ``name`` (in ``build``, reused when unchanged) with
    the product's flags for the sm_90a extension, and loads it."""
    from torch.utils import cpp_extension

    setup = setup_scope()
    build.mkdir(parents=True, exist_ok=True)
    gencode = [f"-gencode=arch=compute_{a}a,code=sm_{a}a" for a in setup["SM90_ARCHS"]]
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 4))
    cpp_extension.load(
        name=name, sources=sources, build_directory=str(build),
        extra_include_paths=[str(ROOT / "csrc"), str(HERE), *includes],
        extra_cflags=setup["CXX_FLAGS"] + list(defines) + ["-DW8A8_SM90_ARCHS=" + ",".join(setup["SM90_ARCHS"])],
        extra_cuda_cflags=setup["NVCC_FLAGS"] + list(defines) + gencode, extra_ldflags=["-lcuda"],
        is_python_module=False, verbose=False)


@functools.lru_cache(maxsize=None)
def load() -> object:
    """Builds (or reuses) the sweep library and loads it; returns ``torch.ops.w8a8_sweep``."""
    import torch

    setup = setup_scope()
    spec = setup["EXTENSIONS"]["w8a8._C"]
    header, columns = spec["instance"]
    build = HERE / "build"
    product = [p for p in setup["extension_sources"]("w8a8._C")]
    sweep = setup["instance_sources"](HERE / "sm90_sweep_configs.cuh", header, columns, build / "instances")
    taken = {Path(p).name for p in product}
    sources = [str(ROOT / p) for p in product] + [str(ROOT / p) for p in sweep if Path(p).name not in taken]
    build_library(NAMESPACE, sources, build, defines=["-DW8A8_SWEEP_CONFIGS", f"-DW8A8_OPS={NAMESPACE}"],
                  includes=setup["cutlass_include_dirs"]())
    return getattr(torch.ops, NAMESPACE)


def ops_for(config: str):
    """``torch.ops.w8a8`` where ``config`` is "" or a product entry, else the sweep build's ops."""
    import torch

    from w8a8 import dispatch

    return torch.ops.w8a8 if not config or config in dispatch.config_names("sm90") else load()


def config_names() -> tuple[str, ...]:
    """Every entry of the sweep build's table (the product's first)."""
    return tuple(load().sm90_config_names())


def main() -> int:
    names = config_names()
    print(f"{NAMESPACE}: {len(names)} sm90 entries:\n  " + "\n  ".join(names))
    return 0
