"""Tensor-parallel W8A8 linear layers over a torch.distributed process group.

Column-parallel (q/k/v, gate/up): each rank holds a block of the weight's rows (output
channels) and their per-channel scales and bias; the layer is a ``W8A8Linear`` of that
block, so every output element is computed exactly as the unsharded layer computes it.

Row-parallel (o, down): each rank holds a block of the weight's columns (K) and the
input's matching slice; the output channels, their scales and the bias are whole on
every rank. To give the unsharded layer's bits, the ranks reduce what is exact:

    stats  = all_reduce_max(per-token row stats of the local slice)   (dynamic only)
    q      = the local slice quantized with the whole rows' scales     (= the unsharded codes)
    acc    = all_reduce_sum(q @ W_local^T)                             (int32: exact)
    out    = reference.dequantize(acc, scale, weight_scale, bias)      (bias added once)

Reducing dequantized bf16 partials instead would round twice and differ from one GPU.
The cost is an int32 all-reduce (twice the bytes of a bf16 one) and, with dynamic
activations, a second all-reduce of M floats.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from w8a8 import dispatch, ops, reference, validate
from w8a8.linear import W8A8Linear

_COL = "ColumnParallelW8A8Linear"
_ROW = "RowParallelW8A8Linear"
REDUCE_MODES = ("int32", "dequantized")


def group_rank_world(group) -> tuple[int, int]:
    return dist.get_rank(group), dist.get_world_size(group)


def shard_bounds(size: int, rank: int, world: int, what: str) -> tuple[int, int]:
    """[begin, end) of rank's equal block of ``size``; raises when world does not divide it."""
    if size % world:
        raise ValueError(f"w8a8.parallel: {what} = {size} does not split evenly over {world} ranks")
    block = size // world
    return rank * block, (rank + 1) * block


def check_column_split(what: str, out_features: int, output_sizes, group) -> list[int]:
    """The pieces of a column-parallel output (default: one), checked: they add up to
    ``out_features`` and each splits evenly over ``group``. ``what`` names the layer."""
    sizes = list(output_sizes) if output_sizes is not None else [out_features]
    if sum(sizes) != out_features:
        raise ValueError(f"w8a8.parallel: {what} output_sizes {sizes} must add up to out_features = {out_features}")
    rank, world = group_rank_world(group)
    for i, size in enumerate(sizes):
        shard_bounds(size, rank, world, f"{what} output piece {i}")
    return sizes


def check_row_split(what: str, in_features: int, input_zero_point: bool, reduce: str, group) -> None:
    """Raise unless a row-parallel shard of this layer can exist (``what`` names the layer)."""
    if reduce not in REDUCE_MODES:
        raise ValueError(f"w8a8.parallel: {what} reduce must be one of {REDUCE_MODES}, got {reduce!r}")
    if input_zero_point:
        raise ValueError(f"w8a8.parallel: {what} does not take layers with an input zero point (its bias correction "
                         "needs the whole K); shard it column-wise or keep it whole")
    shard_bounds(in_features, *group_rank_world(group), f"{what} in_features")


def column_rows(output_sizes: list[int], rank: int, world: int) -> torch.Tensor:
    """Indices of the weight rows a column-parallel rank holds: its block of each output
    piece (a fused gate_up keeps half of gate and half of up on each of two ranks)."""
    rows, offset = [], 0
    for i, size in enumerate(output_sizes):
        begin, end = shard_bounds(size, rank, world, f"output piece {i}")
        rows.append(torch.arange(offset + begin, offset + end))
        offset += size
    return torch.cat(rows)


