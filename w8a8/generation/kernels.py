"""Triton kernels of the Generator's steps (w8a8/generation/generator.py): the rotary embedding, the
static-cache write and split-KV decode attention.

In an eager transformers step these are many small launches per layer (rotate_half's
slices, neg and cat, four products and two sums; arange, add, add_ and two index_copy_
for the cache) and one attention kernel that runs one CTA per (batch row, KV head) over the
whole static cache, masked. Here each is one launch (attention: two).

rope(q, k, cos, sin) -> (q', k')
    x' = x * cos + rotate_half(x) * sin,  rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])
    in fp16 / bf16 with each product rounded to x's dtype and then the sum rounded, as
    transformers' ``apply_rotary_pos_emb`` computes it: the same bits. The kernel is
    compiled without floating-point contraction: Triton otherwise lowers the expression to
    half-precision multiplies and an ``fma``, one rounding fewer than torch (1 ulp apart in
    a quarter of the elements on the H100). Without it the multiplies and the add are
    ``mul.rn`` / ``add.rn`` in the input's dtype: a product of two half-precision numbers
    is exact in fp32, so rounding it once is what torch's fp32 arithmetic does, and the
    sum's single rounding equals torch's fp32-then-half double rounding for two operands
    of the same half-precision type.

cache_write(keys, values, k, v, start)
    keys[:, :, start + s] = k[:, :, s] and values likewise, ``start`` a 0-d int64 tensor
    on the device (a StaticCache layer's ``cumulative_length``); positions at or past the
    cache's length are not written.

decode_attention(q, keys, values, mask, length, scale) -> [B, 1, H, D]
    out[b, 0, h] = softmax_j(q[b, h, 0] . keys[b, h // G, j] * scale) values[b, h // G, j]
    over the keys j < length (a 0-d int64 tensor on the device) that ``mask[b, 0, 0, j]``
    allows, G = H / H_kv query heads per KV head. The keys are cut into NUM_SPLITS
    slices, one program per (b, KV head, slice) holding the G query rows of that KV head
    (each K/V tile read once for all of them) with an online softmax in fp32 (exp2, the
    scale folded into log2(e)); slices at or past ``length`` return at once. A second
    kernel combines the slices by their log-sum-exp and writes the output in the layout
    the attention's output projection reads. Probabilities go to the P.V product in the
    values' dtype, as flash attention does.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from w8a8.triton._launch import cdiv, launching

_HALF = (torch.float16, torch.bfloat16)
_LOG2E = 1.4426950408889634

# decode_attention's launch: keys per tile of its loop, and the programs it aims for (slices
# are cut so that batch x KV heads x slices reaches about PROGRAMS_PER_SM per SM, every SM
# streaming keys). Fastest or near it where the cache is large, where the read dominates the
# step. [evidence generation.decode-attention]
DECODE_BLOCK_N = 64
PROGRAMS_PER_SM = 2
DECODE_WARPS = 4
DECODE_STAGES = 2


# --- rope -----------------------------------------------------------------------------------


@triton.jit
def _rotate_heads(x_ptr, o_ptr, n_heads, sxh, sxd, soh, sod, c1, c2, s1, s2,
                  HALF: tl.constexpr, BLOCK_H: tl.constexpr):
    """x * cos + rotate_half(x) * sin for the heads of one token ([BLOCK_H, HALF] halves)."""
    h = tl.arange(0, BLOCK_H)[:, None]
    d = tl.arange(0, HALF)[None, :]
    ok = h < n_heads
    x1 = tl.load(x_ptr + h * sxh + d * sxd, mask=ok, other=0.0)
    x2 = tl.load(x_ptr + h * sxh + (d + HALF) * sxd, mask=ok, other=0.0)
    dt = x1.dtype
    x1f = x1.to(tl.float32)
    x2f = x2.to(tl.float32)
    # each product rounded to the input dtype, then the sum: torch's bf16 / fp16 arithmetic
    o1 = (x1f * c1).to(dt).to(tl.float32) + (-x2f * s1).to(dt).to(tl.float32)
    o2 = (x2f * c2).to(dt).to(tl.float32) + (x1f * s2).to(dt).to(tl.float32)
    tl.store(o_ptr + h * soh + d * sod, o1.to(dt), mask=ok)
    tl.store(o_ptr + h * soh + (d + HALF) * sod, o2.to(dt), mask=ok)


@triton.jit
def _rope_kernel(q_ptr, k_ptr, qo_ptr, ko_ptr, cos_ptr, sin_ptr, S, HQ, HK,
                 sqb, sqh, sqs, sqd, skb, skh, sks, skd,
                 soqb, soqh, soqs, soqd, sokb, sokh, soks, sokd, scb, scs, scd,
                 HALF: tl.constexpr, BLOCK_H: tl.constexpr):
    """One program per (token, q or k): every head of that token."""
    token = tl.program_id(0)
    b = token // S
    s = token % S
    d = tl.arange(0, HALF)[None, :]
    c = cos_ptr + b * scb + s * scs
    n = sin_ptr + b * scb + s * scs
    c1 = tl.load(c + d * scd).to(tl.float32)
    c2 = tl.load(c + (d + HALF) * scd).to(tl.float32)
    s1 = tl.load(n + d * scd).to(tl.float32)
    s2 = tl.load(n + (d + HALF) * scd).to(tl.float32)
    if tl.program_id(1) == 0:
        _rotate_heads(q_ptr + b * sqb + s * sqs, qo_ptr + b * soqb + s * soqs, HQ, sqh, sqd, soqh, soqd,
                      c1, c2, s1, s2, HALF, BLOCK_H)
    else:
        _rotate_heads(k_ptr + b * skb + s * sks, ko_ptr + b * sokb + s * soks, HK, skh, skd, sokh, sokd,
                      c1, c2, s1, s2, HALF, BLOCK_H)


def rope_supported(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Whether ``rope`` takes these: [B, H, S, D] q and k and [B or 1, S, D] cos and sin of one
    half-precision dtype on one device, D a power of two."""
    if q.dim() != 4 or k.dim() != 4 or cos.dim() != 3 or sin.shape != cos.shape:
        return False
    b, _, s, d = q.shape
    return (q.dtype in _HALF and k.dtype == cos.dtype == sin.dtype == q.dtype
            and k.shape[0] == b and k.shape[2:] == (s, d) and cos.shape[0] in (1, b) and cos.shape[1:] == (s, d)
            and d >= 16 and d & (d - 1) == 0 and sin.stride() == cos.stride()
            and len({t.device for t in (q, k, cos, sin)}) == 1)


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary embedding of q [B, H, S, D] and k [B, H_kv, S, D] (module docstring); the outputs
    keep the inputs' strides."""
    if not rope_supported(q, k, cos, sin):
        raise ValueError(f"w8a8 rope: expected q [B, H, S, D], k [B, H_kv, S, D], cos/sin [B or 1, S, D] of one "
                         f"fp16/bf16 dtype, D a power of two >= 16; got q {q.dtype} {list(q.shape)}, "
                         f"k {k.dtype} {list(k.shape)}, cos {cos.dtype} {list(cos.shape)}")
    b, hq, s, d = q.shape
    hk = k.shape[1]
    qo, ko = torch.empty_like(q), torch.empty_like(k)
    scb = 0 if cos.shape[0] == 1 else cos.stride(0)
    with launching(q):
        _rope_kernel[(b * s, 2)](q, k, qo, ko, cos, sin, s, hq, hk, *q.stride(), *k.stride(), *qo.stride(),
                                 *ko.stride(), scb, cos.stride(1), cos.stride(2),
                                 HALF=d // 2, BLOCK_H=triton.next_power_of_2(max(hq, hk)), num_warps=4,
                                 enable_fp_fusion=False)  # fused, x * cos + r * sin is one rounding, not torch's three
    return qo, ko


