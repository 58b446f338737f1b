"""Test helpers: random int8 data, output poisoning, ulp distances, CUDA-graph capture."""
from __future__ import annotations

import torch

from w8a8.bench.harness import capture_graph  # noqa: F401  (one capture recipe for tests and benchmarks)

# Relative L2 error of a W8A8Linear against its float nn.Linear, by activation dtype.
# int8 rounding of weights and activations gives ~0.5-1.5% on Gaussian data;
# bf16's own 8-bit mantissa adds ~0.4%.
LINEAR_REL_TOL = {torch.float32: 0.025, torch.float16: 0.025, torch.bfloat16: 0.03}


def rand_int8(*shape, device="cpu") -> torch.Tensor:
    """Uniform over the full int8 range, -128 included."""
    return torch.randint(-128, 128, shape, dtype=torch.int8, device=device)


def rand_scale(*shape, device="cpu") -> torch.Tensor:
    """Positive float32 scales spread over two decades."""
    return (torch.rand(shape, device=device) * 2 - 1).exp2_().mul_(1e-3).float() * 10 ** torch.rand(
        shape, device=device
    ).float()


def _ordered(t: torch.Tensor) -> torch.Tensor:
    """Map floats to integers that are ordered like the floats (sign-magnitude to two's complement)."""
    int_dtype = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}[t.dtype]
    bits = t.contiguous().view(int_dtype).long()
    sign_bit = 1 << (torch.iinfo(int_dtype).bits - 1)
    return torch.where(bits < 0, -(bits + sign_bit), bits)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-element distance in units in the last place of a's dtype (NaNs must match separately)."""
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    return (_ordered(a) - _ordered(b)).abs()


def assert_ulp_close(out: torch.Tensor, ref: torch.Tensor, max_ulp: int = 1) -> None:
    """Every element within ``max_ulp`` of the reference; NaN exactly where the reference is NaN."""
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert out.dtype == ref.dtype, (out.dtype, ref.dtype)
    out, ref = out.cpu(), ref.cpu()
    nan_out, nan_ref = out.isnan(), ref.isnan()
    assert torch.equal(nan_out, nan_ref), f"NaN mismatch at {(nan_out != nan_ref).nonzero()[:5].tolist()}"
    d = ulp_distance(out.masked_fill(nan_out, 0), ref.masked_fill(nan_ref, 0))
    worst = int(d.max()) if d.numel() else 0
    if worst > max_ulp:
        idx = tuple(int(i) for i in (d == worst).nonzero()[0])
        raise AssertionError(
            f"{int((d > max_ulp).sum())} of {d.numel()} elements differ by more than {max_ulp} ulp; "
            f"worst {worst} ulp at {idx}: got {out[idx].item()}, expected {ref[idx].item()}"
        )


def poison(shape, dtype, device) -> torch.Tensor:
    """A NaN-filled tensor: anything a kernel forgets to write stays NaN."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def poison_allocator(nbytes: int, device) -> None:
    """Fill the memory the next allocations will likely reuse with 0xFF bytes (NaN in bf16/fp16/fp32).

    The ops allocate their own outputs; on CUDA the caching allocator hands the
    freed block back to the next request of a similar size, so an element a
    kernel forgets to write reads NaN and fails the comparison.
    """
    blocks = [torch.full((max(nbytes, 1),), 0xFF, dtype=torch.uint8, device=device) for _ in range(4)]
    del blocks


def rows_with_spread(r: int, k: int, dtype: torch.dtype, device) -> torch.Tensor:
    """Gaussian rows, each with its own magnitude over ~8 decades, cast to dtype."""
    mag = torch.exp2(torch.empty(r, 1, device=device).uniform_(-14, 12))
    return (torch.randn(r, k, device=device) * mag).to(dtype)


def plant_special_rows(x: torch.Tensor) -> torch.Tensor:
    """Rows 0..4 (those that exist) become: zero, one NaN, +Inf, -Inf, Inf and NaN."""
    x = x.clone()
    k = x.shape[-1]
    rows = x.view(-1, k)
    specials = [None, [float("nan")], [float("inf")], [float("-inf")], [float("inf"), float("nan")]]
    for i, vals in enumerate(specials[: rows.shape[0]]):
        if vals is None:
            rows[i] = 0
        else:
            for j, v in enumerate(vals):
                rows[i, (j * 7 + i) % k] = v
    return x


def check_w8a8linear_graph(backend: str, m: int) -> None:
    """A W8A8Linear (4096 -> 1024, bias) on ``backend`` captured in a CUDA graph and
    replayed with new inputs: each replay within 1 ulp of the exact reference."""
    import w8a8
    from w8a8 import reference

    lin = torch.nn.Linear(4096, 1024, bias=True, device="cuda", dtype=torch.bfloat16)
    layer = w8a8.W8A8Linear.from_linear(lin, backend=backend)
    x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
    graph, y = capture_graph(lambda: layer(x))
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        q, s = reference.quantize_per_token(x)
        expected = reference.scaled_mm(q, layer.weight, s, layer.weight_scale, layer.bias, torch.bfloat16)
        assert_ulp_close(y, expected, max_ulp=1)
