"""Tensor parallelism (w8a8.parallel): a sharded MLP equals the unsharded one bit for bit.

Two processes each: gloo on the CPU (reference backend; runs in CI), NCCL on two GPUs
(the default backend, CUTLASS on an H100/H200; skipped with fewer than two GPUs), where
a sharded decode step is also captured in a CUDA graph and replayed on new inputs.
"""
import datetime

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

import w8a8
from w8a8 import reference
from w8a8.parallel import Colwise, ColumnParallelW8A8Linear, Rowwise, RowParallelW8A8Linear, llama_plan, shard_model

WORLD = 2


class MLP(nn.Module):
    """A Llama MLP (fused gate_up, down with a bias), then a column / row pair like q and o.

    ReLU where Llama has SiLU (here and in the HF model below): torch's CPU SiLU is not
    position-invariant (its vectorised body and scalar tail round differently), so silu of a
    rank's column slice can differ by an ulp from the same columns of silu of the whole,
    which the int8 quantization of the next layer then sometimes turns into a different
    code. ReLU and the product are exact, so the comparison sees only the w8a8 layers."""

    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_up_proj = nn.Linear(hidden, 2 * inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=True)
        self.q_proj = nn.Linear(hidden, hidden, bias=True)
        self.o_proj = nn.Linear(hidden, hidden, bias=True)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.o_proj(self.q_proj(self.down_proj(F.relu(gate) * up)))


def _plan(inter):
    return {"gate_up_proj": Colwise(output_sizes=(inter, inter)), "down_proj": Rowwise(), "q_proj": Colwise(),
            "o_proj": Rowwise()}


def _quantized(hidden, inter, act_quant, dtype, device, seed):
    torch.manual_seed(seed)  # the same model on every rank
    model = MLP(hidden, inter).to(dtype)
    scales = {"gate_up_proj": 0.03, "down_proj": 0.01, "q_proj": 0.05, "o_proj": 0.02} if act_quant == "static" else None
    w8a8.quantize_model(model, act_quant=act_quant, input_scales=scales, progress=False)
    return model.to(device)


def _inputs(m, hidden, dtype, device, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, hidden, generator=g) * torch.exp2(torch.empty(m, 1).uniform_(-4, 4, generator=g))
    if m >= 3:
        x[1] = 0  # a zero row: scale 0, output = bias
    return x.to(dtype).to(device)


def _assert_bitwise(got, want, what):
    assert got.shape == want.shape and got.dtype == want.dtype, what
    same = torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(0), want.nan_to_num(0))
    if not same:
        diff = (got.float() - want.float()).abs().nan_to_num(0)
        raise AssertionError(f"{what}: sharded != unsharded ({int((diff > 0).sum())} elements, max |diff| {diff.max()})")


def _check_shard_model(rank, device, dtype, hidden, inter, ms, seed):
    for act_quant in ("dynamic", "static"):
        full = _quantized(hidden, inter, act_quant, dtype, device, seed)
        sharded = shard_model(_quantized(hidden, inter, act_quant, dtype, device, seed), _plan(inter))
        assert isinstance(sharded.gate_up_proj, ColumnParallelW8A8Linear)
        assert isinstance(sharded.down_proj, RowParallelW8A8Linear)
        # Each rank holds its rows of gate and of up, with their scales; row-parallel: its K-slice.
        half = inter // WORLD
        rows = list(range(rank * half, (rank + 1) * half)) + list(range(inter + rank * half, inter + (rank + 1) * half))
        assert torch.equal(sharded.gate_up_proj.weight, full.gate_up_proj.weight[rows])
        assert torch.equal(sharded.gate_up_proj.weight_scale, full.gate_up_proj.weight_scale[rows])
        k_half = hidden // WORLD
        assert torch.equal(sharded.o_proj.weight, full.o_proj.weight[:, rank * k_half : (rank + 1) * k_half])
        assert torch.equal(sharded.o_proj.bias, full.o_proj.bias)
        for m in ms:
            x = _inputs(m, hidden, dtype, device, seed + m)
            _assert_bitwise(sharded(x), full(x), f"rank {rank} {act_quant} M={m}")
        # reduce="dequantized": each rank quantizes its own slice and runs the fused kernel (bias
        # on rank 0); the outputs are summed in the layer's dtype. Equal to that sum of reference
        # results (an all-reduce of two operands is one rounded add, in either order).
        loose = Rowwise(reduce="dequantized").shard(full.o_proj, None)
        k_half = hidden // WORLD
        for m in ms:
            x = _inputs(m, hidden, dtype, device, seed + 3 * m)
            parts = []
            for r in range(WORLD):
                cols = slice(r * k_half, (r + 1) * k_half)
                if act_quant == "dynamic":
                    q, s = reference.quantize_per_token(x[:, cols].cpu())
                else:
                    s = full.o_proj.input_scale.cpu()
                    q = reference.quantize_static(x[:, cols].cpu(), s)
                parts.append(reference.scaled_mm(q, full.o_proj.weight[:, cols].cpu(), s, full.o_proj.weight_scale.cpu(),
                                                 full.o_proj.bias.cpu() if r == 0 else None, dtype))
            _assert_bitwise(loose(x[:, rank * k_half : (rank + 1) * k_half]).cpu(), parts[0] + parts[1],
                            f"rank {rank} {act_quant} reduce='dequantized' M={m}")
        # A gathered column-parallel layer gives the whole output, in order.
        gathered = Colwise(output_sizes=(inter, inter), gather_output=True).shard(full.gate_up_proj, None)
        x = _inputs(5, hidden, dtype, device, seed)
        _assert_bitwise(gathered(x), full.gate_up_proj(x), f"rank {rank} gathered gate_up")


