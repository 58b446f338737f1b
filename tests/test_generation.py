"""w8a8.Generator (w8a8/generation.py): greedy generation with the decode step in a CUDA graph.

CPU: a tiny random transformers Llama, float and W8A8 (reference path): the Generator's
tokens equal transformers' own greedy generate, over changing batch sizes and prompt
lengths with one Generator. CUDA: Llama-3-8B widths (2 layers), the graph's logits equal the
same steps run eagerly, bit for bit, over 128 greedy tokens.
"""
import copy
import json

import pytest
import torch

pytest.importorskip("transformers")

import w8a8  # noqa: E402
from w8a8 import generation  # noqa: E402
from w8a8.generation import Generator  # noqa: E402

from helpers import requires_cuda  # noqa: E402


def _llama(device="cpu", size="tiny", layers=2, dtype=None):
    from w8a8.bench.model import build_model

    model, config = build_model(size, layers, torch.device(device))
    if dtype is not None:
        model = model.to(dtype)
    model.generation_config.eos_token_id = None  # exactly max_new_tokens from transformers too
    model.generation_config.pad_token_id = 0
    return model, config


@pytest.fixture(scope="module")
def models():
    float_model, config = _llama(dtype=torch.float32)
    quantized = copy.deepcopy(float_model)
    w8a8.quantize_model(quantized, skip=("lm_head",), progress=False)
    return {"float": float_model, "w8a8": quantized}, config


@pytest.mark.parametrize("impl", ["float", "w8a8"])
def test_tokens_equal_transformers_generate(models, impl):
    """One Generator over batch and prompt changes (slots reused, nothing stale) gives
    transformers' greedy tokens every time; the attention swap is undone after each call."""
    model = models[0][impl]
    gen = Generator(model)
    g = torch.Generator().manual_seed(1)
    for batch, prompt, new in ((1, 5, 12), (3, 40, 9), (1, 7, 12), (3, 300, 4), (3, 41, 9)):
        ids = torch.randint(0, models[1].vocab_size, (batch, prompt), generator=g)
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False)
        assert torch.equal(gen.generate(ids, new), expected), (batch, prompt)
        assert model.config._attn_implementation == "sdpa"
    # cache lengths round up to CACHE_ROUND: 5 + 12, 40 + 9 and 7 + 12 share a slot per batch size
    assert sorted(gen._slots) == [(1, 256), (3, 256), (3, 512)]


def test_output_logits_and_eager_step(models):
    model = models[0]["w8a8"]
    ids = torch.randint(0, models[1].vocab_size, (2, 6), generator=torch.Generator().manual_seed(2))
    tokens, logits = Generator(model).generate(ids, 5, output_logits=True)
    assert tokens.shape == (2, 11) and logits.shape == (2, 5, models[1].vocab_size)
    assert torch.equal(logits.argmax(-1), tokens[:, 6:])
    with torch.inference_mode():  # the prompt's own last logits come first
        first = model(input_ids=ids).logits[:, -1]
    torch.testing.assert_close(logits[:, 0], first, rtol=1e-5, atol=1e-5)


def test_eos_pads_and_stops(models, monkeypatch):
    model = models[0]["float"]
    ids = torch.randint(0, models[1].vocab_size, (2, 5), generator=torch.Generator().manual_seed(3))
    free = Generator(model).generate(ids, 40)[:, 5:]
    eos = int(free[0, 2])  # row 0 meets it at its third new token
    monkeypatch.setattr(generation, "STOP_CHECK", 4)
    out = Generator(model).generate(ids, 40, eos_token_id=eos, pad_token_id=-1)[:, 5:]
    for row in range(2):
        hits = (free[row] == eos).nonzero()
        first = int(hits[0]) if len(hits) else None
        end = out.shape[1] if first is None else first + 1
        assert torch.equal(out[row, :end], free[row, :end])
        assert (out[row, end:] == -1).all()
    if bool((free[1, :40] == eos).any()):
        assert out.shape[1] < 40  # both rows done: stopped at a STOP_CHECK boundary


