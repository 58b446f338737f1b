"""Which layers shard how: ``Colwise`` / ``Rowwise`` styles, a plan (layer name -> style),
``shard_model`` for a model already in memory, and the slicing rule the checkpoint loader
applies to each tensor so that a rank reads only its block of the file."""
from __future__ import annotations

import dataclasses

import torch
from torch import nn

from w8a8.linear import W8A8Linear
from w8a8.parallel.layers import (
    ColumnParallelW8A8Linear,
    RowParallelW8A8Linear,
    check_column_split,
    check_row_split,
    column_rows,
    group_rank_world,
    shard_bounds,
)


@dataclasses.dataclass(frozen=True)
class Colwise:
    """Shard the output channels. ``output_sizes``: the pieces of a fused output (e.g.
    gate and up), each split evenly; ``gather_output``: all-gather the full output."""

    output_sizes: tuple[int, ...] | None = None
    gather_output: bool = False

    def check(self, name: str, out_features: int, in_features: int, input_zero_point: bool, group) -> None:
        """Raise (naming the layer) if this layer cannot shard so over ``group``."""
        check_column_split(f"{name}: Colwise", out_features, self.output_sizes, group)

    def shard(self, layer: W8A8Linear, group) -> ColumnParallelW8A8Linear:
        return ColumnParallelW8A8Linear.from_full(layer, group, self.output_sizes, self.gather_output)

    def empty(self, layer_args: dict, group) -> ColumnParallelW8A8Linear:
        return ColumnParallelW8A8Linear(**layer_args, group=group, output_sizes=self.output_sizes,
                                        gather_output=self.gather_output)

    def slice(self, buffer: str, t: torch.Tensor, out_features: int, in_features: int, group) -> torch.Tensor:
        if buffer in ("weight", "weight_scale", "bias"):
            sizes = check_column_split("Colwise", out_features, self.output_sizes, group)
            return t.index_select(0, column_rows(sizes, *group_rank_world(group)))
        return t  # input_scale, input_zero_point: replicated


@dataclasses.dataclass(frozen=True)
class Rowwise:
    """Shard the input channels (K); the output is reduced, whole on every rank.
    ``reduce``: ``"int32"`` (exact) or ``"dequantized"`` (see ``RowParallelW8A8Linear``)."""

    reduce: str = "int32"

    def check(self, name: str, out_features: int, in_features: int, input_zero_point: bool, group) -> None:
        """Raise (naming the layer) if this layer cannot shard so over ``group``."""
        check_row_split(f"{name}: Rowwise", in_features, input_zero_point, self.reduce, group)

    def shard(self, layer: W8A8Linear, group) -> RowParallelW8A8Linear:
        return RowParallelW8A8Linear.from_full(layer, group, self.reduce)

    def empty(self, layer_args: dict, group) -> RowParallelW8A8Linear:
        return RowParallelW8A8Linear(**layer_args, group=group, reduce=self.reduce)

    def slice(self, buffer: str, t: torch.Tensor, out_features: int, in_features: int, group) -> torch.Tensor:
        if buffer == "weight":
            begin, end = shard_bounds(in_features, *group_rank_world(group), "Rowwise: in_features")
            return t[:, begin:end].contiguous()  # copies the slice's bytes only
        return t  # weight_scale, bias, input_scale: whole on every rank


Style = Colwise | Rowwise


def llama_plan(model: nn.Module) -> dict[str, Style]:
    """The usual plan for Llama-style blocks: q/k/v, gate/up (and fused qkv / gate_up,
    split into their equal pieces) column-wise, o and down row-wise."""
    plan: dict[str, Style] = {}
    for name, module in model.named_modules():
        leaf = name.rpartition(".")[2]
        out = getattr(module, "out_features", None)
        if leaf in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"):
            plan[name] = Colwise()
        elif leaf == "gate_up_proj" and out is not None:
            plan[name] = Colwise(output_sizes=(out // 2, out // 2))
        elif leaf in ("o_proj", "down_proj"):
            plan[name] = Rowwise()
    return plan


def shard_model(model: nn.Module, plan: dict[str, Style], group=None) -> nn.Module:
    """Replace each planned ``W8A8Linear`` of ``model`` by this rank's shard, in place.
    Every name is checked before anything changes; a fused model (``w8a8.fusion.fuse_model``) is
    unfused first."""
    layers = {}
    for name, style in plan.items():
        try:
            layer = model.get_submodule(name)
        except AttributeError:
            raise ValueError(f"w8a8.shard_model: the plan names {name!r}, which the model does not have") from None
        if not isinstance(layer, W8A8Linear) or isinstance(layer, (ColumnParallelW8A8Linear, RowParallelW8A8Linear)):
            raise TypeError(f"w8a8.shard_model: {name!r} must be an unsharded W8A8Linear, got {type(layer).__name__}")
        if not isinstance(style, (Colwise, Rowwise)):
            raise TypeError(f"w8a8.shard_model: plan[{name!r}] must be Colwise or Rowwise, got {style!r}")
        style.check(name, layer.out_features, layer.in_features, layer.input_zero_point is not None, group)
        layers[name] = layer
    sharded = {name: plan[name].shard(layer, group) for name, layer in layers.items()}
    # The fused modules' plans name the layers being replaced: undone first (they would step
    # aside, but the norms would still quantize for readers that are gone; the recording
    # leaves tensor-parallel layers alone).
    from w8a8.fusion import unfuse_model

    unfuse_model(model)
    for name, layer in sharded.items():
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, layer)
    return model
