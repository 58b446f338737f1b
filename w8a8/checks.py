"""Input validation for the public ops, in one place.

Every error names the op, what was expected and what was given. The checks
read only dtypes, shapes and strides (never data), so they cost no host
synchronisation and trace cleanly under torch.compile.
"""
from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# The CUTLASS backends: the arch's own kernels, and the sm80 (mma.sync) kernels forced.
CUTLASS_BACKENDS = ("cutlass", "cutlass_sm80")
# What the CUTLASS kernels store (TMA on sm90, vector stores on sm80): 16-bit outputs only.
CUTLASS_OUT_DTYPES = (torch.bfloat16, torch.float16)
# TMA (sm90) and cp.async (sm80) move 16-byte rows: int8 operands need K % 16 == 0,
# 16-bit outputs N % 8 == 0.
CUTLASS_K_MULTIPLE = 16
CUTLASS_N_MULTIPLE = 8


def _fail(op: str, what: str) -> None:
    raise ValueError(f"w8a8.{op}: {what}")


def _check(cond: bool, op: str, what) -> None:
    """``what`` is a callable building the message only on failure: formatting a symbolic
    size eagerly would make torch.compile specialize on it (one graph per M)."""
    if not cond:
        _fail(op, what())


def check_tensor(op: str, name: str, t, optional: bool = False) -> None:
    """``t`` is a tensor (or None where ``optional``): checked before anything reads its attributes."""
    _check(
        isinstance(t, torch.Tensor) or (optional and t is None),
        op,
        lambda: f"{name} must be a tensor{' or None' if optional else ''}, got {type(t).__name__}",
    )


def check_quantize_input(op: str, x: torch.Tensor) -> None:
    check_tensor(op, "x", x)
    _check(x.dtype in FLOAT_DTYPES, op, lambda: f"x must be one of {FLOAT_DTYPES}, got {x.dtype}")
    _check(x.dim() >= 1, op, lambda: f"x must have at least 1 dimension [..., K], got shape {tuple(x.shape)}")


def check_quantize_per_token(x: torch.Tensor) -> None:
    op = "quantize_per_token"
    check_quantize_input(op, x)
    # An empty row has no amax to take a scale from (quantize_static takes K = 0: its output is empty).
    _check(x.shape[-1] >= 1, op, lambda: f"x's last dim (K) must be >= 1, got shape {tuple(x.shape)}")


def check_quantize_layout(op: str, x: torch.Tensor, backend: str) -> None:
    """The kernel backends read x's rows with unit stride along K (any row stride); the
    reference reads any strides. Called once the backend is known."""
    if backend == "reference":
        return
    _check(
        x.shape[-1] <= 1 or x.stride(-1) == 1,
        op,
        lambda: f"backend={backend!r} needs x with unit stride along its last dim (K), got strides "
        f"{tuple(x.stride())} for shape {tuple(x.shape)}; call .contiguous() first",
    )


def check_quantize_static(x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None) -> None:
    op = "quantize_static"
    check_quantize_input(op, x)
    _check(
        isinstance(scale, torch.Tensor),
        op,
        lambda: f"scale must be a float32 tensor of shape [1] (read on the device), got {type(scale).__name__}",
    )
    check_tensor(op, "zero_point", zero_point, optional=True)
    _check(scale.dtype == torch.float32, op, lambda: f"scale must be float32, got {scale.dtype}")
    _check(scale.numel() == 1, op, lambda: f"scale must hold one value (shape [1]), got shape {tuple(scale.shape)}")
    _check(scale.device == x.device, op, lambda: f"scale must be on {x.device} like x, got {scale.device}")
    if zero_point is not None:
        _check(
            zero_point.dtype in (torch.int8, torch.int32),
            op,
            lambda: f"zero_point must be int8 or int32, got {zero_point.dtype}",
        )
        _check(zero_point.numel() == 1, op, lambda: f"zero_point must hold one value, got shape {tuple(zero_point.shape)}")
        _check(zero_point.device == x.device, op, lambda: f"zero_point must be on {x.device} like x, got {zero_point.device}")


