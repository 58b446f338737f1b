"""Exact reference implementations of the w8a8 math.

This file states the math once. Every other backend (CUTLASS, Triton) is
checked against it, and it is also the CPU implementation of the ops.

Quantization (symmetric, per token)::

    scale[r] = amax(|x[r, :]|) / 127                  (fp32, correctly rounded)
    q[r, k]  = clamp(rint(x[r, k] / scale[r]), -128, 127)   (rint: half to even)

    * an all-zero row gives q = 0 and scale = 0;
    * a row holding any Inf or NaN gives q = 0 and scale = NaN, so every output
      of that row downstream is NaN (never finite garbage).

Static quantization (per tensor)::

    q = clamp(rint(x / scale) + zero_point, -128, 127)
    (+-Inf saturate to 127 / -128; NaN, which int8 cannot carry, becomes zero_point)

Scaled matmul::

    acc = a @ b^T                        exact, int32 (a int8 [M, K], b int8 [N, K])
    out = a_scale * (b_scale^T * fp32(acc)) + bias      in fp32, one rounding to out_dtype

All fp32 divisions are IEEE round-to-nearest; kernels must give the same quotients to be
bit-identical: a division rounded to nearest (Triton: ``tl.math.div_rn``), or arithmetic
proven to equal it (the quantizers' corrected reciprocal products).

Fused producers + quantization: the per-token quantizer fused into what computes its
input in a Llama block, RMSNorm (with or without the residual add) and the MLP's
SiLU(gate) * up, in the model dtype ``dt = x.dtype`` (fp16, bf16 or fp32), as Hugging Face
transformers' ``LlamaRMSNorm`` and ``LlamaMLP`` compute them (bit for bit on the CPU)::

    s      = x                                       (rms_norm_quant)
    s      = (x.float() + residual.float()).to(dt)   (add_rms_norm_quant; output ``sum`` = s, the new residual)
    var    = mean(s.float()**2, last dim)            fp32
    n      = (s.float() * rsqrt(var + eps)).to(dt)   first rounding to dt
    normed = (weight.float() * n.float()).to(dt)     second rounding (transformers: weight * n)
    codes, scales = quantize_per_token(normed)

    a      = silu(gate.float()).to(dt)               silu(g) = g / (1 + exp(-g))
    p      = (a.float() * up.float()).to(dt)
    codes, scales = quantize_per_token(p)

``mean``, ``rsqrt`` and ``silu`` are torch's, as transformers calls them: torch's summation
order, and (on the CPU) an rsqrt and an exp within 1 ulp of fp32, not correctly rounded.
Kernels round exactly where the reference rounds, so their codes and scales are
bit-identical to ``quantize_per_token`` of their own normed / p; normed and p themselves
can differ in the last place where those three functions do (``w8a8.triton.fused_common``).
"""
from __future__ import annotations

import torch

QMIN, QMAX = -128, 127
# Symmetric per-token/per-channel scales map amax to this code: with it only
# -127..127 occur, but weights written by other tools may hold -128.
SYMMETRIC_QMAX = 127.0


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference per-token symmetric quantization. See the module docstring."""
    return quantize_with_row_stats(x, per_token_row_stats(x))


def per_token_row_stats(x: torch.Tensor) -> torch.Tensor:
    """What a row's per-token scale is derived from: fp32 [..., 1], the amax of |x| over
    the row, or +Inf where the row holds any Inf/NaN. The MAX of the stats of a row's
    K-slices is the stats of the whole row (tensor parallelism reduces it so)."""
    xf = x.float()
    finite_row = torch.isfinite(xf).all(dim=-1, keepdim=True)
    amax = xf.abs().nan_to_num(0.0, 0.0, 0.0).amax(dim=-1, keepdim=True)
    return torch.where(finite_row, amax, torch.full_like(amax, float("inf")))


def quantize_with_row_stats(x: torch.Tensor, stats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q int8, scale fp32 [..., 1]) of x [..., K] from its rows' ``per_token_row_stats``."""
    xf = x.float()
    finite_row = torch.isfinite(stats)
    amax = torch.where(finite_row, stats, torch.zeros_like(stats))
    # Divide by a tensor, not a Python scalar: torch's CUDA division by a scalar multiplies
    # by its reciprocal, which is not the correctly rounded quotient.
    scale = torch.where(finite_row, amax / torch.full_like(amax, SYMMETRIC_QMAX), torch.full_like(amax, float("nan")))
    # Zero rows (scale 0) and non-finite rows quantize to 0.
    quantizable = finite_row & (amax > 0)
    safe = torch.where(quantizable, scale, torch.ones_like(scale))
    q = torch.round(xf / safe).clamp_(QMIN, QMAX)
    q = torch.where(quantizable, q, torch.zeros_like(q))
    return q.to(torch.int8), scale


