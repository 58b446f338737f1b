"""Hand-written models for the tests: a transformer-style decoder stack in plain torch.

Not a transformers model on purpose: the fusion and quantize_model tests must find what to
fuse from the computation alone (no class or attribute names they know).
"""
from __future__ import annotations

import dataclasses

import torch
from torch import nn


@dataclasses.dataclass(frozen=True)
class DecoderSize:
    hidden: int
    ffn: int
    layers: int
    tokens: int


# Small enough that the exact float64 reference path runs in seconds.
CPU_SIZE = DecoderSize(hidden=512, ffn=1536, layers=4, tokens=64)


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

    def __init__(self, size: DecoderSize) -> None:
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

    def __init__(self, size: DecoderSize) -> None:
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
    def __init__(self, size: DecoderSize, vocab: int = 1000) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(size) for _ in range(size.layers))
        self.norm = RMSNorm(size.hidden)
        self.lm_head = nn.Linear(size.hidden, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.norm(x))
