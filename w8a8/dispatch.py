"""Which kernel runs an op: decided here and nowhere else.

The public ops (``w8a8::scaled_mm``, ``quantize_per_token``, ``quantize_static``,
``linear``, and the fused ``rms_norm_quant``, ``add_rms_norm_quant``, ``silu_mul_quant``;
see ``w8a8.ops``) have one CPU and one CUDA implementation. The CPU one is
the exact reference. The CUDA one asks this module for a kernel and calls it. A kernel
is a torch op of its own that validates its inputs at its entry:

=====================  ==========================================================
kernel (``backend``)   what runs
=====================  ==========================================================
``"sm90"``             ``w8a8::scaled_mm_sm90`` (``w8a8._C``): the Hopper table:
                       CUTLASS TMA + wgmma tiles, the dp4a GEMV (M <= 4), the
                       mma.sync skinny GEMM (M = 5..16 on many short weight
                       rows); and ``w8a8::linear_sm90``,
                       quantizer + GEMM as one C++ call for few-token calls.
``"sm80"``             ``w8a8::scaled_mm_sm80`` (``w8a8._C_sm80``): CUTLASS mma.sync
                       tiles for Ampere / Ada (also runs on an H100 when named).
``"sm90"``             also the CUDA quantizers ``w8a8::quantize_*_sm90`` (``w8a8._C``).
``"triton"``           ``w8a8::*_triton``: any CUDA GPU; on the CPU only under
                       ``TRITON_INTERPRET=1`` (a test tool, never a default).
``"reference"``        ``w8a8.reference``: exact, any device.
=====================  ==========================================================

Choices are cached per (op, device); the per-call part is the routing predicate
``cutlass_operand_reason`` (shapes and 16-byte alignment the CUTLASS kernels need).
Falling back to a slower kernel on a GPU is warned once, with the reason; naming an
unavailable kernel (``backend=...``, for tests and benchmarks) raises with the reason.
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

# Kernels by op, fastest first (the default order on a GPU). Per-token quantization on
# the H100 (quant_h100.json, quant_serving_h100.json): the CUDA quantizer takes 1.7-2.2 us
# against 2.7-3.1 for Triton's at M = 1..128, K = 4096, and streams 90% / 96% of HBM against
# 83% / 76% at M = 8192, K = 4096 / 14336; it is built for sm_90 only (Triton elsewhere).
BACKENDS = {
    "scaled_mm": ("sm90", "sm80", "triton", "reference"),
    "quantize_per_token": ("sm90", "triton", "reference"),
    "quantize_static": ("triton", "sm90", "reference"),
    # The fused producer + quantizer ops (w8a8.triton.fused_quant): Triton is their only
    # GPU kernel.
    "rms_norm_quant": ("triton", "reference"),
    "add_rms_norm_quant": ("triton", "reference"),
    "silu_mul_quant": ("triton", "reference"),
}
# Up to this many tokens W8A8Linear's forward on sm90 runs as the single C++ op
# w8a8::linear_sm90: the CUDA quantizer, then the GEMM launched as its programmatic
# dependent, which loads its first weight tiles while the quantizer runs (its cooperative
# tiles multicast each weight tile to the token tiles that share it, so that the early
# start does not cost: docs/KERNELS.md). H100, CUDA-graph replays, against quantize +
# scaled_mm in the same run (linear_single_op_h100.json, the CUDA quantizer in both): less
# time at 50 of 64 points M = 96..256 on the 8 Llama-3 shapes (up to 9%), at most 2.7% more
# at 13, 7.5% more at one (4096 x 4096, M = 96: docs/KERNELS.md). Few tokens: host time as
# well (one Python-to-C++ crossing instead of two).
LINEAR_SM90_MAX_TOKENS = 256
# TMA (sm90) and cp.async (sm80) move 16-byte rows: int8 operands need K % 16 == 0,
# 16-bit outputs N % 8 == 0, and the CUTLASS kernels write bf16 / fp16 only.
CUTLASS_K_MULTIPLE = 16
CUTLASS_N_MULTIPLE = 8
CUTLASS_OUT_DTYPES = (torch.bfloat16, torch.float16)


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


def _default_candidate(backend: str, device: torch.device) -> bool:
    """A compiled family is a default only on the GPUs it is built for: the sm80 kernels on
    8.x (on an H100 they run only when named), the sm90 ones and the CUDA quantizers on 9.x.
    Elsewhere the next kernel is the device's fastest, not a fallback to warn about."""
    if backend not in ("sm80", "sm90") or device.type != "cuda":
        return True
    major = _capability(device.index if device.index is not None else torch.cuda.current_device())[0]
    return major == (8 if backend == "sm80" else 9)


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
    reads when it traces a call (tests/test_packaging.py checks that it still does)."""
    fn._dynamo_marked_constant = True
    return fn


# Under torch.compile a choice is a constant of the traced graph (only the forced-kernel
# wrappers are traced; the public ops are opaque and choose when they run).
@_assume_constant_result
def choose(op: str, device: torch.device, backend: str | None = None) -> str:
    """The kernel that runs ``op`` on ``device``: ``backend`` if given (raises if it cannot
    run there), else the fastest available (the reference on the CPU)."""
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
    skipped = []
    for backend in BACKENDS[op]:
        if not _default_candidate(backend, device):
            continue
        reason = unavailable_reason(op, backend, device)
        if reason is None:
            if skipped:
                _warn_once(f"w8a8.{op}: using the {backend!r} kernels on {device}: " + "; ".join(skipped))
            return backend
        skipped.append(f"{backend!r} unavailable: {reason}")
    raise AssertionError("the reference is always available")


def report() -> dict[str, dict[str, str]]:
    """For ``python -m w8a8 info``: per device, each op's kernels and their status."""
    devices = [torch.device("cpu")]
    if torch.cuda.is_available():
        devices += [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    return {
        str(dev): {f"{op}/{b}": unavailable_reason(op, b, dev) or "available" for op in BACKENDS for b in BACKENDS[op]}
        for dev in devices
    }


# --- the routing predicate ---------------------------------------------------------------


def cutlass_shape_reason(k: int, n: int, out_dtype: torch.dtype) -> str | None:
    """Why the CUTLASS kernels cannot take this problem shape (None if they can)."""
    if out_dtype not in CUTLASS_OUT_DTYPES:
        return f"out_dtype {out_dtype} (they write torch.bfloat16 / torch.float16)"
    if k % CUTLASS_K_MULTIPLE:
        return f"K = {k}, not a multiple of {CUTLASS_K_MULTIPLE}"
    if n % CUTLASS_N_MULTIPLE:
        return f"N = {n}, not a multiple of {CUTLASS_N_MULTIPLE}"
    return None


def _rows_reason(name: str, t: torch.Tensor, k: int) -> str | None:
    """The 16-byte rule on an int8 [rows, K] operand: aligned data pointer, row pitch a
    multiple of 16 and >= K (a single row's pitch is never used)."""
    if t.data_ptr() % 16:
        return f"{name}'s data pointer off the 16-byte grid (storage offset {t.storage_offset()})"
    pitch = t.stride(0)
    if t.shape[0] != 1 and (pitch < k or pitch % CUTLASS_K_MULTIPLE):
        return f"{name}'s row stride {pitch} (16-byte rows need a multiple of {CUTLASS_K_MULTIPLE} that is >= K = {k})"
    return None


def cutlass_operand_reason(a, b, out_dtype) -> str | None:
    """Why the CUTLASS kernels cannot take these scaled_mm operands, which Triton can
    (None if they can, and for operands no kernel takes: those reach a kernel whose
    validation refuses them with the op's message)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() == 2 and b.dim() == 2):
        return None
    if a.dtype != torch.int8 or b.dtype != torch.int8 or a.stride(1) != 1 or b.stride(1) != 1:
        return None
    m, k = a.shape
    n = b.shape[0]
    reason = cutlass_shape_reason(k, n, out_dtype)
    if reason is not None or m == 0 or n == 0 or k == 0:
        return reason  # (no kernel runs for an empty problem)
    return _rows_reason("a", a, k) or _rows_reason("b", b, k)


# --- kernels -------------------------------------------------------------------------------


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


def _cuda_quantize_per_token(x):
    """The CUDA per-token quantizer, its outputs in row-padded storage as the other GPU
    producers allocate theirs (w8a8.padding)."""
    m = math.prod(x.shape[:-1]) if isinstance(x, torch.Tensor) else 0  # the op refuses what it cannot take
    return torch.ops.w8a8.quantize_per_token_sm90.default(x, padding.padded_rows(m))


def kernel(op: str, backend: str):
    """The callable of a kernel: its torch op, or the validated reference."""
    if backend == "reference":
        return _REFERENCE[op]
    if (op, backend) == ("quantize_per_token", "sm90"):
        return _cuda_quantize_per_token
    return getattr(torch.ops.w8a8, f"{op}_{backend}").default


def _fallback(op: str, device: torch.device, reason: str) -> str:
    backend = choose(op, device, "triton" if unavailable_reason(op, "triton", device) is None else "reference")
    _warn_once(f"w8a8.{op}: the CUTLASS kernels cannot take {reason}; using the {backend!r} kernel")
    return backend


def scaled_mm_kernel(a, b, out_dtype, backend: str | None = None):
    """The kernel for these scaled_mm operands: ``backend``'s if named, else the device's
    fastest that can take them."""
    device = a.device if isinstance(a, torch.Tensor) else torch.device("cpu")
    chosen = choose("scaled_mm", device, backend)
    if backend is None and chosen in ("sm90", "sm80"):
        reason = cutlass_operand_reason(a, b, out_dtype)
        if reason is not None:
            chosen = _fallback("scaled_mm", device, reason)
    op = kernel("scaled_mm", chosen)
    return functools.partial(_sm90_padded, op) if chosen == "sm90" else op


def _sm90_padded(op, a, b, a_scale, b_scale, bias, out_dtype):
    """The sm90 GEMM on ``padding.padded_rows(M)`` rows where the operands' storage holds
    them (activations from the package's producers), its output cut back to M rows."""
    padded = padding.padded_operands(a, a_scale) if isinstance(a, torch.Tensor) and a.dim() == 2 else None
    if padded is None:
        return op(a, b, a_scale, b_scale, bias, out_dtype)
    return op(padded[0], b, padded[1], b_scale, bias, out_dtype)[: a.shape[0]]


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
    device = a.device if isinstance(a, torch.Tensor) else torch.device("cpu")
    choose("scaled_mm", device, "sm90")  # raises with the reason where the sm90 kernels cannot run
    op = functools.partial(torch.ops.w8a8.scaled_mm_sm90.default, config="", split_k=split_k, scheduler=scheduler)
    return _sm90_padded(op, a, b, a_scale, b_scale, bias, out_dtype)


def quantize_kernel(op: str, x, backend: str | None = None):
    """The kernel of a quantizing op (the quantizers and the fused producer + quantizer ops)
    for input ``x``: ``backend``'s if named, else the device's fastest."""
    device = x.device if isinstance(x, torch.Tensor) else torch.device("cpu")
    return kernel(op, choose(op, device, backend))


@functools.lru_cache(maxsize=None)
def _linear_sm90_serves(device_index: int, dtype: torch.dtype, k: int, n: int) -> bool:
    """The per-(device, dtype, shape) part of ``_linear_sm90_rows``: the device's default GEMM
    is the sm90 table, its CUDA quantizer is built, and the CUTLASS kernels take the shape."""
    device = torch.device("cuda", device_index)
    return (
        _best("scaled_mm", "cuda", device_index) == "sm90"
        and unavailable_reason("quantize_per_token", "sm90", device) is None
        and cutlass_shape_reason(k, n, dtype) is None
    )


def _linear_sm90_rows(x, weight) -> int:
    """The rows W8A8Linear's forward runs the single op w8a8::linear_sm90 on (the tokens
    padded as the producers pad theirs, w8a8.padding), or 0 where it does not: few tokens, a
    device and shape ``_linear_sm90_serves``, a weight the CUTLASS kernels can read
    (otherwise the composed path routes or refuses with the op's words)."""
    if not isinstance(x, torch.Tensor) or x.device.type != "cuda" or not isinstance(weight, torch.Tensor) \
            or weight.dim() != 2 or x.dim() < 1:
        return 0
    n, k = weight.shape
    if x.shape[-1] != k or x.numel() > LINEAR_SM90_MAX_TOKENS * max(k, 1):
        return 0
    padded = padding.padded_rows(math.prod(x.shape[:-1]))
    fits = (
        _linear_sm90_serves(x.device.index, x.dtype, k, n)
        and weight.dtype == torch.int8
        and weight.stride(1) == 1
        and _rows_reason("weight", weight, k) is None
    )
    return padded if fits else 0


def linear_kernel(x, weight, backend: str | None = None):
    """The implementation of ``w8a8::linear`` for these operands: the single C++ op
    ``w8a8::linear_sm90`` for few tokens on sm90, else quantize + scaled_mm as chosen here
    (``backend`` names the GEMM kernel; the Triton and reference GEMMs take the quantizer
    of the same name, the others the default one)."""
    # (Traced only when a kernel is named: the public op is opaque. The single op's route
    # reads data pointers, which a traced tensor has not: the composed path is traced.)
    if backend in (None, "sm90") and not torch.compiler.is_compiling():
        single_op_rows = _linear_sm90_rows(x, weight)
        if single_op_rows:
            return functools.partial(torch.ops.w8a8.linear_sm90.default, rows=single_op_rows)
    if backend is None:
        return linear_composed
    quant = backend if backend in ("triton", "reference") else None
    return functools.partial(linear_composed, mm_backend=backend, quant_backend=quant)


def linear_composed(x, weight, weight_scale, bias, input_scale, input_zero_point, mm_backend=None, quant_backend=None):
    """``w8a8::linear`` as its definition: quantize x (per token, or static with
    input_scale / input_zero_point), then scaled_mm with the given (folded) bias."""
    validate.linear(x, weight, weight_scale, bias, input_scale, input_zero_point)
    n, k = weight.shape
    x2 = x.reshape(math.prod(x.shape[:-1]), k)
    if x2.stride(-1) != 1 and k > 1:
        x2 = x2.contiguous()
    if input_scale is None:
        q, a_scale = quantize_kernel("quantize_per_token", x2, quant_backend)(x2)
    else:
        q = quantize_kernel("quantize_static", x2, quant_backend)(x2, input_scale, input_zero_point)
        a_scale = input_scale
    out = scaled_mm_kernel(q, weight, x.dtype, mm_backend)(q, weight, a_scale, weight_scale, bias, x.dtype)
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