def check_scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype,
    backend: str,
) -> None:
    op = "scaled_mm"
    for name, t in (("a", a), ("b", b), ("a_scale", a_scale), ("b_scale", b_scale)):
        check_tensor(op, name, t)
    check_tensor(op, "bias", bias, optional=True)
    _check(a.dtype == torch.int8, op, lambda: f"a must be int8, got {a.dtype}")
    _check(b.dtype == torch.int8, op, lambda: f"b must be int8, got {b.dtype}")
    _check(a.dim() == 2, op, lambda: f"a must be 2-D [M, K], got shape {tuple(a.shape)}")
    _check(b.dim() == 2, op, lambda: f"b must be 2-D [N, K] (the nn.Linear weight layout), got shape {tuple(b.shape)}")
    m, k = a.shape
    n = b.shape[0]
    _check(b.shape[1] == k, op, lambda: f"b must be [N, K] with K = {k} (a is {tuple(a.shape)}), got {tuple(b.shape)}")
    _check(
        out_dtype in OUT_DTYPES,
        op,
        lambda: f"out_dtype must be one of {OUT_DTYPES}, got {out_dtype}",
    )
    _check(a_scale.dtype == torch.float32, op, lambda: f"a_scale must be float32, got {a_scale.dtype}")
    _check(b_scale.dtype == torch.float32, op, lambda: f"b_scale must be float32, got {b_scale.dtype}")
    _check(
        tuple(a_scale.shape) in ((m, 1), (1,), (1, 1)),
        op,
        lambda: f"a_scale must be [M, 1] = [{m}, 1] (per token) or [1] (per tensor), got {tuple(a_scale.shape)}",
    )
    _check(
        tuple(b_scale.shape) in ((n,), (n, 1), (1,), (1, 1)),
        op,
        lambda: f"b_scale must be [N] = [{n}], [N, 1] or [1], got {tuple(b_scale.shape)}",
    )
    tensors = [("b", b), ("a_scale", a_scale), ("b_scale", b_scale)]
    if bias is not None:
        _check(
            bias.dtype in (torch.float32, out_dtype),
            op,
            lambda: f"bias must be float32 or out_dtype ({out_dtype}), got {bias.dtype}",
        )
        _check(tuple(bias.shape) == (n,), op, lambda: f"bias must be [N] = [{n}], got {tuple(bias.shape)}")
        tensors.append(("bias", bias))
    for name, t in tensors:
        _check(t.device == a.device, op, lambda: f"{name} must be on {a.device} like a, got {t.device}")
    if backend == "reference":
        return
    # Kernel backends read rows with unit inner stride; outer strides are honoured.
    for name, t in (("a", a), ("b", b)):
        _check(
            t.stride(1) == 1 or t.shape[1] <= 1,
            op,
            lambda: f"backend={backend!r} needs {name} with unit stride along K, got strides {tuple(t.stride())}; "
            "call .contiguous() first",
        )
    for name, t in (("a_scale", a_scale), ("b_scale", b_scale)):
        _check(t.is_contiguous(), op, lambda: f"backend={backend!r} needs a contiguous {name}, got strides {tuple(t.stride())}")
    if bias is not None:
        _check(bias.is_contiguous(), op, lambda: f"backend={backend!r} needs a contiguous bias, got strides {tuple(bias.stride())}")
    if backend in CUTLASS_BACKENDS:
        _check(
            out_dtype in CUTLASS_OUT_DTYPES,
            op,
            lambda: f"backend={backend!r} writes {CUTLASS_OUT_DTYPES}, got out_dtype={out_dtype}",
        )
        _check(
            k % CUTLASS_K_MULTIPLE == 0,
            op,
            lambda: f"backend={backend!r} needs K % {CUTLASS_K_MULTIPLE} == 0 (16-byte TMA rows), got K = {k}",
        )
        _check(
            n % CUTLASS_N_MULTIPLE == 0,
            op,
            lambda: f"backend={backend!r} needs N % {CUTLASS_N_MULTIPLE} == 0 (16-byte TMA rows of the output), got N = {n}",
        )


SCHEDULERS = ("auto", "persistent", "streamk")
# The CUTLASS kernels split K in 128-wide tiles: at most one split per tile.
SPLIT_K_TILE = 128


