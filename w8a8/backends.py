"""Which backend runs an op on a given device, and why the others don't.

Backends:
  * ``"cutlass"``   - the CUTLASS kernels of the device's arch: sm90 (``w8a8._C``, TMA + wgmma)
                      on compute capability 9.0, sm80 (``w8a8._C_sm80``, mma.sync) on 8.x.
  * ``"cutlass_sm80"`` - the sm80 CUTLASS kernels on any device that runs them (8.x, and 9.0
                      where it is asked for by name: how an H100 tests and times the Ampere path).
  * ``"cuda"``      - hand-written CUDA kernels from ``w8a8._C``: the activation quantizers
                      (C++ ops, so an eager call costs one dispatch, not a Python op).
  * ``"triton"``    - Triton kernels: any CUDA GPU; on the CPU only under ``TRITON_INTERPRET=1``.
  * ``"reference"`` - the exact torch implementation in ``w8a8.reference``; runs anywhere.

``backend=None`` picks the fastest available one for the tensors' device. On a
CUDA device, falling back from CUTLASS is said once with a warning that names
the reason; explicitly asking for an unavailable backend is an error.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import threading
import warnings

import torch

from w8a8 import _extension

BACKENDS = ("cutlass", "cutlass_sm80", "cuda", "triton", "reference")

# The fastest first. Quantization has no CUTLASS kernel. On the H100 (bench_quant.py,
# M = 8192) the Triton quantizer streams 81% / 66% of HBM at K = 4096 / 14336 and the CUDA
# one 61% / 42%, so Triton is the default; the CUDA quantizer serves W8A8Linear's
# single-op decode path (w8a8::linear_cutlass), where a C++ call saves host time.
_PREFERENCE = {
    "scaled_mm": ("cutlass", "triton", "reference"),
    "quantize": ("triton", "cuda", "reference"),
}


def triton_interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.lru_cache(maxsize=None)
def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def unavailable_reason(backend: str, device: torch.device, op: str = "scaled_mm") -> str | None:
    """None if ``backend`` can run ``op`` on ``device``, else the reason it cannot."""
    if backend not in BACKENDS:
        return f"unknown backend {backend!r}; expected one of {BACKENDS} or None"
    if backend == "reference":
        return None
    if backend == "triton":
        if not _triton_installed():
            return "triton is not installed"
        if device.type == "cuda" or (device.type == "cpu" and triton_interpret()):
            return None
        return (
            f"Triton kernels need a CUDA device (got {device.type}); "
            "set TRITON_INTERPRET=1 to run them on the CPU in Triton's interpreter"
        )
    # the compiled kernels: CUTLASS for scaled_mm, CUDA for the quantizers
    if backend in ("cutlass", "cutlass_sm80") and op != "scaled_mm":
        return f"there is no CUTLASS kernel for {op}"
    if backend == "cuda" and not op.startswith("quantize"):
        return f"the 'cuda' backend holds the quantizers only; {op} runs on 'cutlass', 'triton' or 'reference'"
    kind = "CUDA" if backend == "cuda" else "CUTLASS"
    if device.type != "cuda":
        return f"{kind} kernels need a CUDA device (got {device.type})"
    major, minor = _capability(device.index if device.index is not None else torch.cuda.current_device())
    arch = major * 10 + minor
    if backend == "cutlass_sm80" or (backend == "cutlass" and major == 8):
        # sm_80 SASS runs on every 8.x device; the library also carries sm_90 SASS of the same kernels.
        loaded, why = _extension.load("_C_sm80")
        if not loaded:
            return why
        if not (major == 8 or arch in _extension.cutlass_sm80_archs()):
            return f"no sm80 CUTLASS kernel for sm_{arch} (built for {list(_extension.cutlass_sm80_archs())})"
        return None
    loaded, why = _extension.load()
    if not loaded:
        return why
    if arch not in _extension.cutlass_archs():
        return f"no {kind} kernel for sm_{arch} (built for {list(_extension.cutlass_archs())})"
    return None


@torch.compiler.assume_constant_result
def cutlass_kernel_family(device: torch.device) -> str:
    """Which CUTLASS kernels ``backend="cutlass"`` runs on ``device``: "sm90" or "sm80"."""
    major, _ = _capability(device.index if device.index is not None else torch.cuda.current_device())
    return "sm80" if major == 8 else "sm90"


_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()  # two threads falling back at once still warn once


@functools.lru_cache(maxsize=None)
def _best(device_type: str, device_index: int | None, family: str) -> str:
    if device_type == "cpu":
        # The exact reference is the CPU path; Triton's interpreter is a test tool, never a default.
        return "reference"
    device = torch.device(device_type, device_index)
    skipped = []
    for backend in _PREFERENCE[family]:
        reason = unavailable_reason(backend, device, "scaled_mm" if family == "scaled_mm" else "quantize")
        if reason is None:
            if skipped:
                _warn_once(family, f"w8a8.{family}: using the {backend!r} backend on {device}: " + "; ".join(skipped))
            return backend
        skipped.append(f"{backend!r} unavailable: {reason}")
    raise AssertionError("the reference backend is always available")


def _warn_once(key: str, message: str) -> None:
    with _warned_lock:
        first = (key, message) not in _warned
        _warned.add((key, message))
    if first:
        warnings.warn(message, RuntimeWarning, stacklevel=4)


# Under torch.compile the choice is a constant of the traced graph: dynamo calls
# these eagerly instead of tracing the device queries and caches inside.
@torch.compiler.assume_constant_result
def resolve(backend: str | None, device: torch.device, op: str) -> str:
    """The backend that will run ``op`` (``"scaled_mm"``, ``"quantize_per_token"``...) on ``device``."""
    family = "scaled_mm" if op == "scaled_mm" else "quantize"
    if backend is None:
        return _best(device.type, device.index, family)
    reason = unavailable_reason(backend, device, op)
    if reason is not None:
        raise RuntimeError(f"w8a8.{op}: backend={backend!r} is not available: {reason}")
    return backend


def report() -> dict[str, dict[str, str]]:
    """For ``python -m w8a8 info``: per device, each backend's status."""
    devices = [torch.device("cpu")]
    if torch.cuda.is_available():
        devices += [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    out = {}
    for dev in devices:
        out[str(dev)] = {
            f"{op}/{b}": (unavailable_reason(b, dev, op) or "available")
            for op in ("scaled_mm", "quantize")
            for b in _PREFERENCE[op] + (("cutlass_sm80",) if op == "scaled_mm" else ())
        }
    return out


@torch.compiler.assume_constant_result
def fallback_for_shape(op: str, device: torch.device, reason: str) -> str:
    """The backend after CUTLASS for a shape CUTLASS cannot take; said once per reason."""
    for backend in _PREFERENCE["scaled_mm"][1:]:
        if unavailable_reason(backend, device, op) is None:
            _warn_once(op, f"w8a8.{op}: CUTLASS cannot take {reason}; using the {backend!r} backend")
            return backend
    raise AssertionError("the reference backend is always available")
