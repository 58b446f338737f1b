"""w8a8.Generator (w8a8/generation/generator.py): greedy generation with the decode step in a CUDA graph.

CPU: a tiny random transformers Llama, float and W8A8 (reference path): the Generator's
tokens equal transformers' own greedy generate, over changing batch sizes and prompt
lengths with one Generator. CUDA: Llama-3-8B widths (2 layers), the graph's logits equal the
same steps run eagerly, bit for bit, over 128 greedy tokens.
"""
import copy

import pytest
import torch

pytest.importorskip("transformers")

import w8a8  # noqa: E402
from w8a8.generation import generator as generation  # noqa: E402
from w8a8.generation import steps  # noqa: E402
from w8a8.generation import Generator  # noqa: E402

from helpers import CUDA, poison_allocator, requires_cuda  # noqa: E402

# Triton's interpreter (the CPU path) rounds fp32 to bf16 by truncation and has no bf16 dot:
# on the CPU the kernels are checked in fp16, on a GPU in both.
HALF = (torch.float16, torch.bfloat16) if CUDA else (torch.float16,)
DEV = "cuda" if CUDA else "cpu"


def _llama(device="cpu", size="tiny", layers=2, dtype=None):
    from w8a8.demo import build_llama

    model, config = build_llama(size, layers, torch.device(device))
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
    assert sorted(gen._slots) == [(1, 256, False), (3, 256, False), (3, 512, False)]


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
    out, _ = steps._sdpa_packed_gqa(module, q, k, v, mask, scaling=0.25)
    kr, vr = (t.repeat_interleave(heads // kv_heads, dim=1) for t in (k, v))
    scores = (q @ kr.transpose(-1, -2)) * 0.25
    expected = (scores.masked_fill(~mask, float("-inf")).softmax(-1) @ vr).transpose(1, 2)
    assert out.shape == (batch, 1, heads, dim)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


# --- the step's kernels (w8a8/generation/kernels.py) against what they replace ------------------------


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("batch,seq,cos_batch", [(1, 1, 1), (3, 1, 3), (2, 17, 1), (1, 100, 1)])
def test_rope_kernel_equals_transformers(dtype, batch, seq, cos_batch):
    """Bit for bit transformers' apply_rotary_pos_emb, on the transposed views the attention
    gives it (q, k [B, S, H, D] memory), the outputs keeping those strides."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    kernels = steps.triton_generation()
    heads, kv_heads, dim = 8, 2, 32
    q = torch.randn(batch, seq, heads, dim, device=DEV).to(dtype).transpose(1, 2)
    k = torch.randn(batch, seq, kv_heads, dim, device=DEV).to(dtype).transpose(1, 2)
    angle = torch.rand(cos_batch, seq, dim, device=DEV) * 6.3
    cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
    poison_allocator(q.numel() * 2, DEV)
    got = kernels.rope(q, k, cos, sin)
    expected = apply_rotary_pos_emb(q, k, cos, sin)
    for a, b in zip(got, expected):
        assert torch.equal(a, b) and a.transpose(1, 2).is_contiguous() and b.transpose(1, 2).is_contiguous()


_ROPE_PTX = """
import re, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from w8a8.generation import kernels as generation
signature = {n: "*bf16" if n.endswith("_ptr") else "constexpr" if n.isupper() and n.startswith(("HALF", "BLOCK"))
             else "i32" for n in generation._rope_kernel.arg_names}
src = ASTSource(fn=generation._rope_kernel, signature=signature, constexprs={"HALF": 64, "BLOCK_H": 32})
ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "enable_fp_fusion": False}).asm["ptx"]
print(len(re.findall(r"fma\\.rn", ptx)), len(re.findall(r"mul\\.rn\\.bf16", ptx)), len(re.findall(r"add\\.rn\\.bf16", ptx)))
"""


def test_rope_kernel_compiles_without_contraction():
    """The launch's enable_fp_fusion=False keeps torch's roundings: compiled offline for sm_90,
    the bf16 kernel has separately rounded multiplies and adds and no fma (with contraction
    Triton fuses them into fma.rn.bf16, which differed from torch by 1 ulp on the H100)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2])] + (
        [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    run = subprocess.run([sys.executable, "-c", _ROPE_PTX], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    fma, mul, add = map(int, run.stdout.split())
    assert fma == 0 and mul >= 2 and add >= 1, run.stdout


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("start,seq", [(0, 1), (5, 1), (0, 13), (250, 6)])
def test_cache_write_kernel(dtype, start, seq):
    """The states land at start.. in every row and head, nothing else changes, and positions
    past the cache's end (250 + 6 > 255) are not written."""
    kernels = steps.triton_generation()
    batch, kv_heads, length, dim = 3, 2, 255, 16
    keys = torch.randn(batch, kv_heads, length, dim, device=DEV).to(dtype)
    values = torch.randn_like(keys)
    k = torch.randn(batch, seq, kv_heads, dim, device=DEV).to(dtype).transpose(1, 2)
    v = torch.randn(batch, seq, kv_heads, dim, device=DEV).to(dtype).transpose(1, 2)
    ek, ev = keys.clone(), values.clone()
    end = min(start + seq, length)
    ek[:, :, start:end], ev[:, :, start:end] = k[:, :, :end - start], v[:, :, :end - start]
    kernels.cache_write(keys, values, k, v, torch.tensor(start, device=DEV))
    assert torch.equal(keys, ek) and torch.equal(values, ev)


def _attention_math(q, keys, values, mask, length, scale):
    """softmax(q k^T scale) v over keys < length that mask allows, every KV head repeated, fp32."""
    groups = q.shape[1] // keys.shape[1]
    kr, vr = (t.float().repeat_interleave(groups, dim=1) for t in (keys, values))
    allowed = torch.arange(keys.shape[2], device=q.device) < length
    if mask is not None:
        allowed = allowed & mask
    scores = (q.float() @ kr.transpose(-1, -2)) * scale
    return (scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ vr).transpose(1, 2)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("batch,heads,kv_heads,dim", [(1, 32, 8, 128), (3, 8, 2, 64), (2, 4, 4, 16), (5, 16, 2, 32)])
@pytest.mark.parametrize("length", [1, 63, 64, 65, 201, 320])
def test_decode_attention_kernel_matches_math(monkeypatch, dtype, batch, heads, kv_heads, dim, length):
    """Against the attention written out in fp32: lengths at and around the 64-key tile and the
    whole cache, a mask with holes (row 1 misses its first 3 keys), grouped and plain heads,
    one slice per KV head or many (PROGRAMS_PER_SM raised so the CPU gets several too)."""
    kernels = steps.triton_generation()
    cache = 320
    q = torch.randn(batch, 1, heads, dim, device=DEV).to(dtype).transpose(1, 2)
    keys = torch.randn(batch, kv_heads, cache, dim, device=DEV).to(dtype)
    values = torch.randn_like(keys)
    mask = torch.ones(batch, 1, 1, cache, dtype=torch.bool, device=DEV)
    if batch > 1 and length > 3:
        mask[1, ..., :3] = False
    expected = _attention_math(q, keys, values, mask, length, dim ** -0.5)
    for programs in (1, 64):
        monkeypatch.setattr(kernels, "PROGRAMS_PER_SM", programs)
        poison_allocator(batch * heads * dim * 64, DEV)
        out = kernels.decode_attention(q, keys, values, mask, torch.tensor(length, device=DEV), dim ** -0.5)
        assert out.shape == (batch, 1, heads, dim) and out.dtype == dtype and out.is_contiguous()
        tol = 2e-2 if dtype == torch.bfloat16 else 3e-3
        torch.testing.assert_close(out.float(), expected, rtol=tol, atol=tol)
    no_mask = kernels.decode_attention(q, keys, values, None, torch.tensor(length, device=DEV), dim ** -0.5)
    torch.testing.assert_close(no_mask.float(), _attention_math(q, keys, values, None, length, dim ** -0.5),
                               rtol=tol, atol=tol)


def test_kernels_reject_what_they_do_not_take():
    kernels = steps.triton_generation()
    q = torch.randn(1, 4, 1, 16, dtype=torch.float16, device=DEV)
    keys = torch.randn(1, 2, 8, 16, dtype=torch.float16, device=DEV)
    with pytest.raises(ValueError, match=r"w8a8 decode_attention: expected q \[B, H, 1, D\].*got q torch.float32"):
        kernels.decode_attention(q.float(), keys, keys, None, torch.tensor(3, device=DEV))
    with pytest.raises(ValueError, match=r"w8a8 rope: expected .* got q torch.float16 \[1, 4, 1, 16\], k torch.float16 "
                                         r"\[1, 2, 8, 16\]"):
        kernels.rope(q, keys, keys[0], keys[0])
    with pytest.raises(ValueError, match=r"w8a8 cache_write: expected .*got keys torch.float16 \[1, 2, 8, 16\], k "
                                         r"torch.float32"):
        kernels.cache_write(keys, keys, keys[:, :, :1].float(), keys[:, :, :1].float(), torch.tensor(0, device=DEV))


@pytest.fixture(scope="module")
def half_models():
    """The tiny Llama in fp16 (the kernels' dtypes), float and W8A8."""
    model, config = _llama(DEV)
    model = model.half()
    quantized = copy.deepcopy(model)
    w8a8.quantize_model(quantized, skip=("lm_head",), progress=False)
    return {"fp16": model, "w8a8": quantized}, config


@pytest.mark.parametrize("impl", ["fp16", "w8a8"])
def test_generator_kernels_agree_with_transformers_path(half_models, impl, monkeypatch):
    """kernels=True (rope, cache write and decode attention in Triton; on the CPU in the
    interpreter) against kernels=False (transformers' own code and SDPA): each kernel runs,
    the prompt's logits are bit-identical (rope and the cache write are exact; the prompt's
    attention is SDPA either way), the decode logits agree within the attention's rounding,
    the tokens are equal; and transformers' functions are back in place afterwards."""
    from transformers.models.llama import modeling_llama

    kernels = steps.triton_generation()
    calls = {"rope": 0, "cache_write": 0, "decode_attention": 0}
    for name in calls:
        fn = getattr(kernels, name)
        monkeypatch.setattr(kernels, name, lambda *a, _fn=fn, _name=name, **k: (
            calls.__setitem__(_name, calls[_name] + 1), _fn(*a, **k))[1])
    model, config = half_models[0][impl], half_models[1]
    original = modeling_llama.apply_rotary_pos_emb
    ids = torch.randint(0, config.vocab_size, (3, 9), device=DEV, generator=torch.Generator(DEV).manual_seed(7))
    tokens, logits = Generator(model, kernels=True).generate(ids, 10, output_logits=True)
    assert all(calls.values()), calls
    assert modeling_llama.apply_rotary_pos_emb is original and model.config._attn_implementation == "sdpa"
    plain_tokens, plain_logits = Generator(model, kernels=False).generate(ids, 10, output_logits=True)
    assert torch.equal(logits[:, 0], plain_logits[:, 0])
    torch.testing.assert_close(logits.float(), plain_logits.float(), rtol=0, atol=2e-2 * float(logits.abs().max()))
    assert torch.equal(tokens, plain_tokens)


def test_fused_rope_keeps_a_function_it_does_not_match(monkeypatch):
    """A modeling module's apply_rotary_pos_emb that is not transformers' formula (here: no
    rotate_half) is checked once, warned about, and kept: its outputs, every call."""
    def other_rope(q, k, cos, sin, unsqueeze_dim=1):
        return q * cos.unsqueeze(1), k * cos.unsqueeze(1)

    monkeypatch.setattr(steps, "ACTIVE", generation._Slot(cache=None, ids=None, position=None, kernels=True))
    fused = steps._FusedRope(other_rope)
    q, k = torch.randn(1, 4, 2, 16, device=DEV).half(), torch.randn(1, 2, 2, 16, device=DEV).half()
    cos, sin = torch.randn(1, 2, 16, device=DEV).half(), torch.randn(1, 2, 16, device=DEV).half()
    with pytest.warns(UserWarning, match="apply_rotary_pos_emb does not match the fused rotary kernel"):
        first = fused(q, k, cos, sin)
    assert steps._FusedRope.checked[other_rope] is False
    for got in (first, fused(q, k, cos, sin)):
        assert all(torch.equal(a, b) for a, b in zip(got, other_rope(q, k, cos, sin)))


def test_errors_name_the_call(models):
    model = models[0]["float"]
    with pytest.raises(ValueError, match=r"w8a8.Generator: cuda_graph=True needs the model on a CUDA device, it is on cpu"):
        Generator(model, cuda_graph=True)
    with pytest.raises(ValueError, match=r"w8a8.Generator: prefill_graphs=True needs cuda_graph"):
        Generator(model, prefill_graphs=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("TRITON_INTERPRET", raising=False)
        with pytest.raises(ValueError, match=r"w8a8.Generator: kernels=True needs the model on a CUDA device \(or "
                                             r"Triton's interpreter, TRITON_INTERPRET=1\), it is on cpu"):
            Generator(model, kernels=True)
    gen = Generator(model)
    with pytest.raises(ValueError, match=r"Generator.generate: input_ids must be int64 \[batch, prompt\] on cpu, "
                                         r"got torch.int32 \[1, 3\] on cpu"):
        gen.generate(torch.zeros(1, 3, dtype=torch.int32), 2)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1, got 0"):
        gen.generate(torch.zeros(1, 3, dtype=torch.long), 0)


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
    assert sorted(gen._slots) == [(1, 256, False), (1, 512, False), (3, 256, False)] and len(captures) == 3


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
    assert sorted(gen._slots[2, 256, False].prefills) == [33, 100]
