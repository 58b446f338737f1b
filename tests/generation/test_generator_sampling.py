"""w8a8.Generator.generate(do_sample=True): temperature, top-k, top-p (w8a8/generation/sampling.py).

CPU, a tiny random transformers Llama, float32 and W8A8. The filtering against transformers'
own logits processors on the same logits, bit for bit; seeded runs reproducible; top_k=1 equal
to greedy token for token; the tokens equal transformers' sampled generate under the same
torch seed; sampling with eos and a streamer; greedy calls never reach the sampler; every
refusal's words, before any work. On a GPU: the pick captured in a graph after the decode
graph draws the eager pick's tokens, and leaves the generator where the eager pick does.
"""
import copy
import math

import pytest
import torch

pytest.importorskip("transformers")

from w8a8.generation import Generator  # noqa: E402
from w8a8.generation import sampling  # noqa: E402
from w8a8.generation.sampling import Sampler  # noqa: E402
from generator_helpers import Recorder, _one_thread, tiny_llama  # noqa: E402,F401  (_one_thread: autouse)
from helpers import requires_cuda  # noqa: E402

VOCAB = 256
NEW = 16
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def models():
    """A tiny Llama, float32 and W8A8 (logits with a spread: top-k and top-p cut something, and a
    sampled run differs from the greedy one)."""
    return tiny_llama(VOCAB, pad=0)


def _ids(batch=3, prompt=5, seed=0):
    return torch.randint(1, VOCAB, (batch, prompt), generator=torch.Generator().manual_seed(seed))


def _seeded(seed):
    return torch.Generator().manual_seed(seed)


# --- the filtering: transformers' processors -------------------------------------------------------


def _transformers_warp(logits, temperature=1.0, top_k=None, top_p=None):
    """transformers' sample path: float32 logits, then its warpers in its order (those it adds)."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    scores = logits.float()
    processors = []
    if temperature != 1.0:
        processors.append(TemperatureLogitsWarper(float(temperature)))
    if top_k is not None:
        processors.append(TopKLogitsWarper(top_k))
    if top_p is not None and top_p < 1.0:
        processors.append(TopPLogitsWarper(top_p))
    ids = torch.zeros(scores.shape[0], 1, dtype=torch.long)
    for p in processors:
        scores = p(ids, scores)
    return scores


SETTINGS = [dict(temperature=0.7), dict(temperature=1.5), dict(top_k=1), dict(top_k=5), dict(top_k=10 ** 6),
            dict(top_p=0.01), dict(top_p=0.5), dict(top_p=0.9), dict(top_p=1.0),
            dict(temperature=0.6, top_k=20, top_p=0.8), dict(temperature=2.0, top_k=3, top_p=0.3),
            dict(temperature=1.0, top_k=1, top_p=1.0)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_filtering_equals_transformers_processors(setting, dtype):
    """Sampler.warp equals transformers' warpers on the same logits, bit for bit: rows with ties
    (with the k-th logit, a whole row equal), a peaked row, a flat one; the distributions too."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(6, VOCAB, generator=g) * 3
    logits[1, :40] = logits[1, 0]  # ties
    logits[2] = 0.0  # one value
    logits[3, 7] = 40.0  # one token holds the mass
    logits[4] = torch.randn(VOCAB, generator=g) * 0.01  # nearly flat
    logits[5, ::2] = logits[5, 1::2]  # every value twice
    logits = logits.to(dtype)
    ours = Sampler(CPU, True, **setting).warp(logits)
    theirs = _transformers_warp(logits, **setting)
    assert ours.dtype == torch.float32 and torch.equal(ours, theirs)
    assert torch.equal(ours.softmax(-1), theirs.softmax(-1))
    assert (torch.isfinite(ours).sum(-1) >= 1).all()  # at least one token is kept in every row
    if setting.get("top_k") == 1:  # ties with the largest stay
        assert torch.equal(torch.isfinite(ours), logits.float() == logits.float().max(-1, keepdim=True)[0])


def test_filtering_on_model_logits_and_sampled_tokens_are_kept(models):
    """On the model's own logits (output_logits): the processors agree, and every sampled token is
    one the filters kept."""
    setting = dict(temperature=0.8, top_k=12, top_p=0.7)
    tokens, logits = Generator(models["w8a8"]).generate(_ids(), NEW, output_logits=True, do_sample=True,
                                                        generator=_seeded(0), **setting)
    flat = logits.reshape(-1, VOCAB)
    ours = Sampler(CPU, True, **setting).warp(flat)
    assert torch.equal(ours, _transformers_warp(flat, **setting))
    kept = torch.isfinite(ours).reshape(logits.shape)
    assert kept.gather(-1, tokens[:, 5:, None]).all()
    assert (kept.sum(-1) < 12).any()  # top_p cut past top_k somewhere


