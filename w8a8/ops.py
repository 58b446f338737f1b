"""The w8a8 ops: schemas, fake (meta) implementations and typed public wrappers.

Each op has one ``torch.library`` op per backend (``w8a8::scaled_mm_reference``,
``w8a8::scaled_mm_triton``, ``w8a8::scaled_mm_cutlass``...), so a compiled graph
names the kernel it runs and each backend is ``opcheck``-ed on its own. The
public functions below validate once (``w8a8.checks``), pick the backend
(``w8a8.backends``) and call that op. The math is stated in ``w8a8.reference``.
"""
from __future__ import annotations

import torch

from w8a8 import _extension, backends, checks, reference

_lib = torch.library.Library("w8a8", "FRAGMENT")

_QUANT_PER_TOKEN = "(Tensor x) -> (Tensor, Tensor)"
_QUANT_STATIC = "(Tensor x, Tensor scale, Tensor? zero_point) -> Tensor"
_SCALED_MM = (
    "(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, Tensor? bias, ScalarType out_dtype) -> Tensor"
)

# The Python-defined backends. The CUTLASS op is defined in C++ (csrc/torch_bindings.cpp).
_PY_BACKENDS = ("reference", "triton")
for _b in _PY_BACKENDS:
    _lib.define(f"quantize_per_token_{_b}{_QUANT_PER_TOKEN}")
    _lib.define(f"quantize_static_{_b}{_QUANT_STATIC}")
    _lib.define(f"scaled_mm_{_b}{_SCALED_MM}")


# --- fakes: the output shapes, stated once and shared by every backend ---------------------


def _fake_quantize_per_token(x):
    return torch.empty_like(x, dtype=torch.int8, memory_format=torch.contiguous_format), x.new_empty(
        (*x.shape[:-1], 1), dtype=torch.float32
    )


def _fake_quantize_static(x, scale, zero_point):
    return torch.empty_like(x, dtype=torch.int8, memory_format=torch.contiguous_format)


def _fake_scaled_mm(a, b, a_scale, b_scale, bias, out_dtype, config_id=-1, split_k=None, scheduler="auto"):
    return a.new_empty((a.shape[0], b.shape[0]), dtype=out_dtype)


for _b in _PY_BACKENDS:
    torch.library.register_fake(f"w8a8::quantize_per_token_{_b}", _fake_quantize_per_token)
    torch.library.register_fake(f"w8a8::quantize_static_{_b}", _fake_quantize_static)
    torch.library.register_fake(f"w8a8::scaled_mm_{_b}", _fake_scaled_mm)

# The compiled ops (csrc/*_bindings.cpp) get their fakes here, beside the others.
if _extension.load()[0]:
    torch.library.register_fake("w8a8::scaled_mm_cutlass", _fake_scaled_mm)
    torch.library.register_fake("w8a8::quantize_per_token_cuda", _fake_quantize_per_token)
    torch.library.register_fake("w8a8::quantize_static_cuda", _fake_quantize_static)

    @torch.library.register_fake("w8a8::linear_cutlass")
    def _fake_linear_cutlass(x, weight, weight_scale, bias, input_scale, split_k=None, scheduler="auto"):
        return x.new_empty((*x.shape[:-1], weight.shape[0]))


if _extension.load("_C_sm80")[0]:
    torch.library.register_fake("w8a8::scaled_mm_cutlass_sm80", _fake_scaled_mm)


# --- implementations ----------------------------------------------------------------------


def _triton():
    # Imported on first use: TRITON_INTERPRET is read when the kernels are decorated.
    from w8a8 import triton as triton_kernels

    return triton_kernels


for _key in ("CPU", "CUDA"):
    _lib.impl("quantize_per_token_reference", reference.quantize_per_token, _key)
    _lib.impl("quantize_static_reference", reference.quantize_static, _key)
    _lib.impl("scaled_mm_reference", reference.scaled_mm, _key)
    _lib.impl("quantize_per_token_triton", lambda x: _triton().quantize_per_token(x), _key)
    _lib.impl("quantize_static_triton", lambda x, s, zp: _triton().quantize_static(x, s, zp), _key)
    _lib.impl(
        "scaled_mm_triton",
        lambda a, b, sa, sb, bias, dt: _triton().scaled_mm(a, b, sa, sb, bias, dt),
        _key,
    )


# --- public wrappers ----------------------------------------------------------------------


def _op(name: str, backend: str):
    return getattr(torch.ops.w8a8, f"{name}_{backend}").default


