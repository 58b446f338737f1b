"""The single op ``w8a8::linear_sm90`` (``w8a8._C``) on a Hopper GPU: the CUDA quantizer,
then the sm90 GEMM as its programmatic dependent (its first weight tiles loaded before it waits
for the quantizer). Against quantize + scaled_mm bit for bit: dynamic and static with a zero
point, bias, bf16 and fp16, padded rows, a forced table entry; weights and input rewritten by
the kernels right before it in a CUDA graph; layers back to back; its refusals. The sm90 table
itself (``w8a8::scaled_mm_sm90``): test_sm90.py.
"""
import pytest
import torch

from w8a8 import dispatch
from helpers import SM90, capture_graph, poison_allocator, rand_int8, rand_scale, requires_sm90

pytestmark = [pytest.mark.sm90, requires_sm90]

linear_op = torch.ops.w8a8.linear_sm90.default if SM90 else None


# --- w8a8::linear_sm90: the quantizer, then the GEMM as its programmatic dependent ------------------


def _linear_operands(m, n, k, dtype, static):
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    w, ws = rand_int8(n, k, device="cuda"), rand_scale(n, device="cuda")
    bias = torch.randn(n, device="cuda").to(dtype)
    s = torch.tensor([0.03], device="cuda") if static else None
    zp = torch.tensor([-7], dtype=torch.int8, device="cuda") if static else None
    return x, w, ws, bias, s, zp


def _composed(x, w, ws, bias, s, zp):
    return dispatch.linear_composed(x, w, ws, bias, s, zp, mm_backend="sm90", quant_backend="sm90")


@pytest.mark.parametrize("m", [1, 5, 17, 33, 64, 65, 100, 128, 129, 150, 192, 193, 256, 320])
# more K blocks than stages; fewer; N > 4096 (the 128x128 pingpong tile at M = 193..256); rows
# the quantizer's ring kernel takes (from 320 tokens)
@pytest.mark.parametrize("n,k", [(384, 4096), (1024, 256), (4224, 256), (256, 28672)])
def test_linear_sm90_equals_quantize_then_scaled_mm(m, n, k):
    """The single op (the GEMM loads its first weight tiles before waiting for the quantizer,
    its codes row-padded as w8a8.padding pads them) gives the composition's bits: dynamic and
    static with a zero point, bias, bf16 and fp16."""
    from w8a8 import padding

    for dtype, static in ((torch.bfloat16, False), (torch.float16, True)):
        args = _linear_operands(m, n, k, dtype, static)
        want = _composed(*args)
        for padded in (0, padding.padded_rows(m)):
            poison_allocator(padding.padded_rows(m) * max(n, k) * 2, "cuda")
            got = linear_op(*args, rows=padded)
            torch.cuda.synchronize()
            assert got.shape == (m, n) and got.is_contiguous()
            assert torch.equal(got, want), (m, n, k, dtype, padded)


def test_linear_sm90_reads_weights_written_just_before_it():
    """In a CUDA graph: weights and input rewritten by the kernels right before the call (the
    GEMM reads weights before its wait, which is safe because the quantizer between them lets
    it launch only after waiting for the copies); every replay has the new operands' bits."""
    from w8a8 import padding

    m, n, k = 100, 1024, 4096
    x, w, ws, bias, _, _ = _linear_operands(m, n, k, torch.bfloat16, False)
    new_x, new_w = x.clone(), w.clone()

    def step():
        x.copy_(new_x)
        w.copy_(new_w)
        return linear_op(x, w, ws, bias, None, None, rows=padding.padded_rows(m))

    graph, out = capture_graph(step)
    for _ in range(3):
        new_x.copy_(torch.randn_like(new_x))
        new_w.copy_(rand_int8(n, k, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, _composed(new_x, new_w, ws, bias, None, None))


@pytest.mark.parametrize("m", [3, 64, 100, 200, 300, 600])
def test_layers_back_to_back_equal_one_layer_at_a_time(m):
    """Every kernel of the sm90 path launches as a programmatic dependent of the kernel before
    it (csrc/common/programmatic_launch.cuh): each layer's quantizer reads what the GEMM before
    it wrote, into memory the allocator recycles. Back to back, eagerly and replayed in a CUDA
    graph, the stack gives the bits of the same stack synchronized after every layer: the
    single op (up to 256 tokens) and quantize + scaled_mm, dynamic and static."""
    from w8a8 import padding

    k = 1024
    layers = [_linear_operands(1, k, k, torch.bfloat16, static)[1:] for static in (False, True, False, False)]

    def stack(x, sync=False):
        for i, (w, ws, bias, s, zp) in enumerate(layers):
            if m <= 256 and i % 2 == 0:
                x = linear_op(x, w, ws, bias, s, zp, rows=padding.padded_rows(m))
            else:
                x = _composed(x, w, ws, bias, s, zp)
            if sync:
                torch.cuda.synchronize()
        return x

    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    want = stack(x, sync=True)
    assert torch.isfinite(want).all() and want.abs().max() > 0
    assert torch.equal(stack(x), want)
    graph, out = capture_graph(lambda: stack(x))
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        want = stack(x, sync=True)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, want)


@pytest.mark.parametrize("config", ["swap_64x32x256_1x1_ws", "swap_64x96x128_1x2_ws", "swap_128x96x128_1x2_coop",
                                    "128x128x128_2x1_pingpong_swz8"])
def test_linear_sm90_with_a_forced_config(config):
    """``config`` names the GEMM's table entry (benchmarks time a tile end to end with it): the
    bits of the CUDA quantizer's codes through scaled_mm_sm90 forced to the same entry."""
    from w8a8 import padding

    m, n, k = 100, 1000, 528
    x, w, ws, bias, _, _ = _linear_operands(m, n, k, torch.bfloat16, False)
    q, s = torch.ops.w8a8.quantize_per_token_sm90(x)
    want = torch.ops.w8a8.scaled_mm_sm90(q, w, s, ws, bias, torch.bfloat16, config, None, "auto")
    for padded in (0, padding.padded_rows(m)):
        poison_allocator(padding.padded_rows(m) * max(n, k) * 2, "cuda")
        got = linear_op(x, w, ws, bias, None, None, rows=padded, config=config)
        torch.cuda.synchronize()
        assert torch.equal(got, want), (config, padded)


def test_linear_sm90_refuses_an_unknown_config():
    args = _linear_operands(4, 64, 128, torch.bfloat16, False)
    with pytest.raises(ValueError, match=r"w8a8.linear: config must be '' \(the heuristic\) or an entry of the sm90 "
                                         r"table \(.*\), got 'no_such_entry'"):
        linear_op(*args, config="no_such_entry")


def test_linear_sm90_refuses_fewer_rows_than_tokens():
    args = _linear_operands(17, 64, 128, torch.bfloat16, False)
    with pytest.raises(ValueError, match=r"w8a8.linear: rows .* at least the 17 tokens of x, got 16"):
        linear_op(*args, rows=16)
