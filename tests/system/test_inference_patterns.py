"""The three ways a server runs W8A8 layers - eager, torch.compile, CUDA graphs - on a
small decoder stack built of W8A8Linear (tests/models.py), each checked against eager.

GPU tests use bf16 stacks, which take the single-op path ``w8a8::linear_sm90`` on sm90;
the compile tests also run on the CPU reference path (fp32).
"""
import pytest
import torch

import w8a8
from models import DecoderSize, TinyDecoder
from helpers import capture_graph

ON_GPU = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if ON_GPU else [])
SIZE = DecoderSize(hidden=256, ffn=512, layers=2, tokens=1)
gpu = pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")


def _stack(device, act_quant="dynamic"):
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = TinyDecoder(SIZE, vocab=128).to(device, dtype).eval()
    for p in model.parameters():
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=p.shape[1] ** -0.5)
    scales = None
    if act_quant == "static":  # calibrated-looking per-tensor scales: |x| <= ~4 over 127 codes
        scales = {name: 4.0 / 127 for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    w8a8.quantize_model(model, skip=("lm_head",), act_quant=act_quant, input_scales=scales, progress=False)
    with torch.inference_mode():  # the warm-up forward: w8a8.fusion records it and swaps in the fused modules
        model(_inputs(2, device, dtype))
    return model, dtype


def _assert_close_model_outputs(got, expected):
    """Compiled vs eager stack: the int8 layers run the same kernels, but inductor fuses the
    norms and activations around them in its own order (bf16 rounding), and a flipped
    activation code moves an output by a quantization step. So: relative L2 error."""
    rel = ((got.float() - expected.float()).norm() / expected.float().norm()).item()
    assert rel < 0.05, rel  # measured up to 0.022 (static scales: a flipped code is a whole step)


def _inputs(m, device, dtype):
    return torch.randn(m, SIZE.hidden, device=device, dtype=dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_stack_compiles_without_graph_breaks(device):
    torch._dynamo.reset()
    model, dtype = _stack(device)
    explanation = torch._dynamo.explain(model)(_inputs(3, device, dtype))
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act_quant", ["dynamic", "static"])
def test_compiled_stack_matches_eager_without_recompiling(device, act_quant):
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    model, dtype = _stack(device, act_quant)
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(model, backend=counter, fullgraph=True, dynamic=True)
    with torch.inference_mode():
        for m in (3, 17, 64, 5, 1):
            x = _inputs(m, device, dtype)
            _assert_close_model_outputs(compiled(x), model(x))
            if m == 3:
                # The fused norms' eps is first traced as a symbolic float (dynamic=True), then
                # specialised: the analysis restarts once, calling the backend twice for one graph.
                first = counter.frame_count
            if m == 5:
                assert counter.frame_count == first, f"recompiled for M = 17, 64 or 5: {counter.frame_count - first} graphs"
    # Dynamo specializes size-1 dimensions: M = 1 (decode) gets its own graph, once.
    assert counter.frame_count == first + 1, counter.frame_count


@gpu
def test_reduce_overhead_mode_matches_eager():
    torch._dynamo.reset()
    model, dtype = _stack("cuda")
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    with torch.inference_mode():
        for step in range(6):  # the first calls record, later ones replay the CUDA graph
            x = _inputs(4, "cuda", dtype)
            _assert_close_model_outputs(compiled(x).clone(), model(x))


def _capture(model, static_x, stream=None, pool=None):
    return capture_graph(lambda: model(static_x), warmups=2, stream=stream, pool=pool)


@gpu
@pytest.mark.parametrize("act_quant", ["dynamic", "static"])
@pytest.mark.parametrize("on_side_stream", [False, True])
def test_manual_capture_replays_right_each_time(act_quant, on_side_stream):
    model, dtype = _stack("cuda", act_quant)
    with torch.inference_mode():
        static_x = _inputs(1, "cuda", dtype)
        graph, static_out = _capture(model, static_x, stream=torch.cuda.Stream() if on_side_stream else None)
        for step in range(50):
            static_x.copy_(_inputs(1, "cuda", dtype))  # new inputs, in place
            graph.replay()
            if step % 7 == 0:
                # Same kernels, same inputs: the replay equals an eager run bit for bit.
                assert torch.equal(static_out, model(static_x)), f"replay {step} differs from eager"


@gpu
def test_graphs_sharing_one_memory_pool():
    model, dtype = _stack("cuda")
    pool = torch.cuda.graph_pool_handle()
    with torch.inference_mode():
        graphs = {}
        for m in (1, 8):  # one graph per decode batch size, one pool between them
            x = _inputs(m, "cuda", dtype)
            graphs[m] = (x, *_capture(model, x, pool=pool))
        for _ in range(5):
            for m, (x, graph, out) in graphs.items():
                x.copy_(_inputs(m, "cuda", dtype))
                graph.replay()
                assert torch.equal(out, model(x)), m


@gpu
def test_bf16_sm90_layers_take_the_single_op_path():
    """The compiled graph names the public op (one graph, no break); when it runs on sm90
    with few tokens, the op's CUDA implementation picks the single C++ op. Seen in the kernels
    of a static stack: the single op quantizes with the CUDA static kernel, the composed path
    (above the single op's token limit) with Triton's."""
    from benchmarks.model import kernel_us  # the model suite's profile: {kernel name: (us, launches)}
    from w8a8 import dispatch

    if dispatch.unavailable_reason("scaled_mm", "sm90", torch.device("cuda")) is not None:
        pytest.skip("no CUTLASS kernel on this GPU")
    model, dtype = _stack("cuda", act_quant="static")
    x = _inputs(2, "cuda", dtype)
    explanation = torch._dynamo.explain(model)(x)
    code = "\n".join(g.code for g in explanation.graphs)
    assert explanation.graph_break_count == 0 and "torch.ops.w8a8.linear.default" in code, code
    compiled = torch.compile(model)
    with torch.inference_mode():
        for m, single in ((2, True), (300, False)):
            x = _inputs(m, "cuda", dtype)
            compiled(x)  # compile outside the profile
            names = set(kernel_us(lambda: compiled(x), torch.device("cuda"), iters=1))
            cuda_static = any("quantize_static_kernel" in n and "_quantize_static_kernel" not in n for n in names)
            triton_static = any("_quantize_static_kernel" in n for n in names)
            assert (cuda_static, triton_static) == (single, not single), (m, sorted(names))
