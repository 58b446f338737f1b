"""Shared by the Generator's option tests (test_generator_stops.py, test_generator_sampling.py):
one CPU thread, a tiny Llama at a trained-like weight scale in float32 and W8A8, and a streamer
that records what it is given."""
import copy

import pytest
import torch

import w8a8


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """One intra-op thread: these models are tiny, and two threads on a shared 2-core CPU run
    transformers' generate 30x slower (the threads wait on each other). A module that imports
    this fixture gets it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_llama(vocab: int, pad: int, head_rows=None) -> dict:
    """{"float": a tiny LlamaForCausalLM (sdpa, 2 layers), "w8a8": its quantized copy}. Weights at a
    trained-like scale (logits with a spread, varied greedy text); ``head_rows``: a bool mask of the
    vocabulary, the output head's other rows zeroed (those tokens never come)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, num_hidden_layers=2)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 and "embed" not in name:
                p.normal_(std=p.shape[1] ** -0.5)
        if head_rows is not None:
            model.lm_head.weight[~head_rows] = 0
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = pad
    quantized = copy.deepcopy(model)
    w8a8.quantize_model(quantized, skip=("lm_head",), progress=False)
    return {"float": model, "w8a8": quantized}


class Recorder:
    """A streamer that keeps what it is given."""

    def __init__(self):
        self.puts, self.ends = [], 0

    def put(self, value):
        self.puts.append(value.clone())

    def end(self):
        self.ends += 1
