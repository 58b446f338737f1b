"""quantize_model on odd modules and bad arguments; smooth on non-finite data."""
import warnings

import pytest
import torch
from torch import nn

import w8a8


class WithMHA(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(32, 4, batch_first=True)
        self.fc = nn.Linear(32, 16)

    def forward(self, x):
        return self.fc(self.attn(x, x, x, need_weights=False)[0])


def test_multihead_attention_out_proj_is_skipped_with_the_reason():
    model = WithMHA().eval()
    x = torch.randn(2, 5, 32)
    report = w8a8.quantize_model(model, progress=False)
    assert report.replaced == ["fc"]
    assert "MultiheadAttention reads its weight directly" in report.skipped["attn.out_proj"]
    assert type(model.attn.out_proj) is nn.modules.linear.NonDynamicallyQuantizableLinear
    with torch.no_grad():
        assert model(x).shape == (2, 5, 16)  # the next forward runs
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True).eval()
    with pytest.warns(UserWarning, match="replaced no layer"):
        report = w8a8.quantize_model(layer, progress=False)
    assert report.replaced == [] and {"linear1", "linear2", "self_attn.out_proj"} <= set(report.skipped)
    with torch.no_grad():
        layer(x)  # the fused inference fast path reads linear1 / linear2 weights


def test_transformers_conv1d_is_reported_and_nothing_replaced_warns():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64, n_positions=16)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with pytest.warns(UserWarning, match=r"quantize_model: replaced no layer"):
        report = w8a8.quantize_model(model, progress=False)
    assert "transformers Conv1D" in report.skipped["transformer.h.0.attn.c_attn"]
    assert {"transformer.h.0.mlp.c_fc", "transformer.h.0.mlp.c_proj"} <= set(report.skipped)
    assert report.replaced == [] and "Conv1D" in report.summary()


def test_a_model_without_linears_warns():
    with pytest.warns(UserWarning, match=r"replaced no layer .*the model holds no nn.Linear"):
        w8a8.quantize_model(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()), progress=False)


def test_skip_as_a_string_and_unmatched_patterns():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    report = w8a8.quantize_model(model, skip="2", progress=False)
    assert report.replaced == ["0"] and report.skipped == {"2": "matches skip"}
    assert report.unmatched_skip == []
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    report = w8a8.quantize_model(model, skip=["lm_head", "2", "decoder.*"], progress=False)
    assert report.unmatched_skip == ["lm_head", "decoder.*"]
    assert "matched no layer: ['lm_head', 'decoder.*']" in report.summary()
    with pytest.raises(TypeError, match=r"skip must be a string or a list of strings"):
        w8a8.quantize_model(nn.Sequential(nn.Linear(8, 8)), skip=[3], progress=False)


@pytest.mark.parametrize("bad", [float("nan"), 0.0, -1.0, float("inf")])
def test_a_bad_static_scale_names_the_layer_and_leaves_the_model_untouched(bad):
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.Linear(8, 4))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    scales = {"0": 0.1, "2": bad, "3": 0.2}
    with pytest.raises(ValueError, match=r"quantize_model: layer '2': .*input_scale must be finite and > 0"):
        w8a8.quantize_model(model, skip=(), act_quant="static", input_scales=scales, progress=False)
    assert all(type(m) is nn.Linear for m in (model[0], model[2], model[3]))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())


def test_no_warning_when_something_is_replaced():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w8a8.quantize_model(nn.Sequential(nn.Linear(8, 8)), progress=False)


class _NormLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.fc = nn.Linear(16, 8)
        self.norm2 = nn.LayerNorm(8)
        self.fc2 = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc2(self.norm2(self.fc(self.norm(x))))


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_smooth_refuses_non_finite_statistics_before_changing_anything(bad):
    model = _NormLinear()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(4, 16)
    x[2, 3] = bad
    with pytest.raises(ValueError, match=r"w8a8.calibrate.smooth: layer 'fc\d?' saw non-finite inputs"):
        w8a8.calibrate.smooth(model, [torch.randn(4, 16), x], {"norm": ["fc"], "norm2": ["fc2"]}, progress=False)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())
    with pytest.raises(ValueError, match=r"w8a8.calibrate.calibrate: layer"):  # the same data, the same answer
        w8a8.calibrate.calibrate(model, [x], progress=False)