def quantize_per_token(x: torch.Tensor, backend: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-token (per-row) int8 quantization.

    Parameters
    ----------
    x : Tensor [..., K], float16 / bfloat16 / float32, any device.
    backend : ``"cuda"``, ``"triton"``, ``"reference"`` or None (the fastest available).

    Returns
    -------
    q : Tensor [..., K], int8, contiguous. ``q = clamp(rint(x / scale), -128, 127)``,
        half to even; with this scale only -127..127 occur.
    scale : Tensor [..., 1], float32. ``scale = amax(|x|, dim=-1) / 127``.
        An all-zero row gives q = 0, scale = 0. A row holding Inf or NaN gives
        q = 0 and scale = NaN, so that row of any product is NaN downstream.
    """
    checks.check_quantize_per_token(x)
    chosen = backends.resolve(backend, x.device, "quantize_per_token")
    checks.check_quantize_layout("quantize_per_token", x, chosen)
    return _op("quantize_per_token", chosen)(x)


def quantize_static(
    x: torch.Tensor,
    scale: torch.Tensor,
    zero_point: torch.Tensor | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """Per-tensor static int8 quantization with a calibrated scale.

    Parameters
    ----------
    x : Tensor [..., K], float16 / bfloat16 / float32.
    scale : Tensor [1], float32, on x's device (read on the device: no host sync).
    zero_point : optional Tensor [1], int8 or int32: for asymmetric activations.
    backend : ``"cuda"``, ``"triton"``, ``"reference"`` or None.

    Returns
    -------
    q : Tensor [..., K], int8. ``q = clamp(rint(x / scale) + zero_point, -128, 127)``;
        +-Inf saturate, NaN becomes ``zero_point`` (int8 cannot carry it).
    """
    checks.check_quantize_static(x, scale, zero_point)
    chosen = backends.resolve(backend, x.device, "quantize_static")
    checks.check_quantize_layout("quantize_static", x, chosen)
    return _op("quantize_static", chosen)(x, scale, zero_point)


def scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
    backend: str | None = None,
    split_k: int | None = None,
    scheduler: str = "auto",
) -> torch.Tensor:
    """int8 x int8 matmul with a fused dequantization epilogue.

    ``out = a_scale * (b_scale^T * (a @ b^T)) + bias``: the product is exact in
    int32, the epilogue runs in float32 and is rounded once to ``out_dtype``.

    Parameters
    ----------
    a : Tensor [M, K], int8, unit stride along K (row stride free).
    b : Tensor [N, K], int8: the ``nn.Linear`` weight layout (no transpose).
    a_scale : Tensor [M, 1] (per token) or [1] (per tensor), float32.
    b_scale : Tensor [N], [N, 1] (per channel) or [1], float32.
    bias : optional Tensor [N], float32 or ``out_dtype``.
    out_dtype : torch.bfloat16 or torch.float16 (float32 too on the Triton and reference backends).
    backend : ``"cutlass"`` (the device's CUTLASS kernels: sm90 on compute capability 9.0,
        sm80 on 8.x), ``"cutlass_sm80"`` (the sm80 mma.sync kernels on any device that runs
        them, an H100 included), ``"triton"``, ``"reference"`` or None (the fastest that
        can take these tensors; a fallback on a CUDA device is warned about once).
    split_k : how many ways the CUTLASS kernel splits K. None: a heuristic
        (splits only small-M, long-K shapes that launch fewer tiles than SMs;
        ``docs/SPLIT_K.md``); 1: never; n > 1: n splits (at most one per
        128-wide K tile). Partial sums are int32, so every split count gives
        the same bits.
    scheduler : ``"auto"`` (the heuristic, honouring split_k), ``"persistent"``
        (data-parallel, no split) or ``"streamk"`` (CUTLASS's stream-K
        decomposition). split_k and scheduler steer only the CUTLASS kernel:
        naming another backend with a split is an error (the sm80 kernels
        are data-parallel: they never split K); with
        ``backend=None`` on a device without the sm90 kernels they are ignored.

    Returns
    -------
    out : Tensor [M, N], row-major, ``out_dtype``, on a's device.
    """
    checks.check_tensor("scaled_mm", "a", a)
    chosen = backends.resolve(backend, a.device, "scaled_mm")
    if backend is None and chosen == "cutlass":
        reason = checks.cutlass_operand_reason(a, b, out_dtype)
        if reason is not None:
            chosen = backends.fallback_for_shape("scaled_mm", a.device, reason)
    checks.check_scaled_mm(a, b, a_scale, b_scale, bias, out_dtype, chosen)
    if chosen == "cutlass" and backends.cutlass_kernel_family(a.device) == "sm80":
        chosen = "cutlass_sm80"  # the device's own CUTLASS kernels are the sm80 ones
        if backend is None:
            split_k, scheduler = None, "auto"  # steer only the sm90 kernels; ignored like on Triton
    checks.check_split("scaled_mm", split_k, scheduler, backend if chosen != "cutlass_sm80" else chosen, k=a.shape[1])
    if chosen == "cutlass":
        return torch.ops.w8a8.scaled_mm_cutlass.default(a, b, a_scale, b_scale, bias, out_dtype, -1, split_k, scheduler)
    if chosen == "cutlass_sm80":
        return torch.ops.w8a8.scaled_mm_cutlass_sm80.default(a, b, a_scale, b_scale, bias, out_dtype, -1)
    return _op("scaled_mm", chosen)(a, b, a_scale, b_scale, bias, out_dtype)


def cutlass_plan(m: int, n: int, k: int, split_k: int | None = None, scheduler: str = "auto", config_id: int = -1):
    """What ``scaled_mm(..., backend="cutlass")`` runs for an [M, K] x [N, K] product on
    the current CUDA device: ``(config_id, decomposition, splits)``, with decomposition one
    of ``"data_parallel"``, ``"split_k"``, ``"stream_k"`` or ``"heuristic"`` (CUTLASS's own
    stream-K choice). Raises as the op would for values it refuses."""
    checks.check_split("cutlass_plan", split_k, scheduler, "cutlass", k=k)
    reason = backends.unavailable_reason("cutlass", torch.device("cuda"), "scaled_mm") if torch.cuda.is_available() else "no CUDA device"
    if reason is not None:
        raise RuntimeError(f"w8a8.cutlass_plan: backend='cutlass' is not available: {reason}")
    config, decomposition, splits = torch.ops.w8a8.scaled_mm_cutlass_plan(m, n, k, config_id, split_k, scheduler)
    return int(config), str(decomposition), int(splits)

