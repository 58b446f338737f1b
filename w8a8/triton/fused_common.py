"""What the two fused producer + quantization kernels share: the rounding to the model dtype,
the interpreter switch and the host's output allocation. The kernels are ``norm_quant.py``
(RMSNorm, with or without the residual add) and ``silu_quant.py`` (SiLU(gate) * up), each the
per-token quantizer of ``quant.py`` behind an elementwise prologue, with its helpers and its
launch shapes (``quant_configs.fused_config``) [evidence quant.fused-config]; their tests are
``tests/ops/test_fused_quant.py`` and ``tests/kernels/test_fused_quant_kernels.py``.

The math is ``w8a8.reference`` (``rms_norm_quant``, ``add_rms_norm_quant``,
``silu_mul_quant``), in the model dtype ``dt`` with fp32 inside and the reference's roundings
to dt::

    s      = x, or dt(x + residual)                        (stored: sum)
    normed = dt(weight * dt(s * rstd)),  rstd = div_rn(1, sqrt_rn(mean(s**2) + eps))
    p      = dt(dt(silu(gate)) * up),    silu(g) = div_rn(g, 1 + exp(-g))
    codes, scales = quantize_per_token(normed or p)        (quant.py's helpers)

Exactness common to both (each kernel's module states the rest):

* codes and scales are bit-identical to ``reference.quantize_per_token`` of the kernel's
  own normed / p: the same helpers as ``quant.py`` (IEEE division, the rint magic,
  non-finite detection) on the dt values.
* Triton's default FMA contraction (seen in the sm_90 PTX) fuses only the sum of squares
  and exp's reduction, never an operation whose rounding the reference states (the FMAs
  of the SiLU kernel's reciprocal quantizer are explicit ``tl.fma``: one rounding in the
  interpreter too).
* Rounding to bf16 is integer round-to-nearest-even on the fp32 bits (torch's own
  algorithm) in the norm and wherever the interpreter runs the kernels: its fp32 -> bf16
  casts truncate, and this way the CPU tests run the expression the GPU runs. SiLU-mul
  rounds with cvt.rn on the GPU (the same values: the tests compare it with the integer
  rounding over every gate value). fp16 casts round to nearest even everywhere.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from w8a8 import padding

_INF = tl.constexpr(float("inf"))


def _interpreting() -> bool:
    """Whether Triton runs its kernels in the interpreter (decided, as Triton decides it, when
    this module's kernels are decorated)."""
    try:
        return bool(triton.knobs.runtime.interpret)
    except AttributeError:  # a Triton without knobs
        return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


# The interpreter truncates fp32 -> bf16 casts (the GPU's cvt.rn rounds to nearest even), so
# under it the kernels round with ``_round_to``'s integer expression instead (same values).
_INTERPRET = tl.constexpr(_interpreting())


# --- device helpers --------------------------------------------------------------------------


@triton.jit
def _round_to(v, DT: tl.constexpr):
    """fp32 v rounded to DT (nearest even) and returned as fp32: the value that casting to
    DT and back gives on the GPU, in the interpreter too."""
    if DT == tl.bfloat16:
        bits = v.to(tl.int32, bitcast=True)
        bits = (bits + (0x7FFF + ((bits >> 16) & 1))) & -65536
        return tl.where(v == v, bits.to(tl.float32, bitcast=True), _INF - _INF)  # NaN stays NaN
    elif DT == tl.float16:
        return v.to(tl.float16).to(tl.float32)
    else:
        return v


@triton.jit
def _stored(v, DT: tl.constexpr):
    """v (fp32 holding DT values: ``_to_dt``'s or ``_round_to``'s) as the DT tensor a store
    writes. The interpreter converts fp32 subnormals to bf16 wrongly (Triton 3.9: -9.28e-39
    is written as -6.80e-39), so there the bf16 values are built from v's bits."""
    if _INTERPRET and DT == tl.bfloat16:
        return ((v.to(tl.int32, bitcast=True) >> 16) & 0xFFFF).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return v.to(DT)


@triton.jit
def _to_dt(v, DT: tl.constexpr):
    """fp32 v rounded to DT (nearest even). On the GPU a DT tensor (cvt.rn: one instruction,
    where ``_round_to``'s integer expression for bf16 takes six); in the interpreter, whose
    fp32 -> bf16 casts truncate, the same values as fp32 (``_round_to``). ``.to(tl.float32)``
    of either is the rounded value."""
    if DT == tl.bfloat16:
        if _INTERPRET:
            return _round_to(v, DT)
        else:
            return v.to(tl.bfloat16)
    elif DT == tl.float16:
        return v.to(tl.float16)
    else:
        return v


def _outputs(x: torch.Tensor, n_float: int) -> tuple[torch.Tensor, ...]:
    """The outputs, uninitialized: codes int8 [..., K], scales fp32 [..., 1] (their storage
    row-padded for the sm90 GEMM, ``w8a8.padding``), then ``n_float`` [..., K] tensors of x's
    dtype (normed, sum), all contiguous. (Tests poison them here.)"""
    return padding.empty_outputs(x.shape, x.dtype, n_float, x.device)
