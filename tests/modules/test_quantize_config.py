"""W8A8Config: the fields, the keyword compatibility, include / filter_fn, calibration and
SmoothQuant through the config, and the SQNR report's cost (< 10% of quantize_model)."""
import dataclasses
import json
import math
import warnings

import pytest
import torch
from torch import nn

import w8a8
from w8a8.config import W8A8Config
from models import CPU_SIZE, TinyDecoder


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Sequential(nn.Linear(32, 32), nn.GELU()), nn.Linear(32, 8))


def _state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_defaults_and_frozen():
    c = W8A8Config()
    assert (c.act_quant, c.skip, c.include, c.filter_fn, c.calibration, c.smoothquant_alpha, c.report) == (
        "dynamic", ("lm_head",), None, None, None, None, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.act_quant = "static"
    assert W8A8Config(skip="fc").skip == ("fc",)  # one string is one pattern
    assert c.replace(report=False).report is False and c.report is True


@pytest.mark.parametrize("kwargs, match", [
    (dict(act_quant="int4"), r"act_quant must be one of \('dynamic', 'static'\), got 'int4'"),
    (dict(skip=[3]), r"skip must be a string or a list of strings"),
    (dict(include=5), r"include must be a string or a list of strings"),
    (dict(filter_fn="fc"), r"filter_fn must be callable"),
    (dict(smoothquant_alpha=1.5, calibration=[torch.zeros(1)]), r"smoothquant_alpha must be a number in \[0, 1\]"),
    (dict(smoothquant_alpha=0.5), r"smoothquant_alpha needs calibration"),
    (dict(input_scales={"0": 1.0}), r"input_scales is only used with act_quant='static'"),
    (dict(calibration=[torch.zeros(1)]), r"with act_quant='dynamic' and no SmoothQuant it would be ignored"),
    (dict(report="no"), r"report must be True or False"),
])
def test_bad_fields_are_refused(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        W8A8Config(**kwargs)


def test_config_equals_keywords():
    x = torch.randn(4, 16)
    a, b = _model(), _model()
    ra = w8a8.quantize_model(a, W8A8Config(skip=["3"]), progress=False)
    rb = w8a8.quantize_model(b, skip=["3"], progress=False)
    assert ra.replaced == rb.replaced == ["0", "2.0"] and ra.sqnr_db == rb.sqnr_db
    assert all(torch.equal(u, v) for u, v in zip(_state(a).values(), _state(b).values()))
    with torch.no_grad():
        assert torch.equal(a(x), b(x))
    c = _model()
    assert w8a8.quantize_model(c, ["3"], progress=False).replaced == ["0", "2.0"]  # today's positional skip


def test_keywords_fill_defaults_and_conflicts_are_errors():
    f = lambda module, name: name != "0"  # noqa: E731
    # torchao's quantize_(model, Int8DynamicActivationInt8WeightConfig(), filter_fn=f)
    r = w8a8.quantize_model(_model(), W8A8Config(skip=()), filter_fn=f, progress=False)
    assert r.replaced == ["2.0", "3"] and r.skipped == {"0": "filter_fn returned False"}
    # the same value twice is no conflict
    assert w8a8.quantize_model(_model(), W8A8Config(skip="3"), skip=("3",), progress=False).replaced == ["0", "2.0"]
    with pytest.raises(ValueError, match=r"disagree \(skip: config has \('3',\), keyword has \['0'\]\); set each field once"):
        w8a8.quantize_model(_model(), W8A8Config(skip="3"), skip=["0"], progress=False)
    with pytest.raises(ValueError, match=r"act_quant: config has 'static', keyword has 'dynamic'"):
        w8a8.quantize_model(_model(), W8A8Config(act_quant="static"), act_quant="dynamic", progress=False)
    with pytest.raises(TypeError, match=r"config must be a w8a8.W8A8Config, got dict"):
        w8a8.quantize_model(_model(), {"skip": ()}, progress=False)
    with pytest.raises(TypeError, match=r"skip given both positionally and as a keyword"):
        w8a8.quantize_model(_model(), ["3"], skip=["0"], progress=False)


def test_include_and_filter_fn_reasons():
    model = TinyDecoder(CPU_SIZE)
    seen = []

    def keep(module, name):
        seen.append((type(module), name))
        return not name.endswith("down_proj")

    r = w8a8.quantize_model(model, W8A8Config(include=["blocks.0.*", "lm_head"], filter_fn=keep), progress=False)
    assert r.replaced == ["blocks.0.q_proj", "blocks.0.k_proj", "blocks.0.v_proj", "blocks.0.o_proj",
                          "blocks.0.mlp.gate_proj", "blocks.0.mlp.up_proj"]
    assert [n for _, n in seen] == [*r.replaced, "blocks.0.mlp.down_proj"]  # the Linears left after skip / include
    assert all(t is nn.Linear for t, _ in seen)
    assert r.skipped["lm_head"] == "matches skip"  # skip wins over include
    assert any(why == "matches no include pattern" for why in r.skipped.values())
    assert any(why == "filter_fn returned False" for why in r.skipped.values())
    for n in r.replaced:
        assert isinstance(model.get_submodule(n), w8a8.W8A8Linear)


def test_static_calibration_through_the_config_equals_calibrate_then_quantize():
    batches = [torch.randn(3, 16) for _ in range(4)]
    a, b = _model(), _model()
    w8a8.quantize_model(a, W8A8Config(act_quant="static", skip=(), calibration=batches), progress=False)
    scales = w8a8.calibrate.calibrate(b, batches, skip=(), progress=False)
    w8a8.quantize_model(b, act_quant="static", skip=(), input_scales=scales, progress=False)
    for n in ("0", "2.0", "3"):
        assert a.get_submodule(n).input_scale.item() == scales[n]
    assert all(torch.equal(u, v) for u, v in zip(_state(a).values(), _state(b).values()))


def _llama():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=1, vocab_size=64, tie_word_embeddings=False)
    return transformers.LlamaForCausalLM(cfg).eval()


def test_smoothquant_then_static_equals_smooth_calibrate_quantize(capsys):
    ids = [torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(i)) for i in range(3)]
    a, b = _llama(), _llama()
    w8a8.quantize_model(a, W8A8Config(act_quant="static", calibration=ids, smoothquant_alpha=0.5), progress=False)
    w8a8.calibrate.smooth(b, ids, w8a8.calibrate.llama_mappings(b), alpha=0.5, progress=False)
    scales = w8a8.calibrate.calibrate(b, ids, progress=False)
    w8a8.quantize_model(b, act_quant="static", input_scales=scales, progress=False)
    sa, sb = _state(a), _state(b)
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    norm = sa["model.layers.0.input_layernorm.weight"]
    assert not torch.equal(norm, torch.ones_like(norm))  # smoothing rescaled the norm (built as ones)


