"""What ends ``w8a8.Generator.generate`` early, and its streamer: checked on the host.

Per row, over its new tokens (the first one being the prompt's greedy token):

* ``eos_token_id`` (an id or several): the row ends at its first new token that is one of them;
* ``stop_strings`` (with ``tokenizer``): the row ends at its first new token ``t`` for which
  ``tokenizer.decode(new[: t + 1])`` (the text of the row's new tokens up to and including
  ``t``, the tokenizer's default decoding) contains one of the strings. The prompt's text is not
  searched, so a match never starts in the prompt; the token that completes the string is kept
  and may run past it ("st" + "opera" ends a row for "stop");
* the call ends when every row has ended, or when more than ``max_time`` seconds have passed
  since ``generate`` was called (checked when the tokens are read: below).

A row's tokens after its end are ``pad_token_id``, which defaults to the first eos id (ids given
as a set: the smallest); with neither given they are left as generated (transformers' generate
does the same). The result ends at the last row's end when every row has ended, as transformers'
does.

When the host looks: the tokens are read (one device-to-host copy, on a GPU a synchronisation)
every STOP_CHECK new tokens (``Generator``'s constant), and once more after the loop for the
tokens since; with a streamer, after every token. With none of these options, generate reads
nothing and never waits on the GPU. A row that ended keeps running in the batch (its graph has a
fixed batch) until the call ends: it costs what a running row costs, and between two reads the
GPU keeps generating for it. The stop-string check decodes the row's new text once per new token
(``tokenizer.decode`` of up to ``max_new_tokens`` ids), for rows that have not ended.

The streamer gets what transformers' generate gives it: the prompt first (``put`` of
``input_ids`` [B, P] on the CPU), then each new token of every row as it is read (``put`` of an
int64 [B] CPU tensor; rows that ended give their fill), then ``end()``, called even when
``generate`` raises, so that a ``TextIteratorStreamer``'s reader does not wait forever.
"""
from __future__ import annotations

import math
import numbers
import time

import torch

# The clock max_time is measured with (a module attribute, so that tests can replace it).
_clock = time.perf_counter


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _error(name: str, rule: str, got) -> ValueError:
    return ValueError(f"w8a8.Generator.generate: {name} must {rule}, got {got}")


def _eos_ids(eos_token_id, vocab: int | None) -> tuple[int, ...]:
    """The eos ids as a tuple, in the order given (a set: sorted), each in [0, vocab)."""
    if eos_token_id is None:
        return ()
    if _is_int(eos_token_id):
        ids = (int(eos_token_id),)
    elif isinstance(eos_token_id, (list, tuple, set, frozenset)) and eos_token_id \
            and all(_is_int(i) for i in eos_token_id):
        ids = tuple(int(i) for i in (sorted(eos_token_id) if isinstance(eos_token_id, (set, frozenset))
                                     else eos_token_id))
    else:
        raise _error("eos_token_id", "be an int or a non-empty list, tuple or set of ints",
                     f"{type(eos_token_id).__name__} {eos_token_id!r}")
    outside = [i for i in ids if vocab is not None and not 0 <= i < vocab]
    if outside:
        raise _error("eos_token_id", f"be token ids in [0, {vocab}) (the model's vocabulary)", eos_token_id)
    return ids


def _stop_strings(stop_strings, tokenizer) -> tuple[str, ...]:
    if stop_strings is None:
        return ()
    strings = (stop_strings,) if isinstance(stop_strings, str) else stop_strings
    if not isinstance(strings, (list, tuple)) or not all(isinstance(s, str) and s for s in strings):
        raise _error("stop_strings", "be a non-empty str or a list or tuple of non-empty strs", repr(stop_strings))
    if strings and tokenizer is None:
        raise _error("stop_strings", "come with tokenizer= (its decode gives the text they are searched in)",
                     f"stop_strings={list(strings)!r} and tokenizer=None")
    if strings and not callable(getattr(tokenizer, "decode", None)):
        raise _error("tokenizer", "have a decode(token_ids) method (a transformers tokenizer)",
                     type(tokenizer).__name__)
    return tuple(strings)


