"""The demo: a model quantized, run on the best backend, compared and timed.

On a GPU (with transformers installed): a Llama at Llama-3-8B widths (GEN_LAYERS layers,
random weights) generates greedily, bf16 and W8A8, with ``w8a8.Generator``; tokens/s of
each, and how W8A8's tokens compare with bf16's. On a CPU (or without transformers): a
small transformer-style model on the exact reference path, its error and time against
the float model.
"""
from __future__ import annotations

import copy
import dataclasses
import statistics
import time

import torch
from torch import nn

from w8a8 import dispatch
from w8a8.quantize_model import quantize_model


@dataclasses.dataclass(frozen=True)
class DemoSize:
    hidden: int
    ffn: int
    layers: int
    tokens: int


# CPU: small enough that the exact float64 reference path runs in seconds.
CPU_SIZE = DemoSize(hidden=512, ffn=1536, layers=4, tokens=64)
# GPU: Llama-3-8B-like widths, so the int8 kernels have work to do.
GPU_SIZE = DemoSize(hidden=4096, ffn=14336, layers=4, tokens=2048)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, size: DemoSize) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(size.hidden, size.ffn, bias=False)
        self.up_proj = nn.Linear(size.hidden, size.ffn, bias=False)
        self.down_proj = nn.Linear(size.ffn, size.hidden, bias=False)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """Pre-norm block: a token-local 'attention' (q/k/v, a gate, o; no attention math) and a SwiGLU MLP.

    Written as a float model; ``quantize_model`` finds what to fuse at its first forward:
    q/k/v read one normed activation (one quantization, one merged GEMM, the quantization
    done by norm1), gate/up likewise after norm2, and the MLP's SiLU-and-mul quantizes the
    product that down_proj reads.
    """

    def __init__(self, size: DemoSize) -> None:
        super().__init__()
        self.norm1 = RMSNorm(size.hidden)
        self.q_proj = nn.Linear(size.hidden, size.hidden, bias=False)
        self.k_proj = nn.Linear(size.hidden, size.hidden, bias=False)
        self.v_proj = nn.Linear(size.hidden, size.hidden, bias=False)
        self.o_proj = nn.Linear(size.hidden, size.hidden, bias=False)
        self.norm2 = RMSNorm(size.hidden)
        self.mlp = MLP(size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        q, k, v = self.q_proj(h), self.k_proj(h), self.v_proj(h)
        x = x + self.o_proj(v * torch.sigmoid(q * k))
        return x + self.mlp(self.norm2(x))


class TinyDecoder(nn.Module):
    def __init__(self, size: DemoSize, vocab: int = 1000) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(size) for _ in range(size.layers))
        self.norm = RMSNorm(size.hidden)
        self.lm_head = nn.Linear(size.hidden, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.norm(x))


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
    from w8a8.bench.model import build_model
    from w8a8.generation import Generator

    model, config = build_model("llama3-8b", GEN_LAYERS, dev)
    torch.manual_seed(seed)
    with torch.no_grad():  # trained-like scale, so that the logits pick tokens by clear margins
        for name, p in model.named_parameters():
            if p.dim() == 2 and "embed" not in name:
                p.normal_(std=p.shape[1] ** -0.5)
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


def run(device: str | None = None, repeats: int = 5, seed: int = 0) -> dict:
    """Build, quantize, compare and time. Returns the figures it prints."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda":
        try:
            import transformers  # noqa: F401
        except ImportError:
            print("transformers is not installed: the demo runs its small model instead of generation")
        else:
            return generation(dev, seed)
    size = GPU_SIZE if dev.type == "cuda" else CPU_SIZE
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    torch.manual_seed(seed)
    model = TinyDecoder(size).to(dev, dtype).eval()
    for p in model.parameters():  # trained-like scale: keep activations O(1)
        if p.dim() == 2:
            nn.init.normal_(p, std=p.shape[1] ** -0.5)
    qmodel = copy.deepcopy(model)
    report = quantize_model(qmodel, skip=("lm_head",), progress=True)
    backend = dispatch.choose("scaled_mm", dev)
    x = torch.randn(size.tokens, size.hidden, device=dev, dtype=dtype)
    with torch.inference_mode():
        ref = model(x).float()
        qmodel(x)  # the first forward: w8a8.fuse records what to fuse (shared and fused quantization, merged GEMMs)
        out = qmodel(x).float()
        rel_err = ((out - ref).norm() / ref.norm()).item()
        cos = nn.functional.cosine_similarity(out.flatten(), ref.flatten(), dim=0).item()
        t_float = _time_ms(lambda: model(x), dev, repeats)
        t_int8 = _time_ms(lambda: qmodel(x), dev, repeats)
    print(f"device {dev} ({torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'CPU'}), {dtype}")
    print(f"model: {size.layers} blocks, hidden {size.hidden}, ffn {size.ffn}, {size.tokens} tokens")
    print(report.summary())
    print("fusion:", qmodel.w8a8_fusion.summary())
    print(f"scaled_mm kernels: {backend}")
    print(f"output error vs float model: relative L2 {rel_err:.4f}, cosine {cos:.5f}")
    print(f"time per forward (median of {repeats}): float {t_float:.2f} ms, w8a8 {t_int8:.2f} ms "
          f"({t_float / t_int8:.2f}x)")
    if dev.type == "cpu":
        print("note: on the CPU, w8a8 runs the exact reference path (float64 matmul); it checks, it is not fast.")
    return {"rel_err": rel_err, "t_float_ms": t_float, "t_int8_ms": t_int8, "backend": backend}