def test_smoothquant_with_dynamic_activations_and_missing_mappings():
    ids = [torch.randint(0, 64, (1, 8))]
    m = _llama()
    r = w8a8.quantize_model(m, W8A8Config(calibration=ids, smoothquant_alpha=0.5), progress=False)
    assert all(m.get_submodule(n).act_quant == "dynamic" for n in r.replaced)
    before = _state(_model())
    model = _model()
    with pytest.raises(ValueError, match=r"SmoothQuant found no norm -> Linear mappings in Sequential"):
        w8a8.quantize_model(model, W8A8Config(calibration=[torch.randn(2, 16)], smoothquant_alpha=0.5), progress=False)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_report_off_leaves_sqnr_empty_and_layers_identical():
    a, b = _model(), _model()
    ra = w8a8.quantize_model(a, W8A8Config(report=False, skip=()), progress=False)
    rb = w8a8.quantize_model(b, skip=(), progress=False)
    assert ra.sqnr_db == {} and ra.replaced == rb.replaced and set(rb.sqnr_db) == set(rb.replaced)
    assert "weight SQNR" not in ra.summary() and "weight SQNR" in rb.summary()
    assert all(torch.equal(u, v) for u, v in zip(_state(a).values(), _state(b).values()))


def test_report_is_fp32_and_matches_float64():
    torch.manual_seed(1)
    lin = nn.Linear(1000, 300)  # K not a power of two: the chunks end mid-tensor
    w = lin.weight.detach().double().clone()
    layer = w8a8.W8A8Linear.from_linear(lin)
    got = w8a8.quantize_model.__globals__["weight_sqnr_db"](lin.weight, layer)
    err = w - layer.dequantized_weight().double()
    assert got == pytest.approx(10 * math.log10(w.pow(2).sum().item() / err.pow(2).sum().item()), rel=1e-6)