def quantize_static(
    x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None = None
) -> torch.Tensor:
    """Reference per-tensor static quantization. See the module docstring."""
    xf = x.float().contiguous()  # the codes are contiguous whatever x's strides (as every kernel writes them)
    q = torch.round(xf / scale.float().reshape(()))
    q = q.nan_to_num(0.0, posinf=float(QMAX) * 4, neginf=float(QMIN) * 4)
    if zero_point is not None:
        q = q + zero_point.float().reshape(())
    return q.clamp_(QMIN, QMAX).to(torch.int8)


def int_mm_exact(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b^T for int8 a [M, K], b [N, K], exact, as int32.

    float64 holds every partial sum exactly (|sum| <= 2**14 * K < 2**53), so the
    fast float64 matmul is an exact integer matmul on any device.
    """
    return (a.double() @ b.double().t()).to(torch.int32)


def scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """Reference scaled int8 matmul. See the module docstring."""
    return dequantize(int_mm_exact(a, b), a_scale, b_scale, bias, out_dtype)


def dequantize(
    acc: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """The epilogue of ``scaled_mm`` on an exact int32 ``acc`` [M, N]: elementwise torch ops,
    each rounded once (never fused), so on any device it gives the CUTLASS kernels' bits."""
    acc = acc.float()
    m, n = acc.shape
    out = a_scale.float().reshape(-1, 1).expand(m, 1) * (b_scale.float().reshape(1, -1) * acc)
    if bias is not None:
        out = out + bias.float().reshape(1, n)
    return out.to(out_dtype)


def quantize_weight_per_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel weight quantization: (int8 [N, K], fp32 [N]).

    The same rule as ``quantize_per_token`` applied to the rows of ``w``.
    """
    q, scale = quantize_per_token(w.detach())
    return q, scale.reshape(-1)


def rms_norm(s: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``normed`` of the module docstring: LlamaRMSNorm of s [..., K] with weight [K], in s's dtype."""
    return rms_norm_at(s, weight, rms_rstd(s, eps))


def rms_rstd(s: torch.Tensor, eps: float) -> torch.Tensor:
    """``rsqrt(var + eps)`` of the module docstring: fp32 [..., 1], torch's mean and rsqrt."""
    return torch.rsqrt(s.float().pow(2).mean(-1, keepdim=True) + eps)


def rms_norm_at(s: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor) -> torch.Tensor:
    """``normed`` of s at the given fp32 1 / rms [..., 1]: the two roundings to s's dtype."""
    dt = s.dtype
    n = (s.float() * rstd).to(dt)
    return (weight.float() * n.float()).to(dt)


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``p`` of the module docstring: LlamaMLP's SiLU(gate) * up, in gate's dtype.

    SiLU runs on a contiguous gate in its own dtype, as transformers runs it on the output
    of gate_proj: on the CPU torch's SiLU rounds the elements its vector loop leaves over
    (a row's tail, for a strided gate such as a column half of a merged GEMM's output)
    through another exp, and the result must not depend on the gate's strides."""
    dt = gate.dtype
    a = torch.nn.functional.silu(gate.contiguous())
    return (a.float() * up.float()).to(dt)


def rms_norm_quant(
    x: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(codes, scales, normed) of x [..., K]; all contiguous. See the module docstring."""
    normed = rms_norm(x.contiguous(), weight, eps)
    return (*quantize_per_token(normed), normed)


def add_rms_norm_quant(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(codes, scales, normed, sum) of x + residual [..., K]; all contiguous. See the module docstring."""
    s = (x.float() + residual.float()).to(x.dtype).contiguous()
    normed = rms_norm(s, weight, eps)
    return (*quantize_per_token(normed), normed, s)


def silu_mul_quant(gate: torch.Tensor, up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes, scales) of SiLU(gate) * up [..., F]; codes contiguous. See the module docstring."""
    return quantize_per_token(silu_mul(gate, up).contiguous())
