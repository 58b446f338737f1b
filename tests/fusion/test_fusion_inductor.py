"""Fused models under torch.compile on the CPU: the fused modules compile to the fused ops and
w8a8.fusion.inductor (the Inductor post-grad pass) joins what crosses modules. What transformers'
Llama / Mistral / Qwen2 and hand-written modules get, that the compiled results equal eager
(bit for bit where the compiled graph computes the same math), no recompiles over token
counts, and what is left alone.

Each test compiles one tiny module once, with Inductor's FX and AOT caches off (a cached
graph runs no pass). The pass is spied on: every graph it produced is linted and its w8a8
nodes counted.
"""
import collections
import inspect
import re
import subprocess
import sys

import pytest
import torch
from torch import nn

import w8a8
from w8a8.fusion import inductor as fusion

DT = torch.bfloat16
W8A8_OPS = ("linear", "quantize_per_token", "scaled_mm", "rms_norm_quant", "add_rms_norm_quant", "silu_mul_quant")


@pytest.fixture
def graphs(monkeypatch):
    """Installs the pass (Inductor caches off, config restored after); yields the list of
    (w8a8 node counts, fusion counts) of every graph the pass ran on."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    seen = []
    real = fusion.fuse

    def spy(graph):
        counts = real(graph)
        graph.lint()
        ops = collections.Counter(
            n.target._opname for n in graph.nodes
            if n.op == "call_function" and getattr(n.target, "namespace", "") == "w8a8"
        )
        seen.append(({op: ops[op] for op in W8A8_OPS}, counts))
        return counts

    monkeypatch.setattr(fusion, "fuse", spy)
    monkeypatch.delenv(fusion.ENV_VAR, raising=False)
    torch._dynamo.reset()
    with inductor_config.patch(fx_graph_cache=False, post_grad_custom_post_pass=None), \
            functorch_config.patch(enable_autograd_cache=False):
        assert fusion.install()
        yield seen
    torch._dynamo.reset()


def _only(seen):
    assert len(seen) == 1, f"{len(seen)} graphs compiled, expected 1"
    return seen[0]


def _rel_err(got, want):
    return float((got.float() - want.float()).norm() / want.float().norm())


# --- transformers models ----------------------------------------------------------------------

LAYERS = 2
# Compiled logits against eager: the attention, rotary and residual math outside the w8a8 ops
# is Inductor's (fp32 inside kernels, other summation orders), and an activation one bf16 ulp
# off can change an int8 code. Measured ~0.6% relative, the same as without the pass.
MODEL_REL_ERR = 2e-2
# An RMSNorm computed by Inductor against eager's: fp32 throughout and one rounding to bf16
# against eager's rounding after each step. Measured 0.2-0.4% relative (bf16's step is 0.8%).
NORM_REL_ERR = 1e-2


def _tiny_model(arch: str):
    transformers = pytest.importorskip("transformers")
    config = getattr(transformers, f"{arch}Config")(
        hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=128, max_position_embeddings=128,
    )
    model = getattr(transformers, f"{arch}ForCausalLM")(config).to(DT).eval()
    w8a8.quantize_model(model, skip=("lm_head",), progress=False)
    return model


@pytest.mark.parametrize("arch", ["Llama", "Mistral", "Qwen2"])
def test_transformers_model_fused_and_equal_to_eager(graphs, arch):
    """Per layer: input_layernorm -> q/k/v, post_attention_layernorm (with the residual add
    before it) -> gate/up, silu(gate) * up -> down all read a fused producer's codes; only
    o_proj (reading attention) keeps its own w8a8.linear. One graph for M = 3, 17, 33
    (dynamic=True: the norms' eps, traced as a symbolic float, is specialised because the
    fused op takes a constant), fresh results on every call."""
    model = _tiny_model(arch)
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    with torch.no_grad():
        for m in (3, 17, 33):
            for _ in range(2):  # new tokens at the same M: a fresh result, never the last one
                ids = torch.randint(0, 128, (1, m))
                want = model(ids, use_cache=False).logits  # eager first: it may set up w8a8's groups
                got = compiled(ids, use_cache=False).logits
                assert got.shape == want.shape
                assert _rel_err(got, want) < MODEL_REL_ERR
    ops, counts = _only(graphs)
    # The first input_layernorm reads the embedding; every later norm a residual add.
    assert counts["rms_norm_quant"] == 1 and counts["add_rms_norm_quant"] == 2 * LAYERS - 1
    assert counts["silu_mul_quant"] == LAYERS
    merged_away = counts["merged_linears"] - counts["merged_groups"]  # 0 unless the layers were grouped
    assert counts["producer_linears"] == 6 * LAYERS - merged_away
    assert ops == {"linear": LAYERS, "quantize_per_token": 0, "scaled_mm": counts["producer_linears"],
                   "rms_norm_quant": 1, "add_rms_norm_quant": 2 * LAYERS - 1, "silu_mul_quant": LAYERS}
    assert counts["shared_quantizers"] == 0


def test_merged_gate_up_reach_silu_mul_quant_without_a_copy(graphs):
    """gate and up, column slices of the merged gate/up GEMM's output after the pass, are what
    silu_mul_quant reads: no Inductor kernel copies them to the strides the separate layers'
    outputs had when traced (M > 1, where a slice is not contiguous)."""
    from torch._inductor.utils import run_and_get_code

    model = _tiny_model("Llama")
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    ids = torch.randint(0, 128, (1, 17))
    with torch.no_grad():
        want = model(ids, use_cache=False).logits
        got, code = run_and_get_code(lambda: compiled(ids, use_cache=False).logits)
    assert _rel_err(got, want) < MODEL_REL_ERR
    _, counts = _only(graphs)
    assert counts["merged_groups"] >= LAYERS and counts["silu_mul_quant"] == LAYERS
    source = "\n".join(code)
    assert source.count("torch.ops.w8a8.silu_mul_quant.default(") == LAYERS
    assert not re.search(r"def (cpp|triton)_\w*silu_mul_quant|(cpp|triton)_\w*silu_mul_quant\w* = ", source)


# --- hand-written modules ---------------------------------------------------------------------


def _w8a8_linear(k, n, bias=True, dtype=DT):
    return w8a8.W8A8Linear.from_linear(nn.Linear(k, n, bias=bias).to(dtype))


class RMSNorm(nn.Module):
    """transformers' LlamaRMSNorm; ``gemma=True``: Gemma's (1 + weight) scaling in fp32 (not what the op fuses)."""

    def __init__(self, k, gemma=False, dtype=DT):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(k, dtype=dtype))
        self.variance_epsilon, self.gemma = 1e-6, gemma

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        if self.gemma:
            return (h * (1.0 + self.weight.float())).to(x.dtype)
        return self.weight * h.to(x.dtype)


def _group(k, sizes, bias, dtype=DT):
    """A hand-made group: one int8 weight, scale and bias, each member a row slice of them."""
    layer = _w8a8_linear(k, sum(sizes), bias, dtype)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return layer, list(zip(starts, sizes))


def _member(x, layer, start, n):
    bias = None if layer.bias is None else layer.bias.narrow(0, start, n)
    return w8a8.ops.linear(x, layer.weight.narrow(0, start, n), layer.weight_scale.narrow(0, start, n), bias)


class MLP(nn.Module):
    def __init__(self, d, f, dtype):
        super().__init__()
        self.gate, self.up = _w8a8_linear(d, f, dtype=dtype), _w8a8_linear(d, f, dtype=dtype)
        self.down, self.act = _w8a8_linear(f, d, bias=False, dtype=dtype), nn.SiLU()

    def forward(self, h):
        return self.down(self.act(self.gate(h)) * self.up(h))


class Block(nn.Module):
    """A decoder layer's shape: s = x + r; h = norm(s); q, k, v read h; s2 = s + q; the MLP on
    norm2(s2). ``gemma``: the first norm computes Gemma's (1 + weight), which is not fused."""

    def __init__(self, d=64, f=96, gemma=False, dtype=DT):
        super().__init__()
        self.norm, self.norm2 = RMSNorm(d, gemma, dtype), RMSNorm(d, dtype=dtype)
        self.q, self.k, self.v = (_w8a8_linear(d, n, dtype=dtype) for n in (d, 32, 32))
        self.mlp = MLP(d, f, dtype)

    def forward(self, x, r):
        s = x + r
        h = self.norm(s)
        return (s, h, *self.after_norm(s, h))

    def after_norm(self, s, h):
        """q, k, v and the block's output: everything that reads the normed activation."""
        q, k, v = self.q(h), self.k(h), self.v(h)
        s2 = s + q
        return q, k, v, s2 + self.mlp(self.norm2(s2))


