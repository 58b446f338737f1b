"""W8A8Linear's tensors are frozen parameters: tools that walk parameters see them, the state
dict is what it was, and nothing can train them."""
import pytest
import torch
from torch import nn

import w8a8


def test_parameters_are_frozen_and_the_state_dict_unchanged():
    layer = w8a8.W8A8Linear.from_linear(nn.Linear(32, 16), act_quant="static", input_scale=0.02)
    params = dict(layer.named_parameters())
    assert set(params) == {"weight", "weight_scale", "input_scale", "bias"}
    assert not any(p.requires_grad for p in params.values()) and not list(layer.buffers())
    assert params["weight"].dtype == torch.int8 and params["weight_scale"].dtype == torch.float32
    assert list(layer.state_dict()) == ["weight", "weight_scale", "input_scale", "bias"]
    assert not [p for p in layer.parameters() if p.requires_grad]  # an optimizer gets nothing to train


def test_transformers_parameter_count_keeps_every_weight():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    model = transformers.LlamaForCausalLM(config)
    before = model.num_parameters()
    report = w8a8.quantize_model(model, skip=("lm_head",), progress=False)
    layers = [model.get_submodule(name) for name in report.replaced]
    # Every weight element is still counted (as int8), plus one fp32 scale per output channel.
    assert model.num_parameters() == before + sum(m.out_features for m in layers)
    assert model.num_parameters(only_trainable=True) == before - sum(m.weight.numel() for m in layers)


def test_moves_and_casts_keep_them_frozen_parameters():
    layer = w8a8.W8A8Linear.from_linear(nn.Linear(32, 16)).to(torch.bfloat16).to("meta")
    assert all(type(p) is nn.Parameter and not p.requires_grad for p in layer.parameters())
    assert layer.weight.dtype == torch.int8 and layer.weight_scale.dtype == torch.float32
    assert layer.bias.dtype == torch.bfloat16 and layer.weight.is_meta
