"""What the Generator reads from, and requires of, a transformers causal LM: the attention
implementations its steps run, the keyword its forward takes the cache by, the number of logits
a step gives, and the refusal of a model the steps cannot run."""
from __future__ import annotations

import inspect

from torch import nn

# The attention implementations the steps run: "sdpa" (swapped for ATTENTION) and transformers' "eager".
# Others (flash, flex, paged) are refused: the steps' static cache and graph capture were never run
# with them, and their static-cache paths are transformers' own, not this module's.
SUPPORTED_ATTENTION = ("sdpa", "eager")


def _cache_keyword(model: nn.Module) -> str:
    """The keyword the model's forward takes its cache by: ``cache`` (transformers >= 5.24, the
    supported range), ``past_key_values`` where the forward names only that (earlier 5.x, whose
    ``cache=`` would land unread in its kwargs)."""
    params = inspect.signature(model.forward).parameters
    return "past_key_values" if "cache" not in params and "past_key_values" in params else "cache"


def _check_model(model: nn.Module) -> None:
    """Refuse, naming what is wrong, a model the steps cannot run: not a transformers decoder-only
    causal LM with an output head, or an attention implementation not in SUPPORTED_ATTENTION."""
    config = getattr(model, "config", None)
    name = type(model).__name__
    head = getattr(model, "get_output_embeddings", None)
    if not isinstance(model, nn.Module) or config is None or not callable(head):
        raise ValueError(f"w8a8.Generator: model must be a transformers causal LM (LlamaForCausalLM and the like), "
                         f"got {name}, which has no config or get_output_embeddings")
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"w8a8.Generator: model must be a decoder-only causal LM, got {name} "
                         "(config.is_encoder_decoder=True)")
    if head() is None:
        raise ValueError(f"w8a8.Generator: model must be a causal LM with an output head (a ...ForCausalLM), got "
                         f"{name}, whose get_output_embeddings() is None: pass the causal LM, not its base model")
    attention = getattr(config, "_attn_implementation", None)
    if attention not in SUPPORTED_ATTENTION:
        raise ValueError(f"w8a8.Generator: model.config._attn_implementation must be one of "
                         f"{', '.join(map(repr, SUPPORTED_ATTENTION))}, got {attention!r} (load the model with "
                         "attn_implementation=\"sdpa\", or call model.set_attn_implementation(\"sdpa\"))")


def _vocab_size(model: nn.Module) -> int | None:
    """The number of logits a step gives (the output head's rows), else ``config.vocab_size``."""
    head = model.get_output_embeddings()
    rows = getattr(head, "out_features", None) or getattr(head, "num_embeddings", None)
    return rows if isinstance(rows, int) else getattr(model.config, "vocab_size", None)
