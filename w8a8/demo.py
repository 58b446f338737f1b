"""The demo: a small transformer-style model, quantized, run on the best backend, compared and timed."""
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


def run(device: str | None = None, repeats: int = 5, seed: int = 0) -> dict:
    """Build, quantize, compare and time. Returns the figures it prints."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
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