def _fused_block(*args, **kwargs):
    block = Block(*args, **kwargs)
    dtype = block.q.bias.dtype
    report = w8a8.fusion.fuse_model(block, torch.randn(3, 64, dtype=dtype), torch.randn(3, 64, dtype=dtype))
    return block, report


def _check_equal(compiled, module, *args):
    with torch.no_grad():
        got, want = compiled(*args), module(*args)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.equal(g, w)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_block_merged_group_norm_and_silu_fused_bit_identical(graphs, dtype):
    """The fused modules' ops joined by the pass: q/k/v merge into one linear (1) and so do
    gate/up, both residual adds fold into the norms (2), the merged linears read the norms'
    codes (3), down reads the MLP's silu_mul_quant codes. Every output, the residual sum and
    the normed activation other layers would read included, equals eager bit for bit."""
    block, report = _fused_block(dtype=dtype)
    assert report.norms == ["norm", "norm2"] and report.mlps == ["mlp"] and len(report.merged) == 2
    compiled = torch.compile(block, fullgraph=True)
    x, r = torch.randn(2, 7, 64, dtype=dtype), torch.randn(2, 7, 64, dtype=dtype)
    _check_equal(compiled, block, x, r)
    ops, counts = _only(graphs)
    assert (counts["merged_groups"], counts["merged_linears"]) == (2, 5)
    assert (counts["add_rms_norm_quant"], counts["silu_mul_quant"], counts["producer_linears"]) == (2, 1, 3)
    assert ops == {"linear": 0, "quantize_per_token": 0, "scaled_mm": 3,
                   "rms_norm_quant": 0, "add_rms_norm_quant": 2, "silu_mul_quant": 1}