def _check_checkpoint(rank, device, dtype, hidden, inter, seed, ckpt):
    full = _quantized(hidden, inter, "dynamic", dtype, device, seed)
    if rank == 0:
        w8a8.save_quantized(full.cpu(), ckpt, scale_dtype=torch.float32, progress=False)
        full.to(device)
    dist.barrier()
    with torch.device("meta"):
        fresh = MLP(hidden, inter).to(dtype)
    plan = llama_plan(fresh)
    assert plan == {**_plan(inter), "gate_up_proj": Colwise(output_sizes=(inter, inter))}
    w8a8.load_quantized(fresh, ckpt, device=device, tp_plan=plan)
    assert fresh.gate_up_proj.weight.shape == (2 * inter // WORLD, hidden)
    assert fresh.down_proj.weight.shape == (hidden, inter // WORLD)
    for m in (1, 17):
        x = _inputs(m, hidden, dtype, device, seed + 7 * m)
        _assert_bitwise(fresh(x), full(x), f"rank {rank} loaded M={m}")


def _check_graph(rank, device, dtype, hidden, inter, seed):
    from benchmarks.harness import capture_graph

    full = _quantized(hidden, inter, "dynamic", dtype, device, seed)
    sharded = shard_model(_quantized(hidden, inter, "dynamic", dtype, device, seed), _plan(inter))
    static_x = _inputs(1, hidden, dtype, device, seed)
    out = {}
    graph, _ = capture_graph(lambda: out.__setitem__("y", sharded(static_x)))
    for step in range(3):
        x = _inputs(1, hidden, dtype, device, seed + 100 + step)
        static_x.copy_(x)
        graph.replay()
        torch.cuda.synchronize()
        _assert_bitwise(out["y"], full(x), f"rank {rank} graph replay {step}")


def _worker(rank, backend, init_file, ckpt, seed):
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    # A bounded wait: a rank that fails leaves the other in a collective; the NCCL watchdog then
    # aborts it and spawn reports the first error instead of hanging.
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=120))
    try:
        if device.type == "cpu":
            dtype, hidden, inter, ms = torch.float32, 64, 96, (1, 3, 17)
        else:
            dtype, hidden, inter, ms = torch.bfloat16, 512, 1024, (1, 3, 17, 100, 257)
        _check_shard_model(rank, device, dtype, hidden, inter, ms, seed)
        print(f"[rank {rank}] shard_model: bit-identical", flush=True)
        _check_checkpoint(rank, device, dtype, hidden, inter, seed, ckpt)
        print(f"[rank {rank}] sharded checkpoint load: bit-identical", flush=True)
        if device.type == "cuda":
            _check_graph(rank, device, dtype, hidden, inter, seed)
            print(f"[rank {rank}] CUDA graph of a sharded decode step: bit-identical", flush=True)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _per_head_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """transformers' eager attention computed one head at a time. torch's CPU matmul of a
    [B, H, S, D] batch is not slice-invariant (the first 2 of 4 heads differ in the last bit
    from the same 2 heads computed alone, single-threaded too), which flips an int8 code of
    o_proj's input now and then; per head, a rank's heads are computed exactly as the whole
    model computes them, so the comparison isolates the W8A8 layers."""
    groups = query.shape[1] // key.shape[1]
    heads = []
    for h in range(query.shape[1]):
        k, v = key[:, h // groups], value[:, h // groups]
        scores = torch.matmul(query[:, h], k.transpose(1, 2)) * scaling
        if attention_mask is not None:
            scores = scores + attention_mask[:, 0, :, : k.shape[1]]
        heads.append(torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype), v))
    return torch.stack(heads, dim=2).contiguous(), None  # [B, S, H, D], as transformers expects


