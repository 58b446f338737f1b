"""calibrate records each Linear's input abs-max; the scales drive static quantization."""
import pytest
import torch
from torch import nn

import w8a8
from helpers import LINEAR_REL_TOL


def _model():
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16), nn.Linear(16, 4))


def test_scales_are_input_absmax_over_all_batches():
    model = _model()
    batches = [torch.randn(5, 32) * (i + 1) for i in range(3)]
    scales = w8a8.calibrate.calibrate(model, batches, skip=("3",), progress=False)
    assert set(scales) == {"0", "2"}
    x = torch.cat(batches)
    with torch.no_grad():  # batch by batch, as calibrate runs them: a matmul over the concatenated
        h = torch.cat([model[1](model[0](b)) for b in batches])  # rows may differ in the last bit
    assert scales["0"] == (x.abs().amax() / torch.tensor(127.0)).item()
    assert scales["2"] == (h.abs().amax() / torch.tensor(127.0)).item()
    assert all(not m._forward_pre_hooks for m in model.modules())


def test_static_model_from_calibration_is_close_to_float():
    model = _model()
    x = torch.randn(16, 32)
    with torch.no_grad():
        ref = model(x)
    scales = w8a8.calibrate.calibrate(model, [x[:8], (x[8:],)], skip=(), progress=False)
    w8a8.quantize_model(model, skip=(), act_quant="static", input_scales=scales, progress=False)
    assert model[0].input_scale.item() == pytest.approx(scales["0"])
    with torch.no_grad():
        out = model(x)
    assert ((out - ref).norm() / ref.norm()).item() < 2 * LINEAR_REL_TOL[torch.float32]


def test_dict_batches_and_zero_inputs():
    class Kw(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x=None):
            return self.fc(x)

    assert set(w8a8.calibrate.calibrate(Kw(), [{"x": torch.randn(2, 8)}], progress=False)) == {"fc"}
    with pytest.raises(ValueError, match=r"w8a8.calibrate.calibrate: layer 'fc' saw input abs-max 0.0"):
        w8a8.calibrate.calibrate(Kw(), [{"x": torch.zeros(2, 8)}], progress=False)


def _tiny_llama():
    import transformers

    cfg = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256, tie_word_embeddings=False,
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # activation outliers in a few hidden channels, as in real LLMs
        for layer in model.model.layers:
            layer.input_layernorm.weight[:3] = 40.0
            layer.post_attention_layernorm.weight[:3] = 40.0
    return model


def test_smoothquant_keeps_the_float_function_of_a_llama():
    model = _tiny_llama()
    mappings = w8a8.calibrate.llama_mappings(model)
    assert mappings["model.layers.1.input_layernorm"] == [
        "model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.k_proj", "model.layers.1.self_attn.v_proj"
    ]
    assert len(mappings) == 4
    calib = [torch.randint(0, 256, (2, 16)) for _ in range(4)]
    ids = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        ref = model(ids).logits
    report = w8a8.calibrate.smooth(model, calib, mappings, alpha=0.5, progress=False)
    factors = report.factors
    assert set(report.error_before) == set(report.error_after) == {t for ts in mappings.values() for t in ts}
    assert factors["model.layers.0.input_layernorm"].shape == (64,)
    assert factors["model.layers.0.input_layernorm"][:3].min() > factors["model.layers.0.input_layernorm"][3:].max()
    with torch.no_grad():
        smoothed = model(ids).logits
    assert ((smoothed - ref).norm() / ref.norm()).item() < 1e-5  # the same float function


class _NormLinear(nn.Module):
    """LayerNorm with outlier channels feeding one Linear: the case SmoothQuant is for."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(64)
        self.fc = nn.Linear(64, 32)
        with torch.no_grad():
            self.norm.weight[:3] = 50.0
            self.fc.weight[:, :3] /= 50.0  # the outlier channels carry little of the output

    def forward(self, x):
        return self.fc(self.norm(x))


@pytest.mark.parametrize("alpha", [0.5, 0.8])
def test_smoothquant_reduces_static_int8_error_with_outliers(alpha):
    import copy

    model = _NormLinear()
    calib = [torch.randn(32, 64) for _ in range(4)]
    x = torch.randn(64, 64)
    with torch.no_grad():
        ref = model(x)
    errs = []
    for do_smooth in (False, True):
        m = copy.deepcopy(model)
        if do_smooth:
            report = w8a8.calibrate.smooth(m, calib, {"norm": ["fc"]}, alpha=alpha, progress=False)
            # The report's simulated error drops the same way as the real quantized model's below.
            assert report.error_after["fc"] < 0.25 * report.error_before["fc"], report.summary()
            assert "fc: " in report.summary()
        scales = w8a8.calibrate.calibrate(m, calib, progress=False)
        w8a8.quantize_model(m, act_quant="static", input_scales=scales, progress=False)
        with torch.no_grad():
            errs.append(((m(x) - ref).norm() / ref.norm()).item())
    assert errs[1] < 0.25 * errs[0], errs  # measured: 0.03-0.08


def test_smooth_argument_errors():
    model = _model()
    with pytest.raises(ValueError, match=r"w8a8.calibrate.smooth: alpha must be in \[0, 1\], got 1.5"):
        w8a8.calibrate.smooth(model, [], {"1": ["2"]}, alpha=1.5)
    with pytest.raises(ValueError, match=r"w8a8.calibrate.smooth: '1' is a ReLU, expected nn.Linear"):
        w8a8.calibrate.smooth(model, [], {"0": ["1"]})


def test_tokenizer_output_is_a_batch_of_keyword_arguments():
    """A tokenizer returns a BatchEncoding (a UserDict, not a dict): it is passed as keywords."""
    transformers = pytest.importorskip("transformers")

    class Keyword(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(x)

    model = Keyword()
    x = torch.randn(3, 8)
    scales = w8a8.calibrate.calibrate(model, [transformers.BatchEncoding({"x": x})], skip=(), progress=False)
    assert scales["fc"] == (x.abs().amax() / torch.tensor(127.0)).item()