def test_packed_gqa_attention_matches_math():
    """One-token queries with grouped KV heads, as ATTENTION runs them, against the
    attention written out with every KV head repeated."""
    torch.manual_seed(4)
    batch, heads, kv_heads, length, dim = 3, 8, 2, 11, 16
    module = torch.nn.Module()
    module.num_key_value_groups = heads // kv_heads
    q = torch.randn(batch, heads, 1, dim)
    k, v = torch.randn(batch, kv_heads, length, dim), torch.randn(batch, kv_heads, length, dim)
    mask = torch.arange(length)[None, None, None, :] < torch.tensor([4, 11, 7])[:, None, None, None]
    out, _ = generation._sdpa_packed_gqa(module, q, k, v, mask, scaling=0.25)
    kr, vr = (t.repeat_interleave(heads // kv_heads, dim=1) for t in (k, v))
    scores = (q @ kr.transpose(-1, -2)) * 0.25
    expected = (scores.masked_fill(~mask, float("-inf")).softmax(-1) @ vr).transpose(1, 2)
    assert out.shape == (batch, 1, heads, dim)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_errors_name_the_call(models):
    model = models[0]["float"]
    with pytest.raises(ValueError, match=r"w8a8.Generator: cuda_graph=True needs the model on a CUDA device, it is on cpu"):
        Generator(model, cuda_graph=True)
    with pytest.raises(ValueError, match=r"w8a8.Generator: prefill_graphs=True needs cuda_graph"):
        Generator(model, prefill_graphs=True)
    gen = Generator(model)
    with pytest.raises(ValueError, match=r"Generator.generate: input_ids must be int64 \[batch, prompt\] on cpu, "
                                         r"got torch.int32 \[1, 3\] on cpu"):
        gen.generate(torch.zeros(1, 3, dtype=torch.int32), 2)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1, got 0"):
        gen.generate(torch.zeros(1, 3, dtype=torch.long), 0)


def test_generate_suite_on_cpu(tmp_path, capsys):
    from w8a8 import __main__ as cli

    assert cli.main(["bench", "--device", "cpu", "--suites", "generate", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "generate_cpu.json").read_text())
    assert doc["kind"] == "generate" and doc["layers"] == 2 and doc["recipes"] == ["graph", "eager"]
    rows = doc["rows"]
    assert sorted((r["recipe"], r["impl"], r["batch"]) for r in rows) == sorted(
        (rc, impl, b) for rc in ("graph", "eager") for impl in ("bf16", "w8a8") for b in (1, 2))
    for r in rows:
        assert r["decode_ms"] > 0 and r["tokens_per_s"] == pytest.approx(r["batch"] / r["decode_ms"] * 1e3, rel=1e-3)
        if r["recipe"] == "graph":
            assert r["step_gpu_us"] is None and r["prefill_eager_ms"] > 0
        if r["impl"] == "w8a8":
            assert 0 <= r["token_match"] <= 1 and r["x_bf16_decode"] > 0
    assert "| prompt | batch | recipe | impl | prefill ms |" in capsys.readouterr().out


# --- CUDA: the graph against the same steps run eagerly -------------------------------------------


@requires_cuda
@pytest.mark.parametrize("batch", [1, 5, 16])
def test_graph_logits_bit_identical_to_eager_over_128_tokens(batch):
    model, config = _llama("cuda", "llama3-8b", layers=2)
    w8a8.quantize_model(model, skip=("lm_head",), progress=False)
    ids = torch.randint(0, config.vocab_size, (batch, 37), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(batch))
    graphed = Generator(model)
    assert graphed.cuda_graph
    tokens, logits = graphed.generate(ids, 128, output_logits=True)
    eager_tokens, eager_logits = Generator(model, cuda_graph=False).generate(ids, 128, output_logits=True)
    assert torch.equal(tokens, eager_tokens)
    step = next((i for i in range(128) if not torch.equal(logits[:, i], eager_logits[:, i])), None)
    assert step is None, f"logits differ first at new token {step}"


@requires_cuda
def test_graph_slots_change_batch_and_prompt_without_stale_outputs():
    """One Generator: other batch sizes and prompt lengths get their own slot or reuse one;
    every call's tokens equal a fresh eager run's, and nothing is captured twice."""
    model, config = _llama("cuda", "llama3-8b", layers=2)
    w8a8.quantize_model(model, skip=("lm_head",), progress=False)
    gen = Generator(model)
    captures = []
    original = gen._capture
    gen._capture = lambda slot: (captures.append(slot), original(slot))[1]
    g = torch.Generator("cuda").manual_seed(5)
    for batch, prompt in ((1, 7), (3, 40), (1, 300), (1, 9), (3, 41), (1, 7)):
        ids = torch.randint(0, config.vocab_size, (batch, prompt), device="cuda", generator=g)
        expected = Generator(model, cuda_graph=False).generate(ids, 24)
        assert torch.equal(gen.generate(ids, 24), expected), (batch, prompt)
    assert sorted(gen._slots) == [(1, 256), (1, 512), (3, 256)] and len(captures) == 3


@requires_cuda
def test_prefill_graphs_replay_and_agree_with_eager_prefill():
    """prefill_graphs: one graph per prompt length; its replays are bit-identical to each
    other and within rounding of the eager prompt forward (Generator's docstring: they are
    not bit-identical to it), and the decode after it runs from the graph's token."""
    model, config = _llama("cuda", "llama3-8b", layers=2)
    w8a8.quantize_model(model, skip=("lm_head",), progress=False)
    gen = Generator(model, prefill_graphs=True)
    g = torch.Generator("cuda").manual_seed(6)
    with torch.inference_mode():
        for batch, prompt in ((2, 33), (2, 100), (2, 33)):
            ids = torch.randint(0, config.vocab_size, (batch, prompt), device="cuda", generator=g)
            slot = gen.slot(batch, prompt + 16)
            graph = gen.prefill(slot, ids).clone()
            assert torch.equal(slot.ids[:, 0], graph.argmax(-1)) and int(slot.position) == prompt
            assert torch.equal(gen.prefill(slot, ids), graph)
            slot.cache.reset()
            eager = gen._prefill_step(slot, ids).float()
            scale = eager.abs().amax(-1, keepdim=True)
            assert ((graph.float() - eager).abs() <= scale * 2 ** -4).all(), (batch, prompt)
    assert sorted(gen._slots[2, 256].prefills) == [33, 100]