# --- cache_write ----------------------------------------------------------------------------


@triton.jit
def _cache_write_kernel(k_ptr, v_ptr, keys_ptr, values_ptr, start_ptr, S, H, L,
                        skb, skh, sks, skd, svb, svh, svs, svd, scb, sch, scs, scd,
                        D: tl.constexpr, BLOCK_H: tl.constexpr):
    """One program per token: its key and value rows of every KV head."""
    token = tl.program_id(0)
    b = token // S
    s = token % S
    pos = tl.load(start_ptr) + s
    h = tl.arange(0, BLOCK_H)[:, None]
    d = tl.arange(0, D)[None, :]
    ok = (h < tl.where(pos < L, H, 0)) & (d < D)  # past the cache's end: nothing written
    dst = b * scb + h * sch + pos * scs + d * scd
    tl.store(keys_ptr + dst, tl.load(k_ptr + b * skb + h * skh + s * sks + d * skd, mask=ok), mask=ok)
    tl.store(values_ptr + dst, tl.load(v_ptr + b * svb + h * svh + s * svs + d * svd, mask=ok), mask=ok)


def cache_write_supported(keys: torch.Tensor, values: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether ``cache_write`` takes these: [B, H_kv, L, D] caches of one layout, [B, H_kv, S, D]
    new states of their dtype and device, D a power of two."""
    return (keys.dim() == 4 and keys.shape == values.shape and keys.stride() == values.stride()
            and k.shape == v.shape and k.dim() == 4 and k.shape[:2] == keys.shape[:2] and k.shape[3] == keys.shape[3]
            and k.dtype == v.dtype == keys.dtype == values.dtype and keys.shape[3] & (keys.shape[3] - 1) == 0
            and len({t.device for t in (keys, values, k, v)}) == 1)


def cache_write(keys: torch.Tensor, values: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: torch.Tensor) -> None:
    """Write k, v [B, H_kv, S, D] into the caches at positions start.. (module docstring)."""
    if not cache_write_supported(keys, values, k, v) or start.numel() != 1 or start.device != keys.device:
        raise ValueError(f"w8a8 cache_write: expected caches [B, H_kv, L, D] and states [B, H_kv, S, D] of one dtype "
                         f"and device and a one-element start on it; got keys {keys.dtype} {list(keys.shape)}, "
                         f"k {k.dtype} {list(k.shape)}, start {list(start.shape)} on {start.device}")
    b, h, s, d = k.shape
    with launching(keys):
        _cache_write_kernel[(b * s,)](k, v, keys, values, start, s, h, keys.shape[2], *k.stride(), *v.stride(),
                                      *keys.stride(), D=d, BLOCK_H=triton.next_power_of_2(h), num_warps=4)


# --- decode_attention -----------------------------------------------------------------------


@triton.jit
def _decode_attention_kernel(q_ptr, k_ptr, v_ptr, mask_ptr, len_ptr, po_ptr, plse_ptr, HK, L, SPLIT, NUM_SPLITS,
                             qk_scale, sqb, sqh, sqd, skb, skh, skn, skd, svb, svh, svn, svd, smb, smn,
                             G: tl.constexpr, BLOCK_G: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr,
                             HAS_MASK: tl.constexpr):
    """One program per (batch row, KV head, slice of keys): the slice's normalised partial
    output and log2-sum-exp for the G query heads of that KV head."""
    bh = tl.program_id(0)
    split = tl.program_id(1)
    b = bh // HK
    hk = bh % HK
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, D)
    row = bh * G + g  # query head b * H + hk * G + g, as a row of the partial buffers
    start = split * SPLIT
    end = tl.minimum(tl.minimum(start + SPLIT, tl.load(len_ptr).to(tl.int32)), L)
    q = tl.load(q_ptr + b * sqb + (hk * G + g)[:, None] * sqh + d[None, :] * sqd, mask=(g < G)[:, None], other=0.0)
    m = tl.full([BLOCK_G], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, D], tl.float32)
    k_base = k_ptr + b * skb + hk * skh
    v_base = v_ptr + b * svb + hk * svh
    for n0 in range(start, end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        ok = n < end
        kt = tl.load(k_base + n[:, None] * skn + d[None, :] * skd, mask=ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(kt)) * qk_scale  # [BLOCK_G, BLOCK_N], log2 units
        if HAS_MASK:
            ok = ok & (tl.load(mask_ptr + b * smb + n * smn, mask=ok, other=0) != 0)
        s = tl.where(ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key allowed yet stays at zero
        alpha = tl.exp2(m - m_use)
        p = tl.exp2(s - m_use[:, None])
        total = total * alpha + tl.sum(p, axis=1)
        vt = tl.load(v_base + n[:, None] * svn + d[None, :] * svd, mask=ok[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt)
        m = m_new
    has = total > 0.0
    out = acc / tl.where(has, total, 1.0)[:, None]
    lse = tl.where(has, m + tl.log2(tl.where(has, total, 1.0)), float("-inf"))
    keep = g < G
    tl.store(po_ptr + (row * NUM_SPLITS + split)[:, None] * D + d[None, :], out, mask=keep[:, None])
    tl.store(plse_ptr + row * NUM_SPLITS + split, lse, mask=keep)


@triton.jit
def _decode_combine_kernel(po_ptr, plse_ptr, o_ptr, H, NUM_SPLITS, sob, soh, sod,
                           D: tl.constexpr, BLOCK_S: tl.constexpr):
    """One program per (batch row, query head): the slices weighted by their sum-exp."""
    row = tl.program_id(0)
    b = row // H
    h = row % H
    sp = tl.arange(0, BLOCK_S)
    d = tl.arange(0, D)
    lse = tl.load(plse_ptr + row * NUM_SPLITS + sp, mask=sp < NUM_SPLITS, other=float("-inf"))
    top = tl.max(lse, axis=0)
    w = tl.exp2(lse - tl.where(top == float("-inf"), 0.0, top))  # slices with no key: weight 0
    part = tl.load(po_ptr + (row * NUM_SPLITS + sp)[:, None] * D + d[None, :], mask=(lse > float("-inf"))[:, None],
                   other=0.0)
    out = tl.sum(w[:, None] * part, axis=0) / tl.sum(w, axis=0)
    tl.store(o_ptr + b * sob + h * soh + d * sod, out.to(o_ptr.dtype.element_ty))


def decode_attention_supported(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                               mask: torch.Tensor | None) -> bool:
    """Whether ``decode_attention`` takes these: a one-token q [B, H, 1, D], caches [B, H_kv, L, D]
    with H a multiple of H_kv, one half-precision dtype and device, D a power of two <= 256,
    and no mask or a bool one broadcastable as [B, 1, 1, L]."""
    if q.dim() != 4 or keys.dim() != 4 or values.shape != keys.shape or q.shape[2] != 1:
        return False
    b, h, _, d = q.shape
    if not (q.dtype in _HALF and keys.dtype == values.dtype == q.dtype and keys.shape[0] == b and keys.shape[3] == d
            and h % keys.shape[1] == 0 and 16 <= d <= 256 and d & (d - 1) == 0
            and len({t.device for t in (q, keys, values)}) == 1):
        return False
    return mask is None or (mask.dtype == torch.bool and mask.dim() == 4 and mask.shape[0] in (1, b)
                            and mask.shape[1:3] == (1, 1) and mask.shape[3] == keys.shape[2]
                            and mask.device == q.device)


def decode_splits(batch: int, kv_heads: int, cache_len: int, device: torch.device) -> int:
    """Keys per slice: enough slices that batch x kv_heads x slices fills the SMs PROGRAMS_PER_SM
    times, each a whole number of DECODE_BLOCK_N tiles."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1
    tiles = cdiv(cache_len, DECODE_BLOCK_N)
    slices = max(1, min(tiles, cdiv(PROGRAMS_PER_SM * sms, batch * kv_heads)))
    return cdiv(tiles, slices) * DECODE_BLOCK_N


def decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None,
                     length: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Attention of one-token queries over a static cache's first ``length`` keys (module
    docstring): [B, 1, H, D] in q's dtype."""
    if not decode_attention_supported(q, keys, values, mask) or length.numel() != 1 or length.device != q.device:
        raise ValueError(f"w8a8 decode_attention: expected q [B, H, 1, D], caches [B, H_kv, L, D] (H a multiple of "
                         f"H_kv) of one fp16/bf16 dtype, D a power of two in 16..256, a bool mask [B or 1, 1, 1, L] "
                         f"or None and a one-element length on q's device; got q {q.dtype} {list(q.shape)}, keys "
                         f"{keys.dtype} {list(keys.shape)}, mask {None if mask is None else (mask.dtype, list(mask.shape))}")
    b, h, _, d = q.shape
    hk, cache_len = keys.shape[1], keys.shape[2]
    group = h // hk
    split = decode_splits(b, hk, cache_len, q.device)
    slices = cdiv(cache_len, split)
    partial = torch.empty(b * h, slices, d, dtype=torch.float32, device=q.device)
    lse = torch.empty(b * h, slices, dtype=torch.float32, device=q.device)
    out = torch.empty(b, 1, h, d, dtype=q.dtype, device=q.device)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    mask_args = (mask, 0 if mask.shape[0] == 1 else mask.stride(0), mask.stride(3)) if mask is not None else (q, 0, 0)
    with launching(q):
        _decode_attention_kernel[(b * hk, slices)](
            q, keys, values, mask_args[0], length, partial, lse, hk, cache_len, split, slices, scale * _LOG2E,
            q.stride(0), q.stride(1), q.stride(3), *keys.stride(), *values.stride(), *mask_args[1:],
            G=group, BLOCK_G=max(16, triton.next_power_of_2(group)), D=d, BLOCK_N=DECODE_BLOCK_N,
            HAS_MASK=mask is not None, num_warps=DECODE_WARPS, num_stages=DECODE_STAGES)
        _decode_combine_kernel[(b * h,)](partial, lse, out, h, slices, out.stride(0), out.stride(2), out.stride(3),
                                         D=d, BLOCK_S=max(2, triton.next_power_of_2(slices)), num_warps=4)
    return out
