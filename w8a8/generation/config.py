"""transformers' ``GenerationConfig`` as ``Generator.generate``'s arguments.

``generate(input_ids, generation_config=config)`` (a ``transformers.GenerationConfig``, or the
model's ``model.generation_config``): the fields generate has an argument for (TAKEN) fill
the arguments the call leaves at their defaults; an argument the call gives wins, as in
transformers, and a field the config leaves unset (None) leaves the argument's default. With
``max_new_tokens`` unset in both: the config's ``max_length`` minus the prompt, as transformers
counts it; with neither set, a ValueError. The sampling fields are read only with
``do_sample``. A field of something generate does not do (beam search, the other penalties,
other filters: REFUSED) set to anything but its off value is refused, naming it.
"""
from __future__ import annotations

from w8a8.generation.stops import _error

# generate's arguments a GenerationConfig field of the same name fills
TAKEN = ("max_new_tokens", "eos_token_id", "pad_token_id", "stop_strings", "max_time", "do_sample",
         "repetition_penalty")
SAMPLING = ("temperature", "top_k", "top_p")  # read only when do_sample
# field -> its off value (None, transformers' unset, is off too): what generate does not do
REFUSED = {
    "num_beams": 1, "num_beam_groups": 1, "num_return_sequences": 1, "diversity_penalty": 0.0,
    "penalty_alpha": None, "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0, "bad_words_ids": None, "sequence_bias": None, "min_length": 0,
    "min_new_tokens": None, "min_p": None, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0,
    "suppress_tokens": None, "begin_suppress_tokens": None, "forced_bos_token_id": None,
    "forced_eos_token_id": None, "guidance_scale": None, "exponential_decay_length_penalty": None,
    "renormalize_logits": False,
}


def arguments(config, given: dict, defaults: dict, prompt: int) -> dict:
    """``given`` (generate's arguments by name) with the ones at their ``defaults`` filled from
    ``config``; raises ValueError for a REFUSED field that is on, or no positive token count."""
    prefix = "w8a8.Generator.generate: generation_config"
    if not all(hasattr(config, name) for name in TAKEN):
        raise _error("generation_config", "be a transformers GenerationConfig", type(config).__name__)
    for name, off in REFUSED.items():
        value = getattr(config, name, None)
        if value is not None and value != off and not (off is None and value in ((), [])):
            raise _error(f"generation_config.{name}", f"be {off!r}: generate does greedy and multinomial sampling "
                         "with a repetition penalty only (no beams, other penalties or other filters)", repr(value))
    out = dict(given)
    names = TAKEN + (SAMPLING if (given["do_sample"] if given["do_sample"] != defaults["do_sample"]
                                  else config.do_sample) else ())
    for name in names:
        if given[name] == defaults[name] and getattr(config, name, None) is not None:
            out[name] = getattr(config, name)
    if out["max_new_tokens"] is None:
        if getattr(config, "max_length", None) is None:
            raise ValueError(f"{prefix} sets neither max_new_tokens nor max_length: pass max_new_tokens")
        out["max_new_tokens"] = config.max_length - prompt
        if out["max_new_tokens"] < 1:
            raise ValueError(f"{prefix}.max_length ({config.max_length}) must exceed the prompt ({prompt} tokens) "
                             "when max_new_tokens is not set")
    return out
