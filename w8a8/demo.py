"""The demo: a transformers Llama quantized, run on the best backend, compared and timed.

On a GPU: a Llama at Llama-3-8B widths (GEN_LAYERS layers, random weights) generates
greedily, bf16 and W8A8, with ``w8a8.Generator``; tokens/s of each, and how W8A8's tokens
compare with bf16's. On a CPU: a small Llama (CPU_LAYERS layers of the "small" widths) on
the exact reference path, its logits' error and its time against the float model. Both need
transformers (``pip install 'w8a8[hf]'``).
"""
from __future__ import annotations

import copy
import statistics
import time

import torch
from torch import nn

from w8a8 import dispatch
from w8a8.quantize_model import quantize_model


# Widths of the random Llama models the demo (and the benchmarks) build: Llama-3-8B's on a GPU;
# "small" for the demo on the CPU (the exact float64 reference path runs it in seconds);
# "tiny" for smoke tests.
LLAMA_SIZES = {
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                      head_dim=128, vocab_size=128256, max_position_embeddings=8192),
    "small": dict(hidden_size=512, intermediate_size=1536, num_attention_heads=8, num_key_value_heads=4,
                  head_dim=64, vocab_size=1000),
    "tiny": dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 vocab_size=128),
}


def build_llama(size: str, layers: int, device, dtype: torch.dtype = torch.bfloat16):
    """``(LlamaForCausalLM, config)`` of ``LLAMA_SIZES[size]`` with ``layers`` decoder layers, random
    weights created on ``device`` in ``dtype`` (no download), SDPA attention, eval mode."""
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        raise SystemExit("w8a8 demo: needs transformers (pip install 'w8a8[hf]')") from None
    config = LlamaConfig(**LLAMA_SIZES[size], num_hidden_layers=layers, use_cache=False)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):  # parameters created and initialised on the device: seconds, not minutes
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default_dtype)
    return model.eval(), config


def _trained_scale(model: nn.Module, seed: int) -> None:
    """Weights at a trained-like scale (std 1/sqrt(fan_in)), so that activations stay O(1) and
    the logits pick tokens by clear margins."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 and "embed" not in name:
                p.normal_(std=p.shape[1] ** -0.5)


def _time_ms(fn, device: torch.device, repeats: int) -> float:
    """Median wall time of ``fn`` in ms, after one warm-up, synchronising around each call."""
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


# The GPU demo's generation: Llama-3-8B widths, this many decoder layers (about a minute in
# all on the H100, model build and captures included), one prompt, greedy.
GEN_LAYERS = 8
GEN_PROMPT = 128
GEN_NEW_TOKENS = 128


def generation(dev: torch.device, seed: int = 0) -> dict:
    """bf16 vs W8A8 greedy generation with w8a8.Generator (module docstring). Returns the figures it prints."""
    from w8a8.generation import Generator

    model, config = build_llama("llama3-8b", GEN_LAYERS, dev)
    _trained_scale(model, seed)
    qmodel = copy.deepcopy(model)
    report = quantize_model(qmodel, skip=("lm_head",), progress=True)
    ids = torch.randint(0, config.vocab_size, (1, GEN_PROMPT), device=dev)
    tokens, ms = {}, {}
    for name, m in (("bf16", model), ("w8a8", qmodel)):
        gen = Generator(m, prefill_graphs=True)
        gen.generate(ids, GEN_NEW_TOKENS)  # the first call captures the graphs
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        tokens[name] = gen.generate(ids, GEN_NEW_TOKENS)[0, GEN_PROMPT:]
        torch.cuda.synchronize(dev)
        ms[name] = (time.perf_counter() - t0) * 1e3
        gen.release()
    same = tokens["bf16"] == tokens["w8a8"]
    first_diff = int((~same).nonzero()[0]) if not bool(same.all()) else None
    print(f"device {dev} ({torch.cuda.get_device_name(dev)}), bfloat16")
    print(f"model: transformers LlamaForCausalLM, Llama-3-8B widths, {GEN_LAYERS} layers, random weights; "
          f"lm_head stays bf16")
    print(report.summary())
    print(f"greedy generation of {GEN_NEW_TOKENS} tokens after a {GEN_PROMPT}-token prompt, w8a8.Generator "
          f"(prompt and decode steps in CUDA graphs):")
    for name in ("bf16", "w8a8"):
        print(f"  {name}: {ms[name]:7.1f} ms, {GEN_NEW_TOKENS / ms[name] * 1e3:6.0f} tokens/s")
    print(f"  w8a8 / bf16: {ms['bf16'] / ms['w8a8']:.2f}x")
    print(f"  W8A8's tokens equal bf16's at {int(same.sum())} of {GEN_NEW_TOKENS} positions"
          + ("" if first_diff is None else f" (identical for the first {first_diff}; after a different token the "
                                          "two continue from different text)"))
    return {"ms": ms, "same": int(same.sum()), "first_diff": first_diff}


# The CPU demo: the "small" Llama, this many layers and prompt tokens, float32.
CPU_LAYERS = 4
CPU_TOKENS = 64


def run(device: str | None = None, repeats: int = 5, seed: int = 0) -> dict:
    """Build, quantize, compare and time. Returns the figures it prints."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda":
        return generation(dev, seed)
    model, config = build_llama("small", CPU_LAYERS, dev, torch.float32)
    _trained_scale(model, seed)
    qmodel = copy.deepcopy(model)
    report = quantize_model(qmodel, skip=("lm_head",), progress=True)
    backend = dispatch.choose("scaled_mm", dev)
    ids = torch.randint(0, config.vocab_size, (1, CPU_TOKENS), device=dev)
    with torch.inference_mode():
        ref = model(input_ids=ids).logits.float()
        out = qmodel(input_ids=ids).logits.float()
        rel_err = ((out - ref).norm() / ref.norm()).item()
        same = (out.argmax(-1) == ref.argmax(-1)).float().mean().item()
        t_float = _time_ms(lambda: model(input_ids=ids), dev, repeats)
        t_int8 = _time_ms(lambda: qmodel(input_ids=ids), dev, repeats)
    print(f"device {dev} (CPU), {torch.float32}")
    print(f"model: transformers LlamaForCausalLM, {CPU_LAYERS} layers, hidden {config.hidden_size}, "
          f"ffn {config.intermediate_size}, random weights, {CPU_TOKENS} tokens; lm_head stays float")
    print(report.summary())
    print("fusion:", qmodel.w8a8_fusion.summary())
    print(f"scaled_mm kernels: {backend}")
    print(f"logits vs the float model: relative L2 error {rel_err:.4f}, same top token at {100 * same:.0f}% "
          "of positions")
    print(f"time per forward (median of {repeats}): float {t_float:.2f} ms, w8a8 {t_int8:.2f} ms "
          f"({t_float / t_int8:.2f}x)")
    print("note: on the CPU, w8a8 runs the exact reference path (float64 matmul); it checks, it is not fast.")
    return {"rel_err": rel_err, "t_float_ms": t_float, "t_int8_ms": t_int8, "backend": backend}