class ColumnParallelW8A8Linear(W8A8Linear):
    """A ``W8A8Linear`` holding this rank's output channels (see the module docstring).

    ``output_sizes``: the pieces the full output is made of (default: one piece), each
    split evenly over the ranks. ``gather_output``: all-gather the full output on every
    rank (default: keep the local block, what a following row-parallel layer takes).
    """

    def __init__(self, in_features: int, out_features: int, *, group=None, output_sizes: list[int] | None = None,
                 gather_output: bool = False, **kwargs) -> None:
        self.output_sizes = check_column_split(_COL, out_features, output_sizes, group)
        super().__init__(in_features, out_features // dist.get_world_size(group), **kwargs)
        self.group, self.gather_output, self.full_out_features = group, gather_output, out_features

    @classmethod
    def from_full(cls, layer: W8A8Linear, group=None, output_sizes: list[int] | None = None,
                  gather_output: bool = False) -> "ColumnParallelW8A8Linear":
        """This rank's shard of an unsharded layer (buffers copied, on the layer's device)."""
        out = _empty_like(cls, layer, group=group, output_sizes=output_sizes, gather_output=gather_output)
        rows = column_rows(out.output_sizes, *group_rank_world(group)).to(layer.weight.device)
        with torch.no_grad():
            out.weight.copy_(layer.weight.index_select(0, rows))
            out.weight_scale.copy_(layer.weight_scale.index_select(0, rows))
            if layer.bias is not None:
                out.bias.copy_(layer.bias.index_select(0, rows))
            _copy_input_quant(out, layer)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        if not self.gather_output:
            return y
        rank, world = group_rank_world(self.group)
        parts = [torch.empty_like(y) for _ in range(world)]
        dist.all_gather(parts, y.contiguous(), group=self.group)
        # Rank r holds block r of every piece: reassemble piece by piece.
        pieces, offset = [], 0
        for size in self.output_sizes:
            block = size // world
            pieces += [p[..., offset : offset + block] for p in parts]
            offset += block
        return torch.cat(pieces, dim=-1)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", full_out_features={self.full_out_features}, gather_output={self.gather_output}"


class RowParallelW8A8Linear(W8A8Linear):
    """A ``W8A8Linear`` over this rank's K-slice whose output is reduced over the group:
    whole and identical on every rank. ``forward`` takes the input's K-slice
    ([..., in_features / world], e.g. a column-parallel output).

    Buffers as ``W8A8Linear`` with ``weight`` int8 [out_features, in_features / world];
    ``weight_scale``, ``bias`` and ``input_scale`` whole on every rank.

    ``reduce``:
      * ``"int32"`` (default): the exact reduction of the module docstring; the output
        equals the unsharded layer's bit for bit.
      * ``"dequantized"``: each rank runs the fused kernel on its slice (dynamic
        activations with the slice's own per-token scales, no extra collective; the
        bias on rank 0 only) and the outputs are summed in the layer's dtype, as vLLM
        does: one all-reduce of half the bytes, and a second rounding (not bit-exact).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, act_quant: str = "dynamic",
                 backend: str | None = None, *, group=None, reduce: str = "int32", device=None,
                 dtype: torch.dtype | None = None, input_zero_point: bool = False) -> None:
        check_row_split(_ROW, in_features, input_zero_point, reduce, group)
        rank, world = group_rank_world(group)
        super().__init__(in_features // world, out_features, bias=bias, act_quant=act_quant, backend=backend,
                         device=device, dtype=dtype)
        self.group, self.reduce, self.full_in_features, self.rank = group, reduce, in_features, rank

    @classmethod
    def from_full(cls, layer: W8A8Linear, group=None, reduce: str = "int32") -> "RowParallelW8A8Linear":
        out = _empty_like(cls, layer, group=group, reduce=reduce)
        begin, end = shard_bounds(layer.in_features, *group_rank_world(group), f"{_ROW}: in_features")
        with torch.no_grad():
            out.weight.copy_(layer.weight[:, begin:end])
            out.weight_scale.copy_(layer.weight_scale)
            if layer.bias is not None:
                out.bias.copy_(layer.bias)
            _copy_input_quant(out, layer)
        return out

    def folded_bias(self) -> torch.Tensor | None:
        # "dequantized": the ranks' outputs are summed, so only rank 0's carries the bias.
        return self.bias if self.rank == 0 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.reduce == "dequantized":
            y = super().forward(x)
            dist.all_reduce(y, op=dist.ReduceOp.SUM, group=self.group)
            return y
        validate.linear(x, self.weight, self.weight_scale, self.bias, self.input_scale, None)
        x2 = x.reshape(-1, self.in_features)
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        if self.act_quant == "dynamic":
            row_stats, quantize_with_row_stats = dispatch.row_stats_kernels(x2.device)
            stats = row_stats(x2)
            dist.all_reduce(stats, op=dist.ReduceOp.MAX, group=self.group)
            q, a_scale = quantize_with_row_stats(x2, stats)
        else:
            q = ops.quantize_static(x2, self.input_scale, None)
            a_scale = self.input_scale
        acc = dispatch.int_mm(q, self.weight)
        dist.all_reduce(acc, op=dist.ReduceOp.SUM, group=self.group)
        out = reference.dequantize(acc, a_scale, self.weight_scale, self.bias, x.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", full_in_features={self.full_in_features}, reduce={self.reduce!r}"


def _empty_like(cls, layer: W8A8Linear, **kwargs):
    return cls(layer.in_features, layer.out_features, bias=layer.bias is not None, act_quant=layer.act_quant,
               backend=layer.backend, device=layer.weight.device,
               dtype=layer.bias.dtype if layer.bias is not None else None,
               input_zero_point=layer.input_zero_point is not None, **kwargs)


def _copy_input_quant(out, layer: W8A8Linear) -> None:
    """The static per-tensor input scale (and zero point) are replicated on every rank."""
    if layer.input_scale is not None:
        out.input_scale.copy_(layer.input_scale)
    if layer.input_zero_point is not None:
        out.input_zero_point.copy_(layer.input_zero_point)