# --- tokens ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", ["float", "w8a8"])
def test_seeded_runs_reproducible(models, impl):
    """The same generator seed gives the same tokens (one Generator or two); another seed differs;
    with generator=None, torch's default generator (torch.manual_seed) decides."""
    model = models[impl]
    ids = _ids()
    gen = Generator(model)
    a = gen.generate(ids, NEW, do_sample=True, generator=_seeded(1))
    assert torch.equal(a, gen.generate(ids, NEW, do_sample=True, generator=_seeded(1)))
    assert torch.equal(a, Generator(model).generate(ids, NEW, do_sample=True, generator=_seeded(1)))
    assert not torch.equal(a, gen.generate(ids, NEW, do_sample=True, generator=_seeded(2)))
    assert not torch.equal(a, gen.generate(ids, NEW))  # sampled, not greedy
    torch.manual_seed(7)
    b = gen.generate(ids, NEW, do_sample=True, top_p=0.9)
    torch.manual_seed(7)
    assert torch.equal(b, gen.generate(ids, NEW, do_sample=True, top_p=0.9))
    assert torch.equal(a[:, :5], ids)


@requires_cuda
@pytest.mark.parametrize("impl", ["float", "w8a8"])
def test_graph_pick_equals_eager_pick(models, impl):
    """With graphs the pick after each decode step is a graph of its own: its tokens equal those of
    the Generator without graphs under the same generator state (a seeded generator, and torch's
    default one), the generator's state after the call is the same, and a seeded run repeats."""
    model = copy.deepcopy(models[impl]).cuda()
    ids = _ids().cuda()
    graphs, eager = Generator(model), Generator(model, cuda_graph=False)

    def seeded(seed):
        return torch.Generator("cuda").manual_seed(seed)

    for setting in (dict(), dict(temperature=0.7, top_k=20, top_p=0.9)):
        a, g = seeded(3), seeded(3)
        tokens = graphs.generate(ids, NEW, do_sample=True, generator=a, **setting)
        assert torch.equal(tokens, eager.generate(ids, NEW, do_sample=True, generator=g, **setting)), setting
        assert torch.equal(a.get_state(), g.get_state())
        assert torch.equal(tokens, graphs.generate(ids, NEW, do_sample=True, generator=seeded(3), **setting))
        assert not torch.equal(tokens, graphs.generate(ids, NEW))  # sampled, not greedy
    torch.manual_seed(9)
    tokens = graphs.generate(ids, NEW, do_sample=True, top_p=0.9)
    torch.manual_seed(9)
    assert torch.equal(tokens, eager.generate(ids, NEW, do_sample=True, top_p=0.9))
    assert sum(len(slot.samplers) for slot in graphs._slots.values()) == 3  # the picks ran as graphs
    assert all(not slot.samplers for slot in eager._slots.values())


@pytest.mark.parametrize("impl", ["float", "w8a8"])
def test_top_k_1_equals_greedy(models, impl):
    """top_k=1 keeps only the argmax (ties aside): greedy token for token, whatever else is set."""
    model = models[impl]
    gen = Generator(model)
    ids = _ids(seed=4)
    greedy = gen.generate(ids, NEW)
    for setting in (dict(), dict(temperature=0.3), dict(temperature=3.0, top_p=0.5)):
        assert torch.equal(gen.generate(ids, NEW, do_sample=True, top_k=1, generator=_seeded(5), **setting),
                           greedy), setting


@pytest.mark.parametrize("setting", [dict(), dict(temperature=0.7, top_k=20, top_p=0.9)],
                         ids=["plain", "temperature-top_k-top_p"])
def test_tokens_equal_transformers_sampled_generate(models, setting):
    """Under the same torch seed (generator=None: torch's default generator, the one transformers
    draws with), transformers' do_sample=True generate's tokens."""
    model = models["float"]
    ids = _ids(batch=2, seed=6)
    torch.manual_seed(11)
    expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=True,
                              top_k=setting.get("top_k", None) or 0, top_p=setting.get("top_p", 1.0),
                              temperature=setting.get("temperature", 1.0))
    torch.manual_seed(11)
    assert torch.equal(Generator(model).generate(ids, NEW, do_sample=True, **setting), expected)


def test_sampling_with_eos_and_streamer(models):
    """The stop rules read the sampled tokens: with an eos id from a seeded free run, the same seed
    gives that run's tokens up to each row's eos, then pad; the streamer gets the result's columns."""
    model = models["w8a8"]
    ids = _ids(batch=2, seed=8)
    gen = Generator(model)
    kwargs = dict(do_sample=True, temperature=1.3, top_k=50)
    free = gen.generate(ids, 40, generator=_seeded(9), **kwargs)[:, 5:]
    eos = int(free[0, 6])
    ends = [int((row == eos).nonzero()[0]) if (row == eos).any() else None for row in free]
    streamer = Recorder()
    out = gen.generate(ids, 40, eos_token_id=eos, pad_token_id=-1, streamer=streamer, generator=_seeded(9),
                       **kwargs)
    new = out[:, 5:]
    for row, end in enumerate(ends):
        stop = new.shape[1] if end is None else end + 1
        assert torch.equal(new[row, :stop], free[row, :stop]), row
        assert (new[row, stop:] == -1).all(), row
    assert new.shape[1] == (max(ends) + 1 if None not in ends else 40)
    assert torch.equal(streamer.puts[0], ids) and streamer.ends == 1
    assert torch.equal(torch.stack(streamer.puts[1:], dim=1), new)