def test_compiled_outputs_of_merged_members_are_contiguous(graphs):
    """A merged member's output leaving the graph is contiguous, as nn.Linear's and eager's are."""
    block, _ = _fused_block()
    compiled = torch.compile(block, fullgraph=True)
    with torch.no_grad():
        s, h, q, k, v, out = compiled(torch.randn(5, 64, dtype=DT), torch.randn(5, 64, dtype=DT))
    assert all(t.is_contiguous() for t in (q, k, v, out))


def test_a_changed_eps_recompiles(graphs):
    """The fused norm reads eps at each call: Dynamo guards on it, so a changed eps recompiles
    and the compiled block follows it, as eager does."""
    block, _ = _fused_block(dtype=torch.float32)
    compiled = torch.compile(block, fullgraph=True)
    x, r = torch.randn(4, 64), torch.randn(4, 64)
    _check_equal(compiled, block, x, r)
    block.norm.variance_epsilon = 0.5
    block.norm2.variance_epsilon = 2.0
    _check_equal(compiled, block, x, r)
    assert len(graphs) == 2 and graphs[1][1]["add_rms_norm_quant"] == 2


def test_compiled_block_follows_changes_made_after_fusion(graphs):
    """Compiled from the same modules as eager: a replaced child (down kept in float) makes the
    fused MLP run the model's own code in the graph too (Dynamo guards on the children), and
    the compiled block equals eager. (Hooks registered after compiling are, as for any module,
    not seen until a recompile: torch._dynamo.config.skip_nnmodule_hook_guards.)"""
    block, _ = _fused_block(dtype=torch.float32)
    compiled = torch.compile(block)
    x, r = torch.randn(4, 64), torch.randn(4, 64)
    _check_equal(compiled, block, x, r)
    assert graphs[-1][0]["silu_mul_quant"] == 1
    block.mlp.down = nn.Linear(96, 64, bias=False)
    _check_equal(compiled, block, x, r)
    ops, counts = graphs[-1]
    assert ops["silu_mul_quant"] == 0 and ops["scaled_mm"] == 2  # q/k/v and gate/up merged, on the norms' codes


def _check_after_inductor_norm(compiled, block, x, r):
    """A Block whose first norm stayed Inductor's: the residual sum is one bf16 add either way;
    the normed activation is within rounding of eager's (see NORM_REL_ERR); everything that
    reads it equals eager run on the compiled norm's output, bit for bit."""
    with torch.no_grad():
        got, want = compiled(x, r), block(x, r)
        after = block.after_norm(got[0], got[1])
    assert torch.equal(got[0], want[0])
    assert _rel_err(got[1], want[1]) < NORM_REL_ERR
    for g, w in zip(got[2:], after):
        assert torch.equal(g, w)


