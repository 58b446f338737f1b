"""w8a8.Generator.generate with prompts of different lengths: left padding and ``attention_mask``
(w8a8/generation/left_padding.py).

CPU, a tiny random transformers Llama (float32 and W8A8; fp16 for the kernels in Triton's
interpreter). Rows of lengths 1..N left-padded into one batch give each row's tokens alone,
and transformers' own generate with the same mask; the eager attention's additive mask, the
decode kernels' bool mask, sampling and stop rules with padding; every refusal of a bad mask.
"""
import os

import pytest
import torch

pytest.importorskip("transformers")

import w8a8  # noqa: E402
from w8a8.generation import Generator  # noqa: E402
from w8a8.generation import left_padding  # noqa: E402
from generator_helpers import _one_thread, tiny_llama  # noqa: E402,F401  (_one_thread: autouse)

VOCAB, PAD, NEW = 97, 0, 8
LENGTHS = (1, 4, 7, 9)


@pytest.fixture(scope="module")
def models():
    return tiny_llama(VOCAB, PAD)


def _batch(lengths=LENGTHS, seed=1):
    """(left-padded ids [B, P], its mask, the rows alone)."""
    gen = torch.Generator().manual_seed(seed)
    rows = [torch.randint(1, VOCAB, (n,), generator=gen) for n in lengths]
    width = max(lengths)
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = row
        mask[i, width - len(row):] = 1
    return ids, mask, rows


@pytest.mark.parametrize("impl", ["float", "w8a8"])
def test_rows_equal_their_runs_alone_and_transformers(models, impl):
    """Each row of a left-padded batch continues as it does alone; the whole batch equals
    transformers' greedy generate with the same attention_mask; the padding stays in front."""
    model = models[impl]
    ids, mask, rows = _batch()
    gen = Generator(model)
    out = gen.generate(ids, NEW, attention_mask=mask)
    width = ids.shape[1]
    assert torch.equal(out[:, :width], ids)
    for i, row in enumerate(rows):
        alone = gen.generate(row[None], NEW)
        assert torch.equal(out[i, width:], alone[0, len(row):]), f"row {i} (length {len(row)})"
    hf = model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False)
    assert torch.equal(out, hf)


def test_a_mask_without_padding_is_the_unpadded_call(models):
    """All ones (bool or int): the call without a mask, logits bit for bit (the unpadded slot)."""
    model = models["w8a8"]
    ids = _batch((6, 6, 6))[0]
    gen = Generator(model)
    want, want_logits = gen.generate(ids, NEW, output_logits=True)
    for mask in (torch.ones_like(ids), torch.ones_like(ids, dtype=torch.bool)):
        got, logits = gen.generate(ids, NEW, output_logits=True, attention_mask=mask)
        assert torch.equal(got, want) and torch.equal(logits, want_logits)
    assert all(not padded for _, _, padded in gen._slots)


def test_eager_attention_gets_an_additive_mask(models):
    """transformers' "eager" attention adds its mask to the scores: the padded batch's masks are
    additive in the model's dtype there, and the rows equal their runs alone."""
    model = models["float"]
    ids, mask, rows = _batch((2, 5))
    model.config._attn_implementation = "eager"
    try:
        gen = Generator(model)
        out = gen.generate(ids, NEW, attention_mask=mask)
        slot = next(s for key, s in gen._slots.items() if key[2])
        assert slot.mask.dtype == torch.float32
        for i, row in enumerate(rows):
            assert torch.equal(out[i, ids.shape[1]:], gen.generate(row[None], NEW)[0, len(row):])
    finally:
        model.config._attn_implementation = "sdpa"


def test_sampling_and_eos_with_padding(models):
    """Sampling with a seed is reproducible on a padded batch; an eos id ends a row and pads it."""
    model = models["w8a8"]
    ids, mask, _ = _batch()
    gen = Generator(model)
    draws = [gen.generate(ids, NEW, attention_mask=mask, do_sample=True, top_k=5,
                          generator=torch.Generator().manual_seed(3)) for _ in range(2)]
    assert torch.equal(*draws)
    greedy = gen.generate(ids, NEW, attention_mask=mask)
    eos = int(greedy[0, ids.shape[1] + 2])
    ended = gen.generate(ids, NEW, attention_mask=mask, eos_token_id=eos, pad_token_id=PAD)
    hf = model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, eos_token_id=eos,
                        pad_token_id=PAD)
    assert torch.equal(ended, hf) and (ended[0, ids.shape[1] + 3:] == PAD).all()


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available(),
                    reason="the decode kernels need a CUDA device or Triton's interpreter (TRITON_INTERPRET=1)")