def test_greedy_calls_never_reach_the_sampler(models, monkeypatch):
    """do_sample=False: no warp, no draw, no random numbers taken from the default generator."""
    def refuse(*args, **kwargs):
        raise AssertionError("the sampler ran in a greedy call")

    monkeypatch.setattr(Sampler, "next_tokens", refuse)
    monkeypatch.setattr(Sampler, "warp", refuse)
    monkeypatch.setattr(torch, "multinomial", refuse)
    state = torch.get_rng_state()
    Generator(models["float"]).generate(_ids(), NEW, temperature=1.0)
    assert torch.equal(state, torch.get_rng_state())


# --- refusals -------------------------------------------------------------------------------------


def _bad_calls():
    g = r"w8a8\.Generator\.generate: "
    need = r" must come with do_sample=True \(with do_sample=False the tokens are greedy and they would be ignored\)"
    temp = g + r"temperature must be a finite number > 0 \(for greedy tokens pass do_sample=False\), got "
    return [
        (dict(do_sample=1), g + r"do_sample must be a bool, got int 1"),
        (dict(temperature=0.5), g + "temperature" + need + r", got temperature=0\.5"),
        (dict(top_k=5), g + "top_k" + need + r", got top_k=5"),
        (dict(top_p=0.9), g + "top_p" + need + r", got top_p=0\.9"),
        (dict(generator=_seeded(0)), g + "generator" + need + r", got generator=<torch\._C\.Generator"),
        (dict(temperature=0.5, top_k=5), g + "temperature / top_k" + need + r", got temperature=0\.5, top_k=5"),
        (dict(do_sample=True, temperature=0), temp + r"int 0"),
        (dict(do_sample=True, temperature=-1.0), temp + r"float -1\.0"),
        (dict(do_sample=True, temperature=float("nan")), temp + r"float nan"),
        (dict(do_sample=True, temperature=math.inf), temp + r"float inf"),
        (dict(do_sample=True, temperature="0.7"), temp + r"str '0\.7'"),
        (dict(do_sample=True, temperature=None), temp + r"NoneType None"),
        (dict(do_sample=True, temperature=True), temp + r"bool True"),
        (dict(do_sample=True, top_k=0), g + r"top_k must be an int >= 1 or None, got int 0"),
        (dict(do_sample=True, top_k=-3), g + r"top_k must be an int >= 1 or None, got int -3"),
        (dict(do_sample=True, top_k=2.0), g + r"top_k must be an int >= 1 or None, got float 2\.0"),
        (dict(do_sample=True, top_k=True), g + r"top_k must be an int >= 1 or None, got bool True"),
        (dict(do_sample=True, top_p=0), g + r"top_p must be a number in \(0, 1\] or None, got int 0"),
        (dict(do_sample=True, top_p=1.01), g + r"top_p must be a number in \(0, 1\] or None, got float 1\.01"),
        (dict(do_sample=True, top_p=-0.5), g + r"top_p must be a number in \(0, 1\] or None, got float -0\.5"),
        (dict(do_sample=True, top_p=float("nan")), g + r"top_p must be a number in \(0, 1\] or None, got float nan"),
        (dict(do_sample=True, top_p="0.9"), g + r"top_p must be a number in \(0, 1\] or None, got str '0\.9'"),
        (dict(do_sample=True, generator=42), g + r"generator must be a torch\.Generator on cpu or None, got int"),
    ]


def test_bad_arguments_are_refused_before_any_work(models):
    """Each refusal names the argument, the rule and what it got, before the model runs, a slot is
    made or the streamer hears anything."""
    model = models["float"]
    gen = Generator(model)
    forwards = []
    handle = model.register_forward_pre_hook(lambda *a: forwards.append(1))
    try:
        for kwargs, message in _bad_calls():
            streamer = Recorder()
            with pytest.raises(ValueError, match=message):
                gen.generate(_ids(), 4, streamer=streamer, **kwargs)
            assert not forwards and not gen._slots and not streamer.puts and not streamer.ends, kwargs
    finally:
        handle.remove()


def test_generator_on_another_device_is_refused():
    """A generator must draw on the model's device (a CPU generator for a CUDA model here: no GPU needed)."""
    message = (r"w8a8\.Generator\.generate: generator must be on the model's device, cuda:0, got a "
               r"torch\.Generator on cpu")
    with pytest.raises(ValueError, match=message):
        Sampler(torch.device("cuda", 0), True, generator=torch.Generator())
    assert not sampling._same_device(torch.device("cpu"), torch.device("cuda", 0))
    assert not sampling._same_device(torch.device("cuda", 1), torch.device("cuda", 0))
    assert sampling._same_device(torch.device("cpu"), torch.device("cpu"))