def check_split(op: str, split_k, scheduler, backend: str | None, k=None) -> None:
    """split_k / scheduler: the K-split controls of the CUTLASS backend.

    split_k None (heuristic), 1 (no split) or n > 1 (n splits, scheduler "auto" only);
    scheduler "auto", "persistent" (data-parallel) or "streamk". The Triton and reference
    kernels never split K: asking them by name for a split is an error, while a layer
    whose backend is chosen automatically simply runs unsplit there.
    """
    _check(
        split_k is None or (isinstance(split_k, int) and not isinstance(split_k, bool) and split_k >= 1),
        op,
        lambda: f"split_k must be None (heuristic) or an int >= 1, got {split_k!r}",
    )
    _check(scheduler in SCHEDULERS, op, lambda: f"scheduler must be one of {SCHEDULERS}, got {scheduler!r}")
    splits = split_k is not None and split_k > 1
    _check(
        not (splits and scheduler != "auto"),
        op,
        lambda: f"split_k={split_k} needs scheduler='auto' (got {scheduler!r}: 'persistent' never splits K, "
        "'streamk' balances K by itself)",
    )
    if k is not None and split_k is not None:
        k_tiles = max(1, -(-k // SPLIT_K_TILE))
        _check(
            split_k <= k_tiles,
            op,
            lambda: f"split_k must be at most {k_tiles} (one split per {SPLIT_K_TILE}-wide K tile, K = {k}), got {split_k}",
        )
    _check(
        backend in (None, "cutlass") or not (splits or scheduler == "streamk"),
        op,
        lambda: f"backend={backend!r} does not split K; split_k={split_k!r}, scheduler={scheduler!r} "
        "are options of backend='cutlass'",
    )


def check_linear_input(op: str, x: torch.Tensor, in_features: int, weight: torch.Tensor) -> None:
    """W8A8Linear's input: [..., in_features], a float dtype (the output's), on the weight's device.
    One test on the hot path (a decode step's host time), the itemized checks on failure."""
    if (
        isinstance(x, torch.Tensor)
        and x.dim() >= 1
        and x.shape[-1] == in_features
        and x.dtype in FLOAT_DTYPES
        and x.device == weight.device
    ):
        return
    check_tensor(op, "x", x)
    _check(
        x.dim() >= 1 and x.shape[-1] == in_features,
        op,
        lambda: f"expected input [..., {in_features}], got shape {tuple(x.shape)}",
    )
    _check(x.dtype in FLOAT_DTYPES, op, lambda: f"x must be one of {FLOAT_DTYPES} (the output dtype), got {x.dtype}")
    _check(
        x.device == weight.device,
        op,
        lambda: f"x must be on {weight.device} (where the layer's weight is), got {x.device}",
    )


def cutlass_shape_reason(k: int, n: int, out_dtype: torch.dtype) -> str | None:
    """Why the CUTLASS kernels cannot take this shape (None if they can)."""
    if out_dtype not in CUTLASS_OUT_DTYPES:
        return f"out_dtype {out_dtype} (CUTLASS writes bf16/fp16)"
    if k % CUTLASS_K_MULTIPLE:
        return f"K = {k} is not a multiple of {CUTLASS_K_MULTIPLE}"
    if n % CUTLASS_N_MULTIPLE:
        return f"N = {n} is not a multiple of {CUTLASS_N_MULTIPLE}"
    return None


def cutlass_operand_reason(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype) -> str | None:
    """Why the CUTLASS kernels cannot take these operands, which Triton can (None if they can):
    the shape rules of ``cutlass_shape_reason`` plus the 16-byte rules (TMA, cp.async) on a's
    and b's data pointers and row strides: a view offset by one element, a row stride not a
    multiple of 16 or shorter than K (a single row's pitch is not used). Operands that no
    backend takes (not 2-D tensors, K-strided) give None: ``check_scaled_mm`` refuses those
    with its own message. Under torch.compile a traced tensor has no address: there the
    pointers count as aligned, and a misaligned view that reaches the CUTLASS op is refused
    by its binding, with the address in the message."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() == 2 and b.dim() == 2):
        return None
    m, k = a.shape
    n = b.shape[0]
    reason = cutlass_shape_reason(k, n, out_dtype)
    if reason is not None or k == 0 or m == 0 or n == 0:
        return reason  # (no kernel runs for an empty problem: the binding returns it)
    sa, sb = a.stride(), b.stride()
    if sa[1] != 1 or sb[1] != 1:
        return None  # K-strided: refused by every kernel backend
    if not torch.compiler.is_compiling():
        for name, t in (("a", a), ("b", b)):
            if t.data_ptr() % 16:
                return f"{name}'s data pointer off the 16-byte grid (storage offset {t.storage_offset()})"
    for name, t, pitch in (("a", a, sa[0]), ("b", b, sb[0])):
        if (pitch < k or pitch % CUTLASS_K_MULTIPLE) and t.shape[0] != 1:
            return f"{name}'s row stride {pitch} (16-byte rows need a multiple of {CUTLASS_K_MULTIPLE} that is >= K = {k})"
    return None
