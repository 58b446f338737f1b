"""Tensor-parallel MLP block on two GPUs: bf16 vs W8A8, all-reduce included.

    python -m benchmarks.tp [--out benchmarks/results] [--tag h200x2] [--m 1,2048]

Llama-3-70B's MLP (hidden 8192, intermediate 28672) split over 2 ranks (NCCL): gate_up
57344 x 8192 column-parallel (each rank: half of gate and half of up, 28672 x 8192),
SiLU(gate) * up, down 8192 x 28672 row-parallel (each rank 8192 x 14336), all-reduce.
Rows (rank 0's clock; both ranks replay the same CUDA graph of REPEATS back-to-back
blocks, collectives inside; median of the replays):
  * ``bf16 TP=2``                       - F.linear shards, bf16 all-reduce;
  * ``w8a8 TP=2 reduce=int32``          - W8A8 layers, the exact int32 reduction (bit-identical to one GPU);
  * ``w8a8 TP=2 reduce=dequantized``    - fused kernels, bf16 all-reduce of dequantized partials.
One rank's weights (705 MB bf16, 352 MB int8) are 7-14x the 50 MB L2, so no rotation is needed.
"""
from __future__ import annotations

import argparse
import datetime
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

HIDDEN, INTER = 8192, 28672
WORLD = 2
REPEATS = 4  # blocks per graph replay: amortizes the replay launch at M = 1


def _bf16_block(device):
    gate_up = torch.randn(2 * INTER // WORLD, HIDDEN, device=device, dtype=torch.bfloat16) * HIDDEN**-0.5
    down = torch.randn(HIDDEN, INTER // WORLD, device=device, dtype=torch.bfloat16) * INTER**-0.5

    def block(x):
        gate, up = F.linear(x, gate_up).chunk(2, dim=-1)
        y = F.linear(F.silu(gate) * up, down)
        dist.all_reduce(y)
        return y

    return block


def _w8a8_block(device, reduce):
    from w8a8.parallel import ColumnParallelW8A8Linear, RowParallelW8A8Linear

    col = ColumnParallelW8A8Linear(HIDDEN, 2 * INTER, bias=False, output_sizes=[INTER, INTER], device=device,
                                   dtype=torch.bfloat16)
    row = RowParallelW8A8Linear(INTER, HIDDEN, bias=False, reduce=reduce, device=device, dtype=torch.bfloat16)
    for layer in (col, row):
        layer.weight.copy_(torch.randint(-127, 128, layer.weight.shape, dtype=torch.int8, device=device))
        layer.weight_scale.copy_(torch.rand(layer.out_features, device=device) * 2e-4 + 1e-4)

    def block(x):
        gate, up = col(x).chunk(2, dim=-1)
        return row(F.silu(gate) * up)

    return block


def _run(rank, init_file, ms, out_dir, tag):
    from benchmarks import harness

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=WORLD, device_id=device,
                            timeout=datetime.timedelta(seconds=120))
    try:
        ceilings = harness.measure_ceilings(device) if rank == 0 else {}
        dist.barrier()
        impls = {"bf16 TP=2": lambda: _bf16_block(device),
                 "w8a8 TP=2 reduce=int32": lambda: _w8a8_block(device, "int32"),
                 "w8a8 TP=2 reduce=dequantized": lambda: _w8a8_block(device, "dequantized")}
        rows = []
        for name, make in impls.items():
            block = make()
            for m in ms:
                x = torch.randn(m, HIDDEN, device=device, dtype=torch.bfloat16)
                block(x)  # NCCL communicators and kernels set up outside the capture
                torch.cuda.synchronize()
                dist.barrier()
                timing = harness.time_graph([lambda: block(x)] * REPEATS, replays=30)
                rows.append({"impl": name, "M": m, "us": round(timing.us, 2), "spread": round(timing.spread, 4)})
                if rank == 0:
                    print(f"benchmarks.tp: {name} M={m}: {timing.us:.1f} us per block", flush=True)
            del block
            torch.cuda.empty_cache()
        if rank == 0:
            _finish(rows, ceilings, out_dir, tag, device)
        dist.barrier()
    finally:
        dist.destroy_process_group()


# Physical limits of one H200 (datasheet): dense int8 and bf16 tensor-core peaks. HBM is measured.
H200_INT8_OPS, H200_BF16_FLOPS = 1979e12, 989e12


def _finish(rows, ceilings, out_dir, tag, device):
    from benchmarks import harness

    base = {r["M"]: r["us"] for r in rows if r["impl"].startswith("bf16")}
    for r in rows:
        m, t = r["M"], r["us"] * 1e-6
        r["x_bf16"] = round(base[m] / r["us"], 3)
        int8 = r["impl"].startswith("w8a8")
        weight_bytes = (2 * INTER // WORLD * HIDDEN + HIDDEN * INTER // WORLD) * (1 if int8 else 2)
        ops = 2 * m * HIDDEN * (2 * INTER // WORLD + INTER // WORLD)
        r["weight_gbps_per_gpu"] = round(weight_bytes / t / 1e9, 1)
        r["tops_per_gpu"] = round(ops / t / 1e12, 1)
        compute_s = ops / (H200_INT8_OPS if int8 else H200_BF16_FLOPS)
        memory_s = weight_bytes / ceilings["hbm_bytes_per_s"]
        r["pct_of_bound"] = round(100 * max(compute_s, memory_s) / t, 1)
        r["bound"] = "compute" if compute_s >= memory_s else "memory"
    print("| impl | M | us per block | x bf16 | weight GB/s per GPU | TOP/s per GPU | % of bound |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['impl']} | {r['M']} | {r['us']:.1f} | {r['x_bf16']:.2f} | {r['weight_gbps_per_gpu']} | "
              f"{r['tops_per_gpu']} | {r['pct_of_bound']} ({r['bound']}) |")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, f"tp_mlp_{tag}.json")
        env = {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST")}
        harness.write_results(path, rows, ceilings, {"kind": "tp_mlp", "world": WORLD, "hidden": HIDDEN,
                                                     "intermediate": INTER, "repeats_per_replay": REPEATS,
                                                     "nccl_env": env, "nccl": ".".join(map(str, torch.cuda.nccl.version()))},
                              device)
        print(f"wrote {path}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--m", default="1,2048", help="token counts (default 1,2048)")
    p.add_argument("--out", default=None)
    p.add_argument("--tag", default="h200x2")
    args = p.parse_args(argv)
    if torch.cuda.device_count() < WORLD:
        raise SystemExit(f"benchmarks.tp: needs {WORLD} GPUs, found {torch.cuda.device_count()}")
    ms = [int(v) for v in args.m.split(",")]
    init_file = tempfile.mktemp(prefix="w8a8-tp-")
    mp.spawn(_run, args=(init_file, ms, args.out, args.tag), nprocs=WORLD, join=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