class Stops:
    """The host's view of one ``generate`` call: the rules above, the rows' ends and the streamer.

    ``every``: read the tokens every this many new tokens (None: never, no rule needs them).
    ``check(tokens)`` takes the next new tokens [B, n] on the CPU and says whether the call is over;
    ``ends[r]``: the index of row r's last new token once it has ended, else None.
    """

    def __init__(self, batch: int, vocab: int | None, stop_check: int, eos_token_id=None, pad_token_id=None,
                 stop_strings=None, tokenizer=None, max_time=None, streamer=None) -> None:
        self.eos = _eos_ids(eos_token_id, vocab)
        if pad_token_id is not None and not _is_int(pad_token_id):
            raise _error("pad_token_id", "be an int or None", f"{type(pad_token_id).__name__} {pad_token_id!r}")
        self.strings = _stop_strings(stop_strings, tokenizer)
        self.tokenizer = tokenizer
        if max_time is not None and (not _is_real(max_time) or math.isnan(max_time) or max_time < 0):
            raise _error("max_time", "be a number of seconds >= 0 or None", repr(max_time))
        if streamer is not None and not (callable(getattr(streamer, "put", None))
                                         and callable(getattr(streamer, "end", None))):
            raise _error("streamer", "have put(token_ids) and end() methods (as transformers' TextStreamer)",
                         f"{type(streamer).__name__} without " + " and ".join(
                             m for m in ("put", "end") if not callable(getattr(streamer, m, None))))
        self.streamer = streamer
        self.max_time = max_time
        self.fill = int(pad_token_id) if pad_token_id is not None else (self.eos[0] if self.eos else None)
        self.ends: list[int | None] = [None] * batch
        self.texts: list[list[int]] = [[] for _ in range(batch)]  # each row's new tokens up to its end
        self.checked = 0  # new tokens read so far
        self.start = _clock()
        if streamer is not None:
            self.every = 1
        elif self.eos or self.strings or max_time is not None:
            self.every = stop_check
        else:
            self.every = None

    def _ends_at(self, row: int, token: int) -> bool:
        self.texts[row].append(token)
        if token in self.eos:
            return True
        if self.strings:
            text = self.tokenizer.decode(self.texts[row])
            return any(s in text for s in self.strings)
        return False

    def check(self, tokens: torch.Tensor) -> bool:
        """Take the next new tokens [B, n] (CPU): rows' ends, the streamer; True when the call is over."""
        first = self.checked
        for row, values in enumerate(tokens.tolist()):
            for k, token in enumerate(values):
                if self.ends[row] is not None:
                    break
                if self._ends_at(row, token):
                    self.ends[row] = first + k
        self.checked += tokens.shape[1]
        if self.streamer is not None:
            for k in range(tokens.shape[1]):
                column = tokens[:, k].clone()
                if self.fill is not None:
                    for row, end in enumerate(self.ends):
                        if end is not None and end < first + k:
                            column[row] = self.fill
                self.streamer.put(column)
        return all(end is not None for end in self.ends) or (
            self.max_time is not None and _clock() - self.start > self.max_time)

    def length(self, done: int) -> int:
        """New tokens in the result, of the ``done`` generated: up to the last row's end once every row has ended."""
        return max(self.ends) + 1 if all(end is not None for end in self.ends) else done

    def filled(self, new: torch.Tensor) -> torch.Tensor:
        """``new`` [B, n] with every row's tokens after its end replaced by the fill."""
        if self.fill is None or all(end is None for end in self.ends):
            return new
        ends = torch.tensor([new.shape[1] if end is None else end for end in self.ends], device=new.device)
        after = torch.arange(new.shape[1], device=new.device)[None, :] > ends[:, None]
        return new.masked_fill(after, self.fill)
