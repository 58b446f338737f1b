"""quantize_model swaps the right layers and reports what it did."""
import math

import pytest
import torch
from torch import nn

import w8a8
from models import CPU_SIZE, TinyDecoder


def _model():
    return nn.Sequential(
        nn.Linear(64, 128),
        nn.ReLU(),
        nn.Sequential(nn.Linear(128, 128), nn.GELU()),
        nn.Linear(128, 10),
    )


def test_replaces_every_eligible_linear_and_reports():
    model = TinyDecoder(CPU_SIZE)
    n_linear = sum(isinstance(m, nn.Linear) for m in model.modules())
    x = torch.randn(8, CPU_SIZE.hidden)
    with torch.no_grad():
        ref = model(x)
    report = w8a8.quantize_model(model, progress=False)
    assert report.skipped == {"lm_head": "matches skip"}
    assert len(report.replaced) == n_linear - 1
    assert isinstance(model.lm_head, nn.Linear) and not isinstance(model.lm_head, w8a8.W8A8Linear)
    assert all(isinstance(model.get_submodule(n), w8a8.W8A8Linear) for n in report.replaced)
    # Gaussian weights quantized to int8 per channel: SQNR ~ 6.02*8 - 10log10(amax^2/var)/... ~ 38-45 dB.
    assert all(35 < v < 50 for v in report.sqnr_db.values()), report.sqnr_db
    with torch.no_grad():
        out = model(x)
    assert ((out - ref).norm() / ref.norm()).item() < 0.05
    assert "replaced" in report.summary() and "lm_head" in report.summary()


def test_skip_patterns_and_exact_sqnr():
    model = _model()
    w0 = model[0].weight.detach().double().clone()
    report = w8a8.quantize_model(model, skip=("2.*", "3"), progress=False)
    assert report.replaced == ["0"]
    assert set(report.skipped) == {"2.0", "3"}
    # SQNR recomputed from the original and the dequantized weights (in float64; the report is fp32).
    err = w0 - model[0].dequantized_weight().double()
    expected = 10 * math.log10(w0.pow(2).sum().item() / err.pow(2).sum().item())
    assert report.sqnr_db["0"] == pytest.approx(expected, rel=1e-6)
    assert report.sqnr_db["0"] > 30


def test_static_needs_every_input_scale():
    model = _model()
    with pytest.raises(ValueError, match=r"quantize_model: act_quant='static' needs input_scales for every layer; missing \['2.0', '3'\]"):
        w8a8.quantize_model(model, skip=(), act_quant="static", input_scales={"0": 0.1}, progress=False)
    report = w8a8.quantize_model(
        model, skip=(), act_quant="static", input_scales={"0": 0.1, "2.0": 0.2, "3": 0.3}, progress=False
    )
    assert len(report.replaced) == 3
    assert model[3].input_scale.item() == pytest.approx(0.3)


def test_meta_weights_are_skipped_with_a_reason():
    with torch.device("meta"):
        model = _model()
    with pytest.warns(UserWarning, match="replaced no layer"):
        report = w8a8.quantize_model(model, skip=(), progress=False)
    assert report.replaced == []
    assert report.skipped["0"] == "weight is on the meta device (load it first)"
