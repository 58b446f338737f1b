"""What the Generator's steps swap into the model while they run (``Generator._steps`` in
``generator.py`` installs and restores them): the attention implementation ATTENTION (transformers'
SDPA except one-token queries: ``kernels.decode_attention`` over the running slot's cache, or SDPA
with the query heads of each KV head packed as rows), ``_FusedRope`` for a modeling module's
``apply_rotary_pos_emb`` and ``_fused_update`` for a StaticCache layer's ``update`` (one launch
each of ``kernels.rope`` and ``kernels.cache_write``). ``ACTIVE`` holds the slot whose step is
running: the swapped functions read its cache and whether it runs the kernels."""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F


# The attention implementation the Generator's steps run (registered with transformers on first use).
ATTENTION = "w8a8_sdpa"
# The slot whose step is running (set by Generator._steps): its cache gives the decode
# kernel the number of filled positions. None outside a step.
ACTIVE = None  # a generator._Slot while its step runs


def _sdpa_packed_gqa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """transformers' SDPA attention, except one-token queries (module docstring)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    one_token = (query.shape[2] == 1 and not dropout and kwargs.get("position_bias") is None
                 and kwargs.get("softcap") is None and kwargs.get("s_aux") is None)
    layer = _decode_layer(module, key) if one_token else None
    if layer is not None and triton_generation().decode_attention_supported(query, key, value, attention_mask):
        return triton_generation().decode_attention(query, key, value, attention_mask, layer.cumulative_length,
                                                    scaling), None
    if not one_token or groups == 1 or (attention_mask is not None and attention_mask.shape[1] != 1):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    batch, heads, _, dim = query.shape
    out = F.scaled_dot_product_attention(query.reshape(batch, heads // groups, groups, dim), key, value,
                                         attn_mask=attention_mask, scale=scaling)
    return out.reshape(batch, heads, 1, value.shape[-1]).transpose(1, 2).contiguous(), None


def _decode_layer(module, key: torch.Tensor):
    """The running slot's cache layer whose keys ``key`` is, when the slot runs the kernels."""
    slot = ACTIVE
    if slot is None or not slot.kernels:
        return None
    layers = getattr(slot.cache, "layers", ())
    index = getattr(module, "layer_idx", None)
    if index is None or not 0 <= index < len(layers):
        return None
    layer = layers[index]
    return layer if getattr(layer, "keys", None) is key and torch.is_tensor(layer.cumulative_length) else None


def triton_generation():
    """w8a8.generation.kernels (imported on first use: Triton is not needed without the kernels)."""
    from w8a8.generation import kernels

    return kernels


class _FusedRope:
    """Stands in for a modeling module's ``apply_rotary_pos_emb`` during the steps of a slot
    that runs the kernels: one launch of ``w8a8.generation.kernels.rope`` instead of the
    function's ten. Checked once against the function it replaces, on the first call it
    takes (the outputs must be equal, bit for bit); if they differ, the function stays."""

    checked: dict = {}  # original function -> True (equal) / False (differs, not replaced)

    def __init__(self, original) -> None:
        self.original = original

    def __call__(self, q, k, cos, sin, *args, **kwargs):
        kernels = triton_generation()
        slot = ACTIVE
        if (slot is None or not slot.kernels or args or kwargs or self.checked.get(self.original) is False
                or not kernels.rope_supported(q, k, cos, sin)):
            return self.original(q, k, cos, sin, *args, **kwargs)
        out = kernels.rope(q, k, cos, sin)
        if self.original not in self.checked:  # the first call: outside any graph capture (warm-up or eager)
            expected = self.original(q, k, cos, sin)
            self.checked[self.original] = same = all(torch.equal(a, b) for a, b in zip(out, expected))
            if not same:
                warnings.warn(f"w8a8.Generator: {self.original.__module__}.apply_rotary_pos_emb does not match "
                              "the fused rotary kernel; keeping the model's own", stacklevel=2)
                return expected
        return out


def _fused_update(layer):
    """A StaticCache layer's ``update`` as one ``cache_write`` launch and the length's add_
    (transformers: arange, add, add_ and two index_copy_); its first call (which allocates
    the layer) and anything the kernel does not take go to the layer's own."""
    original = layer.update

    def update(key_states, value_states, *args, **kwargs):
        kernels = triton_generation()
        if (not getattr(layer, "is_initialized", False) or not torch.is_tensor(layer.cumulative_length)
                or not kernels.cache_write_supported(layer.keys, layer.values, key_states, value_states)):
            return original(key_states, value_states, *args, **kwargs)
        kernels.cache_write(layer.keys, layer.values, key_states, value_states, layer.cumulative_length)
        layer.cumulative_length.add_(key_states.shape[-2])
        return layer.keys, layer.values

    return update


def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(ATTENTION, _sdpa_packed_gqa)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, sdpa_mask)