def test_unmatched_norm_left_alone_its_readers_merged(graphs):
    """Gemma's norm is not LlamaRMSNorm: fuse_model leaves it alone (Inductor computes it) and
    q/k/v still merge into one w8a8.linear on its output; the rest of the block is fused. What
    reads the norm stays exact."""
    block, report = _fused_block(gemma=True)
    assert report.norms == ["norm2"] and report.mlps == ["mlp"]
    compiled = torch.compile(block, fullgraph=True)
    x, r = torch.randn(5, 64, dtype=DT), torch.randn(5, 64, dtype=DT)
    _check_after_inductor_norm(compiled, block, x, r)
    ops, counts = _only(graphs)
    assert (counts["merged_groups"], counts["shared_quantizers"]) == (2, 0)
    assert counts["rms_norm_quant"] == 0 and counts["add_rms_norm_quant"] == 1 and counts["silu_mul_quant"] == 1
    assert ops == {"linear": 1, "quantize_per_token": 0, "scaled_mm": 2,
                   "rms_norm_quant": 0, "add_rms_norm_quant": 1, "silu_mul_quant": 1}


def test_dynamic_true_fuses_the_norm_with_its_eps_specialised(graphs):
    """dynamic=True passes the module's float eps as a symbolic input; the fused op takes a
    constant, so Dynamo specialises it: the norms are fused and one graph serves every M."""
    block, _ = _fused_block()
    compiled = torch.compile(block, fullgraph=True, dynamic=True)
    for m in (3, 17):
        _check_equal(compiled, block, torch.randn(m, 64, dtype=DT), torch.randn(m, 64, dtype=DT))
    ops, counts = _only(graphs)
    assert counts["add_rms_norm_quant"] == 2 and counts["producer_linears"] == 3
    assert ops["quantize_per_token"] == 0 and ops["silu_mul_quant"] == 1


class NormThenTwo(nn.Module):
    """A hand-written module calling w8a8.ops.rms_norm_quant itself, then two layers on its output."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(64, dtype=DT))
        self.a, self.b = _w8a8_linear(64, 48), _w8a8_linear(64, 32, bias=False)

    def forward(self, x):
        _, _, h = w8a8.ops.rms_norm_quant(x, self.weight, 1e-6)
        return self.a(h), self.b(h)


def test_the_pass_wires_an_explicit_norm_op(graphs):
    """(3) needs no fused module: linears reading rms_norm_quant's normed output run on its codes."""
    module = NormThenTwo()
    compiled = torch.compile(module, fullgraph=True)
    _check_equal(compiled, module, torch.randn(2, 5, 64, dtype=DT))
    ops, counts = _only(graphs)
    assert counts["rms_norm_quant"] == 1 and counts["producer_linears"] == 2
    assert ops["linear"] == ops["quantize_per_token"] == 0 and ops["scaled_mm"] == 2