def _hf_llama_worker(rank, init_file, seed):
    """A whole (tiny) HF Llama, quantized, then sharded by llama_plan: logits bit-identical."""
    import transformers

    transformers.AttentionInterface.register("w8a8_test_per_head", _per_head_attention)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=120))
    try:
        config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                          hidden_act="relu",  # see MLP
                                          attn_implementation="w8a8_test_per_head")

        def model():
            torch.manual_seed(seed)
            m = transformers.LlamaForCausalLM(config).eval()
            w8a8.quantize_model(m, progress=False)
            return m

        full, sharded = model(), model()
        plan = llama_plan(sharded)
        assert sum(isinstance(s, Rowwise) for s in plan.values()) == 4 and len(plan) == 14, plan
        shard_model(sharded, plan)
        ids = torch.randint(0, 128, (2, 9), generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            _assert_bitwise(sharded(ids).logits, full(ids).logits, f"rank {rank} HF Llama logits")
    finally:
        dist.destroy_process_group()


def _spawn(backend, tmp_path):
    seed = int(torch.randint(0, 2**30, ()).item())  # drawn under the test's reported seed
    init_file = str(tmp_path / "init")
    mp.spawn(_worker, args=(backend, init_file, str(tmp_path / "ckpt"), seed), nprocs=WORLD, join=True)


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed with gloo")
def test_sharded_equals_unsharded_gloo(tmp_path):
    _spawn("gloo", tmp_path)


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed with gloo")
def test_hf_llama_sharded_by_llama_plan_gloo(tmp_path):
    pytest.importorskip("transformers", reason="the HF model test needs transformers (pip install .[test])")
    seed = int(torch.randint(0, 2**30, ()).item())
    mp.spawn(_hf_llama_worker, args=(str(tmp_path / "init"), seed), nprocs=WORLD, join=True)


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < WORLD, reason=f"needs {WORLD} GPUs")
def test_sharded_equals_unsharded_nccl(tmp_path):
    _spawn("nccl", tmp_path)


@pytest.fixture
def one_rank_group(tmp_path):
    """A gloo process group of this process alone (world size 1), for the refusal tests."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'one_rank'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_sharded_load_refusals(tmp_path, one_rank_group):
    """A tp_plan the checkpoint or the group cannot serve is refused before the model changes."""
    full = _quantized(64, 96, "dynamic", torch.float32, "cpu", 0)
    ckpt = str(tmp_path / "ckpt")
    w8a8.save_quantized(full, ckpt, scale_dtype=torch.float32, progress=False)
    fresh = MLP(64, 96)
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    with pytest.raises(w8a8.CheckpointError, match=r"tp_plan names 'mlp.nope'"):
        w8a8.load_quantized(fresh, ckpt, tp_plan={"mlp.nope": Rowwise()})
    with pytest.raises(w8a8.CheckpointError, match=r"gate_up_proj: Colwise output_sizes \[96, 95\] must add up"):
        w8a8.load_quantized(fresh, ckpt, tp_plan={"gate_up_proj": Colwise(output_sizes=(96, 95))})
    # A bad reduce mode is refused by the checks, before any layer is swapped.
    with pytest.raises(w8a8.CheckpointError, match=r"o_proj: Rowwise reduce must be one of .* got 'bf16'"):
        w8a8.load_quantized(fresh, ckpt, tp_plan={"down_proj": Rowwise(), "o_proj": Rowwise(reduce="bf16")})
    assert all(type(m) is nn.Linear for m in (fresh.gate_up_proj, fresh.down_proj, fresh.q_proj, fresh.o_proj))
    assert all(torch.equal(v, before[k]) for k, v in fresh.state_dict().items())


def test_plan_refusals(one_rank_group):
    """Bad plans are refused before anything changes, naming the layer and the sizes."""
    model = _quantized(64, 96, "dynamic", torch.float32, "cpu", 0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"gate_up_proj: Colwise output_sizes \[96, 95\] must add up to out_features = 192"):
        shard_model(model, {"down_proj": Rowwise(), "gate_up_proj": Colwise(output_sizes=(96, 95))})
    with pytest.raises(ValueError, match=r"the plan names 'nope'"):
        shard_model(model, {"nope": Rowwise()})
    with pytest.raises(ValueError, match=r"o_proj: Rowwise reduce must be one of .* got 'bf16'"):
        shard_model(model, {"down_proj": Rowwise(), "o_proj": Rowwise(reduce="bf16")})
    assert type(model.down_proj) is w8a8.W8A8Linear
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_shard_model_unfuses_first(one_rank_group):
    """A fused model's groups and fused producers refer to the layers shard_model replaces:
    it undoes them, and the sharded model computes with its shards."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                                   head_dim=16, vocab_size=128, num_hidden_layers=1, use_cache=False)
    model = transformers.LlamaForCausalLM(cfg).eval()
    w8a8.quantize_model(model, progress=False, report=False)
    ids = torch.arange(6).reshape(1, 6)
    with torch.inference_mode():
        want = model(input_ids=ids).logits  # recorded: fused from here on
    from w8a8.fusion import modules as fused

    assert isinstance(model.model.layers[0].mlp, fused.QuantizingGatedMLP)
    shard_model(model, llama_plan(model))
    assert not any(isinstance(m, fused.FUSED_CLASSES) for m in model.modules())
    assert isinstance(model.model.layers[0].mlp.down_proj, RowParallelW8A8Linear)
    with torch.inference_mode():
        torch.testing.assert_close(model(input_ids=ids).logits, want, rtol=0, atol=0)
