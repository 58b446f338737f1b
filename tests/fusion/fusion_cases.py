"""The models of the fused-model behaviour tests (tests/fusion/test_fusion_behaviour.py,
tests/fusion/test_fusion_steps_aside.py): tiny random Llama, Mistral, Qwen2 (transformers) and
the hand-written TinyDecoder (tests/models.py) as a ``Case``, a fused and an unfused quantized
copy of each, and the w8a8 ops a decoder layer runs, fused and not.
"""
from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch

import w8a8
from models import DecoderSize, TinyDecoder

transformers = pytest.importorskip("transformers")

ARCHS = ["llama", "mistral", "qwen2", "tiny"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
LAYERS = 2


class Case:
    """A float model of ``arch`` and how to run it: ``inputs(seed)`` and ``run(model, inputs)``."""

    def __init__(self, arch: str, dtype=torch.float32, hidden: int = 48, ffn: int = 37):
        torch.manual_seed(0)
        self.arch, self.dtype = arch, dtype
        if arch == "tiny":
            self.model = TinyDecoder(DecoderSize(hidden=hidden, ffn=ffn, layers=LAYERS, tokens=8), vocab=64)
            self.hidden = hidden
        else:
            cfg_cls = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
                       "qwen2": transformers.Qwen2Config}[arch]
            model_cls = {"llama": transformers.LlamaForCausalLM, "mistral": transformers.MistralForCausalLM,
                         "qwen2": transformers.Qwen2ForCausalLM}[arch]
            cfg = cfg_cls(hidden_size=hidden, intermediate_size=ffn, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=16, vocab_size=64, num_hidden_layers=LAYERS, use_cache=False)
            self.model = model_cls(cfg)
        self.model = self.model.to(dtype).eval()
        with torch.no_grad():  # norms away from 1, so that a wrong weight would show
            for name, p in self.model.named_parameters():
                if p.dim() == 1 and "norm" in name:
                    p.uniform_(0.5, 1.5)

    def inputs(self, seed: int = 1, batch: int = 2, tokens: int = 11):
        g = torch.Generator().manual_seed(seed)
        if self.arch == "tiny":
            return torch.randn(batch, tokens, self.hidden, generator=g).to(self.dtype)
        return torch.randint(0, 64, (batch, tokens), generator=g)

    def run(self, model, inputs):
        with torch.inference_mode():
            out = model(inputs)
        return out if self.arch == "tiny" else out.logits

    def layers(self, model):
        return model.blocks if self.arch == "tiny" else model.model.layers

    def pair(self):
        """(unfused, fused) quantized copies; the fused one recorded and swapped in by a first forward."""
        plain, fused = copy.deepcopy(self.model), copy.deepcopy(self.model)
        w8a8.quantize_model(plain, progress=False, report=False, fuse=False)
        w8a8.quantize_model(fused, progress=False, report=False)
        self.run(fused, self.inputs(seed=0, batch=1, tokens=8))
        assert fused.w8a8_fusion.norms and fused.w8a8_fusion.mlps, fused.w8a8_fusion
        return plain, fused


def _attn(case, layer):
    return layer if case.arch == "tiny" else layer.self_attn


def _norms(case, model):
    return [m for n, m in model.named_modules() if "norm" in n.rsplit(".", 1)[-1]]


def _eps_name(case) -> str:
    return "eps" if case.arch == "tiny" else "variance_epsilon"


def _act_name(case) -> str:
    return "act" if case.arch == "tiny" else "act_fn"


def _assert_same(case, fused, plain, seed=3):
    x = case.inputs(seed)
    got, want = case.run(fused, x), case.run(plain, x)
    assert got.dtype == want.dtype and torch.equal(got, want), float((got.float() - want.float()).abs().max())
    return got


# Per decoder layer, fused: the input norm quantizes for q/k/v (one merged GEMM), the
# post-attention norm for gate/up (one merged GEMM), SiLU-and-mul for down; o_proj quantizes
# its own input (w8a8.linear). Unfused: seven w8a8.linear.
FUSED_PER_LAYER = Counter(rms_norm_quant=2, silu_mul_quant=1, linear=1, scaled_mm=3)
UNFUSED_PER_LAYER = Counter(linear=7)