class TwoReaders(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = _w8a8_linear(64, 48), _w8a8_linear(64, 32, bias=False)

    def forward(self, x):
        return self.a(x), self.b(x)


def test_two_linears_one_input_share_one_quantizer(graphs):
    """(3): one quantize_per_token, two scaled_mm; bit-identical to eager; no recompile over M
    (dynamic=True) and a fresh result whenever the input changes."""
    module = TwoReaders()
    compiled = torch.compile(module, fullgraph=True, dynamic=True)
    for m in (3, 17, 33):
        for _ in range(2):
            _check_equal(compiled, module, torch.randn(2, m, 64, dtype=DT))
    ops, counts = _only(graphs)
    assert (counts["shared_quantizers"], counts["shared_linears"]) == (1, 2)
    assert ops == {"linear": 0, "quantize_per_token": 1, "scaled_mm": 2,
                   "rms_norm_quant": 0, "add_rms_norm_quant": 0, "silu_mul_quant": 0}


class Members(nn.Module):
    """Linears on row slices of one weight: ``slices`` as (start, rows), called in that order."""

    def __init__(self, rows, slices, bias):
        super().__init__()
        self.layer, self.slices = _w8a8_linear(64, rows, bias), slices

    def forward(self, x):
        return tuple(_member(x, self.layer, a, n) for a, n in self.slices)


@pytest.mark.parametrize("bias", [True, False])
def test_hand_made_group_is_one_gemm(graphs, bias):
    """(1): three members of one base, called out of order, become one w8a8.linear over the
    base; each output a slice of it, bit-identical to three separate w8a8.linear calls."""
    module = Members(96, [(32, 48), (0, 32), (80, 16)], bias)
    compiled = torch.compile(module, fullgraph=True)
    x = torch.randn(3, 5, 64, dtype=DT)
    _check_equal(compiled, module, x)
    ops, counts = _only(graphs)
    assert (counts["merged_groups"], counts["merged_linears"]) == (1, 3)
    assert ops["linear"] == 1 and ops["scaled_mm"] == ops["quantize_per_token"] == 0


def test_group_with_a_gap_merges_adjacent_members_only(graphs):
    """Rows [0, 16) and [16, 40) merge; [48, 64) is not adjacent and keeps its own GEMM, sharing
    the quantizer (3) with the merged one."""
    module = Members(64, [(0, 16), (16, 24), (48, 16)], bias=True)
    compiled = torch.compile(module, fullgraph=True)
    _check_equal(compiled, module, torch.randn(9, 64, dtype=DT))
    ops, counts = _only(graphs)
    assert (counts["merged_groups"], counts["merged_linears"]) == (1, 2)
    assert (counts["shared_quantizers"], counts["shared_linears"]) == (1, 2)
    assert ops["linear"] == 0 and ops["quantize_per_token"] == 1 and ops["scaled_mm"] == 2


def test_static_linears_untouched(graphs):
    """Static activations (a calibrated input_scale) are neither shared, merged nor fused."""
    module = TwoReaders()
    for name in ("a", "b"):
        lin = getattr(module, name)
        static = w8a8.W8A8Linear(lin.in_features, lin.out_features, bias=lin.bias is not None, act_quant="static",
                                 dtype=DT)
        static.load_state_dict({**lin.state_dict(), "input_scale": torch.tensor([0.02])})
        setattr(module, name, static)
    compiled = torch.compile(module, fullgraph=True)
    _check_equal(compiled, module, torch.randn(4, 64, dtype=DT))
    ops, counts = _only(graphs)
    assert ops["linear"] == 2 and not any(counts.values())


# --- install ----------------------------------------------------------------------------------


def test_install_idempotent_composes_and_opts_out(monkeypatch):
    import torch._inductor.config as inductor_config
    from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

    from w8a8.fusion import inductor_rewrites as rewrites

    # the uuid hashes every file whose functions the pass calls
    called = {sys.modules[f.__module__].__file__ for f in vars(fusion).values()
              if inspect.isfunction(f) and f.__module__.startswith("w8a8.")}
    assert called == set(fusion._SOURCES) == {fusion.__file__, rewrites.__file__}

    class Theirs(CustomGraphPass):
        def __call__(self, graph):
            pass

        def uuid(self):
            return "theirs"

    theirs = Theirs()
    monkeypatch.delenv(fusion.ENV_VAR, raising=False)
    with inductor_config.patch(post_grad_custom_post_pass=theirs):
        assert fusion.install() and fusion.install()
        passes = inductor_config.post_grad_custom_post_pass
        ours = "w8a8.fusion.inductor:" + get_hash_for_files((fusion.__file__, rewrites.__file__)).hex() + ":1"
        if isinstance(passes, (list, tuple)):  # a torch whose config holds a list of passes
            assert passes[0] is theirs and len(passes) == 2 and isinstance(passes[1], fusion.FusionPass)
            assert passes[1].uuid() == ours
        else:  # one pass: ours wraps theirs and runs it first
            assert isinstance(passes, fusion.FusionPass) and passes.before is theirs
            assert passes.uuid() == ours + "+theirs"
    monkeypatch.setenv(fusion.ENV_VAR, "0")
    with inductor_config.patch(post_grad_custom_post_pass=None):
        assert not fusion.install()
        assert inductor_config.post_grad_custom_post_pass is None
    assert fusion.FusionPass().uuid().endswith(":0")  # an installed pass, switched off, has its own cache key


def test_import_leaves_inductor_unimported():
    code = "import sys, w8a8.fusion.inductor; print(*(m for m in ('torch._dynamo', 'torch._inductor') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == []
