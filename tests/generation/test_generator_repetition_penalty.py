"""w8a8.Generator.generate(repetition_penalty=...): transformers' repetition penalty, greedy and sampled
(w8a8/generation/sampling.py: penalize, Sampler.next_tokens).

CPU, a tiny random transformers Llama (float32 and W8A8). The penalty against transformers'
RepetitionPenaltyLogitsProcessor on the same logits, bit for bit; greedy, sampled and left-padded
generate against transformers' generate with the same penalty; a GenerationConfig's penalty;
the refusals.
"""
import math

import pytest
import torch

pytest.importorskip("transformers")

from w8a8.generation import Generator  # noqa: E402
from w8a8.generation.sampling import penalize  # noqa: E402
from generator_helpers import _one_thread, tiny_llama  # noqa: E402,F401  (_one_thread: autouse)

VOCAB, PAD, NEW = 97, 0, 12


@pytest.fixture(scope="module")
def models():
    return tiny_llama(VOCAB, PAD)


def _ids(batch=2, prompt=6, seed=0):
    return torch.randint(1, VOCAB, (batch, prompt), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("penalty", [0.5, 1.3, 7.0])
@pytest.mark.parametrize("ignore", [False, True])
def test_penalize_equals_transformers_processor(penalty, ignore):
    """Repeated ids, ids past the output vocabulary (an embedding larger than the head), negative
    and positive logits; with per-row ignored prefixes (left padding) as transformers' generate
    passes them (prompt_ignore_length)."""
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    gen = torch.Generator().manual_seed(1)
    scores = torch.randn(3, 50, generator=gen) * 4
    seen = torch.randint(0, 60, (3, 9), generator=gen)  # ids 50..59: past the output
    seen[0, 3:6] = seen[0, 2]
    ignored = torch.tensor([[0], [2], [5]]) if ignore else None
    processor = RepetitionPenaltyLogitsProcessor(penalty, prompt_ignore_length=ignored[:, 0] if ignore else None)
    expected = processor(seen, scores.clone())
    got = penalize(scores, seen, penalty, ignored)
    assert torch.equal(got, expected)
    assert not torch.equal(got, scores)


@pytest.mark.parametrize("impl", ["float", "w8a8"])
def test_greedy_equals_transformers_generate(models, impl):
    """Greedy with a penalty: transformers' generate's tokens; and the penalty changes them (the
    test would catch a penalty that does nothing)."""
    model = models[impl]
    ids = _ids()
    gen = Generator(model)
    plain = gen.generate(ids, NEW)
    for penalty in (1.3, 3.0):
        got = gen.generate(ids, NEW, repetition_penalty=penalty)
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False,
                                  repetition_penalty=penalty)
        assert torch.equal(got, expected), penalty
    assert not torch.equal(gen.generate(ids, NEW, repetition_penalty=3.0), plain)
    assert torch.equal(gen.generate(ids, NEW, repetition_penalty=1.0), plain)


def test_sampled_equals_transformers_generate(models):
    """With do_sample, under the same torch seed: transformers' sampled generate (penalty, then
    temperature and the filters)."""
    model = models["float"]
    ids = _ids(seed=2)
    kwargs = dict(do_sample=True, temperature=0.8, top_k=20, top_p=0.9, repetition_penalty=1.5)
    torch.manual_seed(3)
    expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, **kwargs)
    torch.manual_seed(3)
    assert torch.equal(Generator(model).generate(ids, NEW, **kwargs), expected)


def test_left_padded_batch_equals_transformers_generate(models):
    """The padding is not penalized (transformers leaves each row's left padding out): a padded
    batch equals transformers' generate with the same mask and penalty, and each row its run alone."""
    model = models["w8a8"]
    gen_ids = torch.Generator().manual_seed(4)
    rows = [torch.randint(1, VOCAB, (n,), generator=gen_ids) for n in (2, 5, 8)]
    gen = Generator(model)
    # The padding holds the shortest row's own first choice: penalized, that row's tokens would change.
    pad = int(gen.generate(rows[0][None], 1, repetition_penalty=2.0)[0, -1])
    ids = torch.full((3, 8), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, 8 - len(row):], mask[i, 8 - len(row):] = row, 1
    out = gen.generate(ids, NEW, attention_mask=mask, repetition_penalty=2.0)
    expected = model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, repetition_penalty=2.0)
    assert torch.equal(out, expected)
    for i, row in enumerate(rows):
        assert torch.equal(out[i, 8:], gen.generate(row[None], NEW, repetition_penalty=2.0)[0, len(row):]), i


def test_generation_config_gives_the_penalty(models):
    from transformers import GenerationConfig

    model, ids = models["float"], _ids(seed=5)
    gen = Generator(model)
    config = GenerationConfig(max_new_tokens=NEW, do_sample=False, repetition_penalty=1.7)
    assert torch.equal(gen.generate(ids, generation_config=config), gen.generate(ids, NEW, repetition_penalty=1.7))
    assert torch.equal(gen.generate(ids, generation_config=config, repetition_penalty=1.2),
                       gen.generate(ids, NEW, repetition_penalty=1.2))  # a given argument wins


@pytest.mark.parametrize("value, got", [(0, "int 0"), (-1.5, r"float -1\.5"), (math.nan, "float nan"),
                                        (math.inf, "float inf"), ("1.2", r"str '1\.2'"), (True, "bool True"),
                                        (None, "NoneType None")])
def test_bad_penalties_are_refused_before_any_work(models, value, got):
    model = models["float"]
    gen = Generator(model)
    forwards = []
    handle = model.register_forward_pre_hook(lambda *a: forwards.append(1))
    try:
        with pytest.raises(ValueError, match=r"w8a8\.Generator\.generate: repetition_penalty must be a finite "
                                             rf"number > 0 \(1\.0: no penalty\), got {got}$"):
            gen.generate(_ids(), 4, repetition_penalty=value)
    finally:
        handle.remove()
    assert not forwards and not gen._slots
