"""How ``w8a8.Generator.generate`` picks a token where the decode graph's argmax is not the answer:
transformers' repetition penalty and multinomial sampling.

Per new token, from the step's last logits [B, V] (cast to float32, as transformers' generate
does), in transformers' order:

* ``repetition_penalty``: the logit of every token already in the row (prompt and new tokens,
  left padding excluded) divided by it where positive and multiplied by it where negative
  (RepetitionPenaltyLogitsProcessor; 1.0: skipped); greedy or sampled;

then, greedy, the argmax; with ``do_sample``:

* ``temperature``: the logits divided by it (TemperatureLogitsWarper; 1.0: skipped);
* ``top_k``: logits below the k-th largest set to -inf, so ties with it are kept
  (TopKLogitsWarper; k past the vocabulary: the whole vocabulary);
* ``top_p``: sorted ascending, the logits whose cumulative softmax is <= 1 - top_p set to -inf,
  the largest always kept: the smallest set whose mass reaches top_p (TopPLogitsWarper;
  1.0: skipped);

then one ``torch.multinomial`` draw from their softmax, with ``generator`` (a
``torch.Generator`` on the model's device; None: torch's default generator).

All of it runs on the logits' device and reads nothing on the host. On a GPU the Generator
replays its decode graph unchanged (the graph writes its greedy token into the slot's id
buffer) and then overwrites that buffer with the token picked here (``Generator.generate``):
sampled without a penalty, by replaying a graph of ``next_tokens`` on the decode graph's
logits (one per slot and ``graph_key``, the generator's state registered with it, so each
replay draws as the eager call would); with a penalty, whose rows grow every step, eagerly. A
greedy call without a penalty never comes here.
"""
from __future__ import annotations

import math

import torch

from w8a8.generation.stops import _error, _is_int, _is_real