def test_the_report_reads_the_weight_in_small_chunks():
    """The SQNR report of a 4096 x 4096 layer makes no tensor larger than one ~256 K-element chunk
    (one reused buffer; no whole-weight temporary, whose fresh pages cost more than the
    arithmetic on a CPU). Its time is measured, not tested: GUIDE states the measured share."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from w8a8.quantize_model import weight_sqnr_db

    class LargestNewTensor(TorchDispatchMode):
        largest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            inputs = {t.untyped_storage().data_ptr() for t in torch.utils._pytree.tree_leaves((args, kwargs))
                      if isinstance(t, torch.Tensor)}
            for t in torch.utils._pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                    self.largest = max(self.largest, t.numel())
            return out

    lin = nn.Linear(4096, 4096, bias=False)
    layer = w8a8.W8A8Linear.from_linear(lin)
    with LargestNewTensor() as mode:
        sqnr = weight_sqnr_db(lin.weight, layer)
    assert 30 < sqnr < 60
    assert 0 < mode.largest <= (1 << 18), mode.largest


# --- compressed-tensors' pattern syntax ------------------------------------------------------------


def test_skip_and_include_take_regexes_and_class_names_as_compressed_tensors_does(tmp_path):
    from compressed_tensors.utils.match import match_named_modules

    model = _llama()
    report = w8a8.quantize_model(model, skip=["lm_head", "re:.*mlp.down_proj", "re:.*self_attn\\.[kv]_proj"],
                                 fuse=False, progress=False)
    down_k_v = {f"model.layers.0.{p}" for p in ("mlp.down_proj", "self_attn.k_proj", "self_attn.v_proj")}
    assert set(report.skipped) == down_k_v | {"lm_head"} and report.unmatched_skip == []
    # include as a regex; skip wins over include; a class name matches a Linear's class (or a base's)
    r2 = w8a8.quantize_model(_llama(), W8A8Config(skip=["re:.*up_proj"], include=["re:model\\.layers\\.0\\.self_attn"]),
                             fuse=False, progress=False)
    with pytest.warns(UserWarning, match=r"replaced no layer"):
        assert w8a8.quantize_model(_llama(), skip="Linear", fuse=False, progress=False).replaced == []
    assert sorted(r2.replaced) == sorted(f"model.layers.0.self_attn.{p}_proj" for p in "qkvo")
    assert r2.skipped["model.layers.0.mlp.up_proj"] == "matches skip"
    assert r2.skipped["model.layers.0.mlp.gate_proj"] == "matches no include pattern"
    # The written ignore list selects, by compressed-tensors' own matching, the layers quantize_model kept in float.
    w8a8.save_quantized(model, str(tmp_path / "q"), progress=False)
    qc = json.load(open(tmp_path / "q" / "config.json"))["quantization_config"]
    targets = qc["config_groups"]["group_0"]["targets"]
    fresh = _llama()
    theirs = {n for n, _ in match_named_modules(fresh, targets, qc["ignore"])}
    assert theirs == set(report.replaced)


def test_unmatched_patterns_warn_with_a_hint():
    with pytest.warns(UserWarning, match=r"skip pattern 'LlamaMLP' matches no Linear of LlamaForCausalLM; it matches "
                                         r"\['model.layers.0.mlp'\] \(not Linears\).*'re:\.\*\\\.mlp\\\.\.\*'"):
        report = w8a8.quantize_model(_llama(), skip=["lm_head", "LlamaMLP"], fuse=False, progress=False)
    assert report.unmatched_skip == ["LlamaMLP"] and len(report.skipped) == 1
    with pytest.warns(UserWarning, match=r"include pattern 're:.\*mlp_typo' matches no Linear"):
        report = w8a8.quantize_model(_llama(), include=["re:.*mlp_typo", "re:.*q_proj"], fuse=False, progress=False)
    assert report.unmatched_include == ["re:.*mlp_typo"] and "include patterns that matched no layer" in report.summary()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default skip ("lm_head") on a model without one says nothing
        w8a8.quantize_model(torch.nn.Sequential(torch.nn.Linear(8, 8)), fuse=False, progress=False)


def test_a_bad_regex_is_refused_by_the_config():
    with pytest.raises(ValueError, match=r"W8A8Config: skip holds a bad regex 're:\(' \("):
        W8A8Config(skip=["re:("])
