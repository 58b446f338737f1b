"""w8a8.Generator.generate(generation_config=): transformers' GenerationConfig as generate's
arguments (w8a8/generation/config.py). CPU, the tiny Llama of generator_helpers."""
import pytest
import torch

pytest.importorskip("transformers")

from transformers import GenerationConfig  # noqa: E402

from w8a8.generation import Generator  # noqa: E402
from w8a8.generation import config as gen_config  # noqa: E402
from generator_helpers import _one_thread, tiny_llama  # noqa: E402,F401  (_one_thread: autouse)

VOCAB, PAD = 97, 0


@pytest.fixture(scope="module")
def models():
    return tiny_llama(VOCAB, PAD)


def _ids(seed=0):
    return torch.randint(1, VOCAB, (2, 5), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("impl", ["float", "w8a8"])
def test_a_config_gives_the_arguments_it_holds(models, impl):
    """Greedy from a config equals the same arguments given, and transformers' generate with that
    config; max_length counts the prompt; sampling fields apply with do_sample, seeded alike."""
    model, ids = models[impl], _ids()
    gen = Generator(model)
    greedy = GenerationConfig(max_new_tokens=6, do_sample=False)
    got = gen.generate(ids, generation_config=greedy)
    assert torch.equal(got, gen.generate(ids, 6))
    assert torch.equal(got, model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=greedy))
    assert gen.generate(ids, generation_config=GenerationConfig(max_length=9)).shape == (2, 9)
    sampled = GenerationConfig(do_sample=True, temperature=0.7, top_k=5, top_p=0.9, max_new_tokens=6)
    assert torch.equal(gen.generate(ids, generation_config=sampled, generator=torch.Generator().manual_seed(1)),
                       gen.generate(ids, 6, do_sample=True, temperature=0.7, top_k=5, top_p=0.9,
                                    generator=torch.Generator().manual_seed(1)))


def test_given_arguments_win_over_the_config(models):
    gen, ids = Generator(models["w8a8"]), _ids(1)
    config = GenerationConfig(max_new_tokens=6, do_sample=True, top_k=3)
    assert gen.generate(ids, 3, generation_config=config, generator=torch.Generator().manual_seed(0)).shape == (2, 8)
    greedy = gen.generate(ids, 6)
    first = int(greedy[0, 6])  # a row's second new token as its eos: the given id ends it, the config's does not
    ended = gen.generate(ids, 6, eos_token_id=first, pad_token_id=PAD,
                         generation_config=GenerationConfig(max_new_tokens=6, eos_token_id=VOCAB - 1))
    assert (ended[0, 7:] == PAD).all()


def test_what_generate_does_not_do_is_refused(models):
    gen, ids = Generator(models["float"]), _ids()
    prefix = r"w8a8\.Generator\.generate: generation_config"
    for field, value in (("num_beams", 2), ("encoder_repetition_penalty", 1.2), ("min_p", 0.1), ("no_repeat_ngram_size", 2),
                         ("num_return_sequences", 2), ("min_new_tokens", 3)):
        config = GenerationConfig(max_new_tokens=4, do_sample=True, **{field: value})  # sampling: a valid config
        with pytest.raises(ValueError, match=rf"{prefix}\.{field} must be .*got {value}"):
            gen.generate(ids, generation_config=config)
    with pytest.raises(ValueError, match=rf"{prefix} sets neither max_new_tokens nor max_length"):
        gen.generate(ids, generation_config=GenerationConfig())
    with pytest.raises(ValueError, match=rf"{prefix}\.max_length \(4\) must exceed the prompt \(5 tokens\)"):
        gen.generate(ids, generation_config=GenerationConfig(max_length=4))
    with pytest.raises(ValueError, match=rf"{prefix} must be a transformers GenerationConfig, got dict"):
        gen.generate(ids, generation_config={"max_new_tokens": 4})
    assert not gen._slots
    assert set(gen_config.REFUSED).isdisjoint(gen_config.TAKEN + gen_config.SAMPLING)
