"""torch.compile(fullgraph=True) through W8A8Linear without graph breaks."""
import pytest
import torch
from torch import nn

import w8a8

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _model(device):
    model = nn.Sequential(nn.Linear(64, 128), nn.SiLU(), nn.Linear(128, 64)).to(device)
    w8a8.quantize_model(model, skip=(), progress=False)
    return model


@pytest.mark.parametrize("device", DEVICES)
def test_no_graph_breaks(device):
    model = _model(device)
    x = torch.randn(5, 64, device=device)
    explanation = torch._dynamo.explain(model)(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act_quant", ["dynamic", "static"])
def test_fullgraph_compile_matches_eager(device, act_quant):
    torch._dynamo.reset()
    lin = nn.Linear(64, 48).to(device)
    kw = {"input_scale": 0.03} if act_quant == "static" else {}
    layer = w8a8.W8A8Linear.from_linear(lin, act_quant=act_quant, **kw)
    compiled = torch.compile(layer, fullgraph=True, dynamic=True)
    for m in (3, 17, 100):
        x = torch.randn(m, 64, device=device)
        assert torch.equal(compiled(x), layer(x))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dynamic,max_compiles", [(True, 1), (None, 2)])
def test_batch_dimension_does_not_recompile_per_m(device, dynamic, max_compiles):
    """dynamic=True: one graph for every M; the default: one static graph, then one dynamic graph."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    counter = CompileCounter()
    model = _model(device)
    compiled = torch.compile(model, backend=counter, fullgraph=True, dynamic=dynamic)
    for m in (3, 17, 100, 1000, 5):
        x = torch.randn(m, 64, device=device)
        assert torch.equal(compiled(x), model(x))
    assert counter.frame_count <= max_compiles, counter.frame_count
