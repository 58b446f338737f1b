"""Tensor parallelism for W8A8 layers over torch.distributed (see ``layers`` for the math).

    from w8a8.parallel import Colwise, Rowwise, llama_plan, shard_model
    shard_model(model, {"mlp.gate_up_proj": Colwise(output_sizes=(14336, 14336)),
                        "mlp.down_proj": Rowwise()}, group)
    # or straight from a checkpoint, each rank reading only its slices:
    w8a8.load_quantized(model, ckpt_dir, device="cuda", tp_plan=llama_plan(model), tp_group=group)
"""
from w8a8.parallel.layers import ColumnParallelW8A8Linear, RowParallelW8A8Linear
from w8a8.parallel.plan import Colwise, Rowwise, llama_plan, shard_model

__all__ = ["Colwise", "ColumnParallelW8A8Linear", "RowParallelW8A8Linear", "Rowwise", "llama_plan", "shard_model"]
