"""Which kernel runs an op.

The public ops (``w8a8::scaled_mm``, ``quantize_per_token``, ``quantize_static``,
``linear``, and the fused ``rms_norm_quant``, ``add_rms_norm_quant``, ``silu_mul_quant``;
see ``w8a8.ops``) have one CPU and one CUDA implementation. The CPU one is the exact
reference. The CUDA one is, wherever ``w8a8._C`` is built, the C++ router of
``csrc/torch/sm90/routes.cpp``: it picks the kernel by the device's compute capability and
the operands, with no Python on the way (its rules: ``default_backend`` there, and what the
CUTLASS kernels take). Without ``w8a8._C`` a GPU has the Triton kernels only, and
``w8a8.ops`` registers them. This module names the kernels (``backend=``, for tests and
benchmarks), says why one cannot run, and reports the router's defaults. A kernel is a
torch op of its own that validates its inputs at its entry:

=====================  ==========================================================
kernel (``backend``)   what runs
=====================  ==========================================================
``"sm90"``             ``w8a8::scaled_mm_sm90`` (``w8a8._C``): the Hopper table:
                       CUTLASS TMA + wgmma tiles, the dp4a GEMV (M <= 4), the
                       mma.sync skinny GEMM (M = 5..16 on many short weight
                       rows); ``w8a8::linear_sm90``, quantizer + GEMM as one
                       C++ call; the CUDA quantizers ``w8a8::quantize_*_sm90``.
``"sm80"``             ``w8a8::scaled_mm_sm80`` (``w8a8._C_sm80``): CUTLASS mma.sync
                       tiles for Ampere / Ada (also runs on an H100 when named).
``"triton"``           ``w8a8::*_triton``: any CUDA GPU; on the CPU only under
                       ``TRITON_INTERPRET=1`` (a test tool, never a default).
``"reference"``        ``w8a8.reference``: exact, any device.
=====================  ==========================================================

Naming an unavailable kernel (``backend=...``) raises with the reason.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import math
import os
import threading
import warnings

import torch

from w8a8 import padding, reference, validate

__all__ = ["BACKENDS", "choose", "config_names", "archs", "report", "unavailable_reason"]

# The kernels of each op (names for ``backend=``). Which one runs by default on a GPU is the
# C++ router's rule (``default``); on the CPU the reference.
BACKENDS = {
    "scaled_mm": ("sm90", "sm80", "triton", "reference"),
    "quantize_per_token": ("sm90", "triton", "reference"),
    "quantize_static": ("triton", "sm90", "reference"),
    "rms_norm_quant": ("triton", "reference"),
    "add_rms_norm_quant": ("triton", "reference"),
    "silu_mul_quant": ("triton", "reference"),
}


# --- the compiled extensions --------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def load(module: str = "_C") -> tuple[bool, str]:
    """(loaded, reason) for ``w8a8._C`` (sm90 kernels, CUDA quantizers) or ``w8a8._C_sm80``.
    Importing the library registers its ops; their fakes are registered in ``w8a8.ops``."""
    try:
        importlib.import_module(f"w8a8.{module}")
    except ImportError as exc:
        return False, f"w8a8.{module} is not built or failed to load ({exc})"
    return True, "loaded"


def _library_list(family: str, what: str) -> tuple:
    """``w8a8::<family>_<what>()`` of a compiled GEMM family, empty when its library is not built."""
    if not load("_C" if family == "sm90" else "_C_sm80")[0]:
        return ()
    return tuple(getattr(torch.ops.w8a8, f"{family}_{what}")())


@functools.lru_cache(maxsize=None)
def archs(family: str) -> tuple[int, ...]:
    """The SM architectures a compiled kernel family (``"sm90"``, ``"sm80"``) was built for."""
    return tuple(int(a) for a in _library_list(family, "archs"))


@functools.lru_cache(maxsize=None)
def config_names(family: str) -> tuple[str, ...]:
    """The config table of a compiled GEMM family (benchmarks and tests address entries by name)."""
    return tuple(str(n) for n in _library_list(family, "config_names"))


def triton_interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.lru_cache(maxsize=None)
def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


# --- availability ---------------------------------------------------------------------------


def unavailable_reason(op: str, backend: str, device: torch.device) -> str | None:
    """None if ``backend`` can run ``op`` on ``device``, else why it cannot."""
    if op not in BACKENDS:
        raise ValueError(f"w8a8: unknown op {op!r}; expected one of {tuple(BACKENDS)}")
    if backend not in BACKENDS[op]:
        return f"unknown backend {backend!r} for {op}; expected one of {BACKENDS[op]} or None"
    if backend == "reference":
        return None
    if backend == "triton":
        if not _triton_installed():
            return "triton is not installed"
        if device.type == "cuda" or (device.type == "cpu" and triton_interpret()):
            return None
        return (f"Triton kernels need a CUDA device (got {device.type}); set TRITON_INTERPRET=1 "
                "to run them on the CPU in Triton's interpreter")
    if device.type != "cuda":
        return f"the {backend} kernels need a CUDA device (got {device.type})"
    family = "sm80" if backend == "sm80" else "sm90"  # the CUDA quantizers live in the sm90 library
    loaded, why = load("_C_sm80" if family == "sm80" else "_C")
    if not loaded:
        return why
    major, minor = _capability(device.index if device.index is not None else torch.cuda.current_device())
    arch = major * 10 + minor
    if arch not in archs(family) and not (family == "sm80" and major == 8):
        return f"no {backend} kernel for sm_{arch} (built for {list(archs(family))})"
    return None


_warned: set[str] = set()
_warned_lock = threading.Lock()  # two threads falling back at once still warn once


def _warn_once(message: str) -> None:
    with _warned_lock:
        first = message not in _warned
        _warned.add(message)
    if first:
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def _assume_constant_result(fn):
    """``torch.compiler.assume_constant_result`` without its import of ``torch._dynamo``
    (~1.3 s, most of ``import w8a8``): the decorator only sets this attribute, which dynamo
    reads when it traces a call (tests/repository/test_packaging.py checks that it still does)."""
    fn._dynamo_marked_constant = True
    return fn


# Under torch.compile a choice is a constant of the traced graph (only the forced-kernel
# wrappers are traced; the public ops are opaque and choose when they run).
@_assume_constant_result
def choose(op: str, device: torch.device, backend: str | None = None) -> str:
    """The kernel that runs ``op`` on ``device``: ``backend`` if given (raises if it cannot
    run there), else the default (the reference on the CPU; on a GPU the router's rule)."""
    if backend is not None:
        reason = unavailable_reason(op, backend, device)
        if reason is not None:
            raise RuntimeError(f"w8a8.{op}: backend={backend!r} is not available on {device}: {reason}")
        return backend
    return _best(op, device.type, device.index)


@functools.lru_cache(maxsize=None)
def _best(op: str, device_type: str, device_index: int | None) -> str:
    if device_type != "cuda":
        return "reference"  # Triton's interpreter is a test tool, never a default
    device = torch.device(device_type, device_index)
    if load("_C")[0]:
        index = device_index if device_index is not None else torch.cuda.current_device()
        return str(torch.ops.w8a8.default_backend(op, index))
    # Without w8a8._C a GPU runs the Triton kernels (w8a8.ops registers them).
    reason = unavailable_reason(op, "triton", device)
    if reason is None:
        return "triton"
    _warn_once(f"w8a8.{op}: using the 'reference' kernel on {device}: 'triton' unavailable: {reason}")
    return "reference"


def report() -> dict[str, dict[str, str]]:
    """For ``python -m w8a8 info``: per device, each op's kernels and their status."""
    devices = [torch.device("cpu")]
    if torch.cuda.is_available():
        devices += [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    return {
        str(dev): {f"{op}/{b}": unavailable_reason(op, b, dev) or "available" for op in BACKENDS for b in BACKENDS[op]}
        for dev in devices
    }


# --- kernels by name -----------------------------------------------------------------------


def _reference_scaled_mm(a, b, a_scale, b_scale, bias, out_dtype):
    validate.scaled_mm(a, b, a_scale, b_scale, bias, out_dtype)
    return reference.scaled_mm(a, b, a_scale, b_scale, bias, out_dtype)


def _reference_quantize_per_token(x):
    validate.quantize_per_token(x)
    return reference.quantize_per_token(x)


def _reference_quantize_static(x, scale, zero_point):
    validate.quantize_static(x, scale, zero_point)
    return reference.quantize_static(x, scale, zero_point)


def _reference_rms_norm_quant(x, weight, eps):
    validate.rms_norm_quant(x, weight, eps)
    return reference.rms_norm_quant(x, weight, eps)


def _reference_add_rms_norm_quant(x, residual, weight, eps):
    validate.add_rms_norm_quant(x, residual, weight, eps)
    return reference.add_rms_norm_quant(x, residual, weight, eps)


def _reference_silu_mul_quant(gate, up):
    validate.silu_mul_quant(gate, up)
    return reference.silu_mul_quant(gate, up)


_REFERENCE = {
    "scaled_mm": _reference_scaled_mm,
    "quantize_per_token": _reference_quantize_per_token,
    "quantize_static": _reference_quantize_static,
    "rms_norm_quant": _reference_rms_norm_quant,
    "add_rms_norm_quant": _reference_add_rms_norm_quant,
    "silu_mul_quant": _reference_silu_mul_quant,
}


def _sm90_quantize_per_token(x):
    """The CUDA per-token quantizer, its outputs in row-padded storage (w8a8.padding)."""
    m = math.prod(x.shape[:-1]) if isinstance(x, torch.Tensor) else 0  # the op refuses what it cannot take
    return torch.ops.w8a8.quantize_per_token_sm90.default(x, padding.padded_rows(m))


def kernel(op: str, backend: str):
    """The callable of a named kernel: its torch op, or the validated reference."""
    if backend == "reference":
        return _REFERENCE[op]
    if (op, backend) == ("quantize_per_token", "sm90"):
        return _sm90_quantize_per_token
    return getattr(torch.ops.w8a8, f"{op}_{backend}").default


def named_kernel(op: str, x, backend: str):
    """The kernel ``backend`` of ``op`` for input ``x`` (raises with the reason where it cannot run)."""
    device = x.device if isinstance(x, torch.Tensor) else torch.device("cpu")
    return kernel(op, choose(op, device, backend))


SCHEDULERS = ("auto", "persistent", "stream_k")


def scaled_mm_sm90_decomposed(a, b, a_scale, b_scale, bias, out_dtype, backend, split_k, scheduler):
    """``scaled_mm`` with the sm90 kernel's K decomposition named (``split_k``, ``scheduler``):
    only on the sm90 kernels, and only when they are named (a default route could land on
    another kernel, which has no such control)."""
    if backend != "sm90":
        raise ValueError(f"w8a8.scaled_mm: split_k / scheduler choose the sm90 kernels' K decomposition and need "
                         f"backend='sm90', got backend={backend!r} (split_k={split_k!r}, scheduler={scheduler!r})")
    if scheduler not in SCHEDULERS:
        raise ValueError(f"w8a8.scaled_mm: scheduler must be one of {SCHEDULERS}, got {scheduler!r}")
    if split_k is not None and (isinstance(split_k, bool) or not isinstance(split_k, int)):
        raise ValueError(f"w8a8.scaled_mm: split_k must be None or an int >= 1, got {split_k!r}")
    named_kernel("scaled_mm", a, "sm90")  # raises with the reason where the sm90 kernels cannot run
    return torch.ops.w8a8.scaled_mm_sm90.default(a, b, a_scale, b_scale, bias, out_dtype, "", split_k, scheduler)


def linear_kernel(x, weight, backend: str):
    """The implementation of ``w8a8::linear`` with the GEMM kernel ``backend`` named: on sm90 the
    single C++ op (the CUDA quantizer and the sm90 GEMM, codes row-padded); otherwise quantize then
    scaled_mm on the named GEMM (the Triton and reference GEMMs take the quantizer of the same
    name, sm90 under torch.compile and sm80 the device's default one)."""
    # (Traced only when a kernel is named: the public op is opaque. Under torch.compile the
    # named sm90 path is traced as its composition, whose ops take any token count.)
    if backend == "sm90" and not torch.compiler.is_compiling():
        # Where the kernel runs: the weight's device. Operands on two devices are the op's to
        # refuse (its ValueError, in the words of every other path), not an unavailable kernel.
        apart = isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor) and x.device != weight.device
        if not apart:
            named_kernel("scaled_mm", weight if isinstance(weight, torch.Tensor) else x, "sm90")
        m = math.prod(x.shape[:-1]) if isinstance(x, torch.Tensor) else 0
        return functools.partial(torch.ops.w8a8.linear_sm90.default, rows=padding.padded_rows(m))
    quant = backend if backend in ("triton", "reference") else None
    return functools.partial(linear_composed, mm_backend=backend, quant_backend=quant)


def linear_composed(x, weight, weight_scale, bias, input_scale, input_zero_point, mm_backend, quant_backend=None):
    """``w8a8::linear`` as its definition on named kernels: quantize x (per token, or static with
    input_scale / input_zero_point; ``quant_backend`` None: the public quantizer op), then
    scaled_mm on ``mm_backend`` with the given (folded) bias."""
    validate.linear(x, weight, weight_scale, bias, input_scale, input_zero_point)
    n, k = weight.shape
    x2 = x.reshape(math.prod(x.shape[:-1]), k)
    if x2.stride(-1) != 1 and k > 1:
        x2 = x2.contiguous()
    if input_scale is None:
        quantize = torch.ops.w8a8.quantize_per_token.default if quant_backend is None else \
            named_kernel("quantize_per_token", x2, quant_backend)
        q, a_scale = quantize(x2)
    else:
        quantize = torch.ops.w8a8.quantize_static.default if quant_backend is None else \
            named_kernel("quantize_static", x2, quant_backend)
        q = quantize(x2, input_scale, input_zero_point)
        a_scale = input_scale
    out = named_kernel("scaled_mm", q, mm_backend)(q, weight, a_scale, weight_scale, bias, x.dtype)
    return out.reshape(*x.shape[:-1], n)


# --- tensor parallelism's kernels ------------------------------------------------------------


def row_stats_kernels(device: torch.device):
    """(per_token_row_stats, quantize_with_row_stats) for ``device``: Triton on a GPU, the
    reference elsewhere (see ``w8a8.parallel``)."""
    if device.type == "cuda" and unavailable_reason("quantize_per_token", "triton", device) is None:
        from w8a8.triton import quant

        return quant.per_token_row_stats, quant.quantize_with_row_stats
    return reference.per_token_row_stats, reference.quantize_with_row_stats


# cuBLASLt's _int_mm refuses M <= 16: smaller M is padded to this many rows.
_INT_MM_MIN_ROWS = 17


def int_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact int32 ``a @ b^T`` (int8 a [M, K], b [N, K]; the row-parallel layers' partial
    sums): ``torch._int_mm`` on CUDA, ``reference.int_mm_exact`` elsewhere."""
    if a.device.type != "cuda":
        return reference.int_mm_exact(a, b)
    m, k = a.shape
    if k % 8 or b.shape[0] % 8:
        raise ValueError(f"w8a8.int_mm: torch._int_mm needs K and N divisible by 8, got K = {k}, N = {b.shape[0]}")
    if m < _INT_MM_MIN_ROWS:
        padded = a.new_zeros(_INT_MM_MIN_ROWS, k)
        padded[:m] = a
        return torch._int_mm(padded, b.t())[:m]
    return torch._int_mm(a, b.t())
