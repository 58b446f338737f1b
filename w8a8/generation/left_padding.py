"""Batches of prompts of different lengths for the Generator: left padding and its masks.

``generate(input_ids, attention_mask=...)`` takes transformers' left padding: ``attention_mask``
[B, P] holds 1 for a prompt token and 0 for padding, every 0 of a row before its first 1 (what a
tokenizer with ``padding_side="left"`` gives). Row b has ``pad_b`` padding positions; every row's
tokens sit at the same cache positions (the static cache is shared), so a row's token at cache
position c has the rotary position ``c - pad_b``, the position it has in the row alone. Each
step's attention then sees exactly that row's own keys:

* the prompt: query q may read key k when ``pad_b <= k <= q``; a padding query reads only
  itself (a row of the mask is never empty, so no NaN reaches the cache through it);
  ``position_ids`` = ``max(q - pad_b, 0)``;
* a decode step at cache position c: key k when ``pad_b <= k <= c``; ``position_ids`` = ``c - pad_b``.

The masks are 4-D, which transformers' mask functions hand to the attention unchanged: bool
(True: attend) for SDPA (the steps' ATTENTION, and its decode kernel), additive in the model's
dtype (0 or the dtype's minimum) for transformers' "eager" attention, which adds the mask to
its scores. A batch without padding (every mask value 1, or no mask) runs as before, bit for bit.
"""
from __future__ import annotations

import torch

from w8a8.generation.stops import _error


def check(attention_mask, input_ids: torch.Tensor) -> torch.Tensor | None:
    """``pad_b`` [B, 1] (int64, on input_ids' device) of a left-padded ``attention_mask``, or None
    when no row is padded (or no mask is given). Raises ValueError, naming ``attention_mask``,
    for a mask of another shape or device, values other than 0 / 1, or a row that is not left
    padding (a 0 after a 1, or no token at all). One read of the mask on the host."""
    if attention_mask is None:
        return None
    if not torch.is_tensor(attention_mask):
        raise _error("attention_mask", "be a tensor [batch, prompt] like input_ids", type(attention_mask).__name__)
    if attention_mask.shape != input_ids.shape or attention_mask.device != input_ids.device:
        raise _error("attention_mask", f"be [batch, prompt] = {list(input_ids.shape)} on {input_ids.device} like "
                     "input_ids", f"{list(attention_mask.shape)} on {attention_mask.device}")
    if attention_mask.dtype.is_floating_point or attention_mask.dtype.is_complex:
        raise _error("attention_mask", "be bool or integer (1: a prompt token, 0: padding)", attention_mask.dtype)
    values = attention_mask.to(device="cpu", dtype=torch.long)
    if not bool(((values == 0) | (values == 1)).all()):
        raise _error("attention_mask", "be 0 (padding) or 1 (a prompt token)", f"values {values.unique().tolist()}")
    rows = values.shape[1]
    pads = rows - values.sum(dim=1)
    # left padding: row b is pad_b zeros, then ones
    expected = torch.arange(rows).unsqueeze(0) >= pads.unsqueeze(1)
    bad = (values.bool() != expected).any(dim=1) | (pads == rows)
    if bool(bad.any()):
        row = int(bad.nonzero()[0])
        raise ValueError(f"w8a8.Generator.generate: attention_mask must be left padding (each row's zeros before its first 1, and at least one 1): row {row} "
                         f"is {values[row].tolist()}; pad on the left (a tokenizer's padding_side='left')")
    if not bool(pads.any()):
        return None
    return pads.to(input_ids.device).unsqueeze(1)


def mask_values(allowed: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """``allowed`` as the attention takes it: bool (``dtype`` None) or additive in ``dtype``."""
    if dtype is None:
        return allowed
    return torch.zeros_like(allowed, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)


def prompt_inputs(pads: torch.Tensor, prompt: int, cache_len: int, dtype: torch.dtype | None) -> dict:
    """``position_ids`` [B, P] and ``attention_mask`` [B, 1, P, cache_len] of a left-padded prompt."""
    device = pads.device
    q = torch.arange(prompt, device=device).view(1, prompt, 1)
    k = torch.arange(cache_len, device=device).view(1, 1, cache_len)
    pad = pads.view(-1, 1, 1)
    allowed = ((k >= pad) & (k <= q)) | ((k == q) & (q < pad))
    positions = (q.view(1, prompt) - pads).clamp(min=0)
    return {"position_ids": positions, "attention_mask": mask_values(allowed.unsqueeze(1), dtype)}


def step_inputs(pads: torch.Tensor, position: torch.Tensor, key_index: torch.Tensor, mask: torch.Tensor) -> dict:
    """A decode step's ``position_ids`` [B, 1] and ``attention_mask`` (``mask`` [B, 1, 1, L],
    rewritten in place: the step's graph reads the same buffer every replay) at cache position
    ``position`` [1, 1]; nothing is read on the host."""
    allowed = (key_index >= pads) & (key_index <= position)  # [B, L]
    mask.copy_(mask_values(allowed, None if mask.dtype == torch.bool else mask.dtype).view(mask.shape))
    return {"position_ids": position - pads, "attention_mask": mask}