def test_decode_kernels_take_the_padded_mask(monkeypatch):
    """kernels=True (rope with each row's positions, decode attention with each row's bool mask)
    against kernels=False on a padded fp16 batch: each kernel runs, the tokens are the same."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from w8a8.generation import steps

    kernels = steps.triton_generation()
    calls = {"rope": 0, "decode_attention": 0}
    for name in calls:
        fn = getattr(kernels, name)
        monkeypatch.setattr(kernels, name, lambda *a, _fn=fn, _name=name, **k: (
            calls.__setitem__(_name, calls[_name] + 1), _fn(*a, **k))[1])

    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, num_hidden_layers=2)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval().half().to(device)
    w8a8.quantize_model(model, skip=("lm_head",), progress=False)
    ids, mask, rows = _batch((3, 6))
    ids, mask = ids.to(device), mask.to(device)
    with_kernels = Generator(model, kernels=True).generate(ids, NEW, attention_mask=mask)
    assert all(calls.values()), calls
    plain = Generator(model, kernels=False).generate(ids, NEW, attention_mask=mask)
    assert torch.equal(with_kernels, plain)


def test_bad_masks_are_refused_before_any_work(models):
    gen = Generator(models["float"])
    ids, mask, _ = _batch((2, 5))
    prefix = r"w8a8\.Generator\.generate: attention_mask must be"
    cases = [
        ([1, 2], "a tensor"),
        (mask[:, 1:], r"\[batch, prompt\] = \[2, 5\] on cpu like input_ids, got \[2, 4\]"),
        (mask.float(), "bool or integer"),
        (mask * 2, r"0 \(padding\) or 1 \(a prompt token\), got values \[0, 2\]"),
        (mask.flip(1), r"left padding .* row 0 is \[1, 1, 0, 0, 0\]"),
        (torch.zeros_like(mask), r"left padding .* row 0 is \[0, 0, 0, 0, 0\]"),
    ]
    for bad, words in cases:
        with pytest.raises(ValueError, match=f"{prefix} {words}"):
            gen.generate(ids, NEW, attention_mask=bad)
    assert not gen._slots


def test_padded_batches_longer_than_the_sliding_window_are_refused(models):
    model = models["float"]
    ids, mask, _ = _batch((2, 5))
    model.config.sliding_window = 8
    try:
        with pytest.raises(ValueError, match=r"sliding_window \(8\) with max_new_tokens, got 5 \+ 8 positions"):
            Generator(model).generate(ids, NEW, attention_mask=mask)
    finally:
        model.config.sliding_window = None


def test_masks_of_a_padded_prompt_and_step():
    """The rules of left_padding.py on a 2-row batch: the prompt's mask and positions, then a step's."""
    pads = torch.tensor([[2], [0]])
    got = left_padding.prompt_inputs(pads, 3, 5, None)
    allowed = got["attention_mask"][:, 0]
    assert allowed[0].tolist() == [[True, False, False, False, False],  # padding: itself only
                                   [False, True, False, False, False],
                                   [False, False, True, False, False]]  # the first token: itself
    assert allowed[1].tolist() == [[True, False, False, False, False],
                                   [True, True, False, False, False],
                                   [True, True, True, False, False]]
    assert got["position_ids"].tolist() == [[0, 0, 0], [0, 1, 2]]
    mask = torch.zeros(2, 1, 1, 5, dtype=torch.float16)
    step = left_padding.step_inputs(pads, torch.tensor([[3]]), torch.arange(5).unsqueeze(0), mask)
    low = torch.finfo(torch.float16).min
    assert step["attention_mask"] is mask and step["position_ids"].tolist() == [[1], [3]]
    assert mask[:, 0, 0].tolist() == [[low, low, 0, 0, low], [0, 0, 0, 0, low]]


def test_a_padded_prompt_graph_reads_the_slot_pads(models, monkeypatch):
    """prefill_graphs' logic on the CPU, a graph standing in for the capture (its replay reruns
    the captured function): the prompt's graph, made for one batch's padding, serves another
    batch of the same shape through the slot's pads buffer, and both give their eager tokens."""
    class Replay:
        def __init__(self, step):
            self.replay = step

    model = models["w8a8"]
    gen = Generator(model)
    gen.prefill_graphs = True
    monkeypatch.setattr(gen, "_graphed", lambda slot, step: (Replay(step), step()))
    eager = Generator(model)
    for lengths in ((3, 9, 5), (9, 2, 6)):
        ids, mask, _ = _batch(lengths)
        assert torch.equal(gen.generate(ids, NEW, attention_mask=mask), eager.generate(ids, NEW, attention_mask=mask))
    (slot,) = gen._slots.values()
    assert list(slot.prefills) == [9]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CUDA graphs)")
def test_padded_batches_in_cuda_graphs():
    """On a GPU: a padded batch's decode graph (its mask rewritten in place every replay) gives
    the eager steps' tokens and logits bit for bit; with prefill_graphs its prompt graph (reading
    the slot's pads) agrees with the eager prompt within rounding (as an unpadded prompt's graph
    does), and each row's first logits agree with the row's run alone within rounding (another
    batch shape: other GEMM and attention kernels). Two padded calls reuse one slot."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=64, num_hidden_layers=2)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval().to(torch.bfloat16).cuda()
    w8a8.quantize_model(model, skip=("lm_head",), progress=False)
    eager = Generator(model, cuda_graph=False)

    def near(a, b):
        a, b = a.float(), b.float()
        return bool(((a - b).abs() <= b.abs().amax(-1, keepdim=True) * 2 ** -4).all())

    for prefill_graphs in (False, True):
        gen = Generator(model, prefill_graphs=prefill_graphs)
        for lengths in ((3, 9, 5), (2, 9, 9)):
            ids, mask, rows = _batch(lengths)
            ids, mask = ids.cuda(), mask.cuda()
            out, logits = gen.generate(ids, NEW, attention_mask=mask, output_logits=True)
            want, want_logits = eager.generate(ids, NEW, attention_mask=mask, output_logits=True)
            if prefill_graphs:
                assert near(logits[:, 0], want_logits[:, 0]), lengths
            else:
                assert torch.equal(out, want) and torch.equal(logits, want_logits), lengths
            for i, row in enumerate(rows):
                _, alone = eager.generate(row[None].cuda(), 1, output_logits=True)
                assert near(want_logits[i, 0], alone[0, 0]), (lengths, i)
        assert sorted(gen._slots) == [(3, 256, True)]