class Sampler:
    """The token-picking arguments of one ``generate`` call, checked; ``active`` whether a token
    is picked here at all, ``warp(logits)`` the filtered logits, ``next_tokens(logits, seen,
    ignored)`` one token per row [B, 1].

    Raises ``ValueError`` (naming the argument) for: do_sample not a bool; repetition_penalty
    not a finite number > 0; with do_sample, temperature not a finite number > 0, top_k not an
    int >= 1, top_p not a number in (0, 1], a generator that is not a ``torch.Generator`` on
    ``device``; without do_sample, any of these four given (temperature other than 1.0, the
    others not None).
    """

    def __init__(self, device: torch.device, do_sample=False, temperature=1.0, top_k=None, top_p=None,
                 generator=None, repetition_penalty=1.0) -> None:
        if not _finite_positive(repetition_penalty):
            raise _error("repetition_penalty", "be a finite number > 0 (1.0: no penalty)",
                         f"{type(repetition_penalty).__name__} {repetition_penalty!r}")
        self.penalty = float(repetition_penalty)
        if not isinstance(do_sample, bool):
            raise _error("do_sample", "be a bool", f"{type(do_sample).__name__} {do_sample!r}")
        if not do_sample:
            values = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "generator": generator}
            given = {name: value for name, value in values.items()
                     if value is not None and not (name == "temperature" and value == 1.0)}
            if given:
                raise _error(" / ".join(given), "come with do_sample=True (with do_sample=False the tokens are "
                             "greedy and they would be ignored)", ", ".join(f"{n}={v!r}" for n, v in given.items()))
            return self._set(False, 1.0, None, None, None)
        if not _finite_positive(temperature):
            raise _error("temperature", "be a finite number > 0 (for greedy tokens pass do_sample=False)",
                         f"{type(temperature).__name__} {temperature!r}")
        if top_k is not None and (not _is_int(top_k) or top_k < 1):
            raise _error("top_k", "be an int >= 1 or None", f"{type(top_k).__name__} {top_k!r}")
        if top_p is not None and (not _is_real(top_p) or not 0 < top_p <= 1):
            raise _error("top_p", "be a number in (0, 1] or None", f"{type(top_p).__name__} {top_p!r}")
        if generator is not None:
            if not isinstance(generator, torch.Generator):
                raise _error("generator", f"be a torch.Generator on {device} or None", type(generator).__name__)
            if not _same_device(generator.device, device):
                raise _error("generator", f"be on the model's device, {device}", f"a torch.Generator on "
                             f"{generator.device}")
        self._set(True, float(temperature), None if top_k is None else int(top_k),
                  None if top_p is None else float(top_p), generator)

    def _set(self, do_sample, temperature, top_k, top_p, generator) -> None:
        self.active = do_sample or self.penalty != 1.0
        self.do_sample = do_sample
        self.temperature = temperature
        self.top_k = top_k
        self.top_p = top_p
        self.generator = generator

    @property
    def graph_key(self):
        """What a captured ``next_tokens(logits)`` depends on (None where it cannot be captured:
        greedy, or a penalty, which reads the rows' tokens so far)."""
        if not self.do_sample or self.penalty != 1.0:
            return None
        return self.temperature, self.top_k, self.top_p

    def warp(self, logits: torch.Tensor) -> torch.Tensor:
        """The logits [B, V] after temperature, top-k and top-p (filtered ones -inf), in float32."""
        scores = logits.float()
        if self.temperature != 1.0:
            scores = scores / self.temperature
        if self.top_k is not None:
            kth = torch.topk(scores, min(self.top_k, scores.shape[-1]))[0][..., -1, None]
            scores = scores.masked_fill(scores < kth, -math.inf)
        if self.top_p is not None and self.top_p < 1.0:
            ascending, order = torch.sort(scores, descending=False)
            remove = ascending.softmax(dim=-1).cumsum(dim=-1) <= 1 - self.top_p
            remove[..., -1:] = False  # the largest is always kept
            scores = scores.masked_fill(remove.scatter(1, order, remove), -math.inf)
        return scores

    def next_tokens(self, logits: torch.Tensor, seen: torch.Tensor | None = None,
                    ignored: torch.Tensor | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
        """One token per row [B, 1] (int64) from the logits [B, V]: with a penalty, the logits of
        ``seen`` [B, L] (the row's tokens so far; the first ``ignored`` [B, 1] of each row, its
        left padding, excluded) penalized first; then the argmax, or with do_sample a draw from
        the softmax of ``warp`` (with ``generator`` where given, else the call's)."""
        scores = logits.float()
        if self.penalty != 1.0:
            scores = penalize(scores, seen, self.penalty, ignored)
        if not self.do_sample:
            return scores.argmax(dim=-1, keepdim=True)
        return torch.multinomial(self.warp(scores).softmax(dim=-1), num_samples=1,
                                 generator=self.generator if generator is None else generator)


def penalize(scores: torch.Tensor, seen: torch.Tensor, penalty: float, ignored: torch.Tensor | None = None):
    """transformers' RepetitionPenaltyLogitsProcessor on float32 ``scores`` [B, V]: the score of
    each token id in ``seen`` [B, L] divided by ``penalty`` where positive, multiplied where
    negative (once per id, however often it occurs); ids at positions below ``ignored`` [B, 1]
    and ids >= V (an embedding larger than the output) left out."""
    vocab = scores.shape[-1]
    ids = seen.clamp(max=vocab)  # column V: a spare one that absorbs what is left out, dropped below
    if ignored is not None:
        positions = torch.arange(ids.shape[1], device=ids.device)
        ids = ids.masked_fill(positions < ignored, vocab)
    spare = torch.nn.functional.pad(scores, (0, 1))
    score = spare.gather(1, ids)
    score = torch.where(score < 0, score * penalty, score / penalty)
    return spare.scatter(1, ids, score)[..., :vocab]


def _finite_positive(value) -> bool:
    """A real number (not a bool), finite and > 0."""
    return _is_real(value) and math.isfinite(value) and value > 0


def _same_device(a: torch.device, b: torch.device) -> bool:
    """Whether a generator on ``a`` draws on ``b`` (a CUDA device without an index: the current one)."""
    if a.type != b.type:
        return False
    if a.type != "cuda":
        return True
    current = torch.cuda.current_device() if (a.index is None or b.index is None) else None
    return (a.index if a.index is not None else current) == (b.index if b.index is not None else current)
