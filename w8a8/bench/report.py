"""docs/PERFORMANCE.md and its plots, from the committed results in benchmarks/results/.

    python -m w8a8.bench.report

Every figure on that page is computed here from the files listed in SOURCES, and
benchmarks/results holds exactly those files (tests/test_bench.py checks both). The
plots need matplotlib; the page does not.
"""
from __future__ import annotations

import functools
import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository (an editable install)
RESULTS = ROOT / "benchmarks" / "results"
DOCS = ROOT / "docs"

_MM = "python -m w8a8 bench --out benchmarks/results --suites scaled_mm"
_SWEEP = "--shapes 4096x4096,6144x4096,12288x4096,28672x4096,4096x14336,8192x8192,57344x8192,8192x28672 --configs <those entries>"
SERVING_M = (16, 32, 48, 64, 96, 128, 192, 256)
# The sm90 rows on the quantizers' row-padded codes (bench.scaled_mm.PRODUCER_ROWS; the report reads JSON only).
_LAYOUT = "w8a8 sm90, quantizer layout"
_SERVING = f"{_MM},linear --m {','.join(map(str, SERVING_M))} --tag serving_h100"
# Every file in benchmarks/results: what it holds, and the command (on the GPU machine) that writes it.
SOURCES = {
    "scaled_mm_h100.json": ("kernel grid: 8 Llama-3 shapes, M = 1..8192, every GEMM", f"{_MM} --tag h100"),
    "scaled_mm_decode_h100.json": ("the kernel grid at M = 1..16", f"{_MM} --m 1,2,4,5,8,16 --tag decode_h100"),
    "scaled_mm_skinnysweep_h100.json": ("M = 4..32: sm90, the swap-AB 128x16 tile, each skinny-GEMM K split",
                                        f"{_MM} --m 4,5,8,12,16,24,32 {_SWEEP} --tag skinnysweep_h100"),
    "scaled_mm_gemvsweep_h100.json": ("M = 1..16: sm90, the swap-AB 128x16 tile, each GEMV K split",
                                      f"{_MM} --m 1,2,3,4,8,16 {_SWEEP} --tag gemvsweep_h100"),
    "scaled_mm_configsweep_h100.json": ("every sm90 CUTLASS tile, M = 1..1024", f"{_MM} --backends sm90 "
                                        "--m 1,16,32,64,128,256,512,1024 --configs <every CUTLASS entry of a W8A8_SWEEP_CONFIGS=1 build> "
                                        "--tag configsweep_h100"),
    "linear_h100.json": ("`W8A8Linear` end to end on the kernel grid",
                         "python -m w8a8 bench --out benchmarks/results --suites linear --tag h100"),
    "quant_h100.json": ("per-token quantizers", "python benchmarks/bench_quant.py --out benchmarks/results/quant_h100.json"),
    "quant_serving_h100.json": ("per-token quantizers at M = 16..256, K = 4096..28672",
                                "python benchmarks/bench_quant.py --m 16,32,64,128,192,256 --k 4096,8192,14336,28672 "
                                "--out benchmarks/results/quant_serving_h100.json"),
    "decode_h100.json": ("host time per call; decode step", "python benchmarks/bench_decode.py --out benchmarks/results/decode_h100.json"),
    "split_k_h100.json": ("CUTLASS split-K / stream-K vs data-parallel", "python benchmarks/bench_split_k.py --out benchmarks/results"),
    "sm80_h100.json": ("sm80 forced, M = 1..512, 4 shapes", "python -m w8a8 bench --out benchmarks/results --suites sm80 --tag h100"),
    "scaled_mm_sm80_h100.json": ("sm80 vs sm90 and `torch._int_mm`", f"{_MM} --backends int_mm,sm90,sm80 --shapes "
                                 "8192x8192,4096x4096,28672x4096,4096x14336 --m 1,16,128,512,2048,8192 --tag sm80_h100"),
    "model_h100.json": ("transformers Llama at Llama-3-8B widths (4 layers, bf16 lm_head): bf16, w8a8 (fused), "
                        "w8a8-unfused; eager and compiled",
                        "python -m w8a8 bench --out benchmarks/results --suites model --variants w8a8,w8a8-unfused --tag h100"),
    "model_merge_h100.json": ("the same model in eager: merged sibling GEMMs against separate ones (w8a8-unmerged)",
                              "python -m w8a8 bench --out benchmarks/results --suites model --modes eager "
                              "--variants w8a8,w8a8-unfused,w8a8-unmerged --tag merge_h100"),
    "scaled_mm_tilesweep_h100.json": ("M = 5..128: the non-persistent 64-row sm90 tiles beside the ladder's and the skinny GEMM",
                                      f"W8A8_SWEEP_CONFIGS=1 build; {_MM} --backends sm90 --m 16,32,48,64,96,128 "
                                      "--configs <those entries> --tag tilesweep_h100 (and --m 5,8,12,16,24)"),
    "scaled_mm_serving_h100.json": ("the serving regime, M = 16..256, every GEMM", _SERVING),
    "linear_serving_h100.json": ("`W8A8Linear` end to end, M = 16..256", _SERVING),
    "scaled_mm_onewave_h100.json": ("M = 193..512: the 2x1-cluster cooperative 128x96 and 128x192 tiles "
                                    "(OneWavePolicy) beside the ladder and the 128x128 pingpong tile",
                                    f"{_MM} --backends sm90 --m 193,256,320,384,512 --shapes 6144x4096,10240x8192,"
                                    "4096x4096,8192x8192,28672x4096,4096x14336,57344x8192,8192x28672 --configs "
                                    "128x96x128_2x1_coop,128x192x128_2x1_coop,128x128x128_2x1_pingpong_swz8 "
                                    "--tag onewave_h100"),
    "scaled_mm_continuity_h100.json": ("sm90, every M of 1..256 on the Llama-3-8B shapes",
                                       f"{_MM} --backends sm90 --m 1..256 --shapes "
                                       "6144x4096,4096x4096,28672x4096,4096x14336 --tag continuity_h100"),
    "scaled_mm_rows_h100.json": ("M = 62..256 around the tile edges: sm90 on exact-size codes and on the quantizers' "
                                 "row-padded layout", "python -m w8a8 bench --out benchmarks/results --suites scaled_mm,linear "
                                 "--backends sm90 --m 62..68,72,80,96,112,124..132,144,160,176,190..194,224,252..256 "
                                 "--shapes 6144x4096,4096x4096,28672x4096,4096x14336 --tag rows_h100"),
    "scaled_mm_rung192_h100.json": ("M = 128, 192, 256: the tiles behind the M = 129..192 rung beside the ladder, "
                                    "10 shapes (before the 1x2 clusters: the 128x96 and 128x64 1x1 entries are "
                                    "sweep-only now)",
                                    f"W8A8_SWEEP_CONFIGS=1 build; {_MM} --backends sm90 --m 128,192,256 --shapes "
                                    "6144x4096,4096x4096,"
                                    "28672x4096,4096x14336,10240x8192,8192x8192,57344x8192,8192x28672,12288x4096,14336x4096 "
                                    "--configs swap_64x96x256_1x1_ws,swap_128x96x128_1x1_coop,swap_128x192x128_1x1_coop,"
                                    "swap_128x64x128_1x1_coop_dataparallel,128x128x128_2x1_pingpong_swz8 --tag rung192_h100"),
    "linear_rows_h100.json": ("`W8A8Linear` end to end at the same M (row-padded codes)", "(same run as the row above)"),
    "linear_single_op_h100.json": ("M = 96..512: `W8A8Linear` on sm90 beside both paths of `w8a8::linear` forced (the "
                                   "single op, quantize + scaled_mm)",
                                   "python -m w8a8 bench --out benchmarks/results --suites linear --backends sm90 --sweep "
                                   "--m 96,128,129,160,192,193,224,256,320,384,512 --tag single_op_h100"),
    "scaled_mm_rung384_h100.json": ("M = 256..512: the tiles behind the M = 257..320 and 321..384 rungs beside "
                                    "the ladder (exact-size and the quantizers' row-padded codes)",
                                    f"{_MM},linear --backends sm90 --m 256,257,288,320,352,384,385,448,512 --configs "
                                    "128x128x128_2x1_pingpong_swz8,swap_128x192x128_1x1_coop,swap_128x96x128_1x2_coop,"
                                    "swap_128x160x128_1x1_coop,swap_128x80x128_1x2_coop,128x240x128_1x1_coop "
                                    "--tag rung384_h100"),
    "linear_rung384_h100.json": ("`W8A8Linear` end to end at the same M", "(same run as the row above)"),
    "scaled_mm_onewave384_h100.json": ("M = 352, 384: the one-wave 128x144 and 128x240 tiles beside the swap-AB ones "
                                       "(the build whose ladder ran 128x144 on 6144 x 4096 at 384 rows)",
                                       f"W8A8_SWEEP_CONFIGS=1 build; {_MM},linear --backends sm90 --sweep --m 352,384 "
                                       "--configs 128x144x128_1x1_coop,128x240x128_1x1_coop,swap_128x96x128_1x2_coop,"
                                       "swap_128x192x128_1x1_coop --tag onewave384_h100"),
    "linear_onewave384_h100.json": ("`W8A8Linear`, both paths of `w8a8::linear` and the single op with its GEMM "
                                    "forced, at the same M", "(same run as the row above)"),
    "stream_h100.json": ("the read ceiling: kernels that only read a layer's int8 weights (three launch modes), bf16 "
                         "and the sm90 GEMM at M = 16, 64, 128 in the same run",
                         "python benchmarks/bench_stream.py --out benchmarks/results/stream_h100.json"),
    "scaled_mm_skinny16_h100.json": ("M = 5..16: the skinny GEMM (K split 8), the swap-AB 64x32 tile and the GEMV beside "
                                     "the ladder", f"{_MM} --backends sm90 --m 5,8,12,16 --configs swap_64x32x256_1x1_ws,"
                                     "skinny_mma_ksplit8,gemv_dp4a_ksplit1 --tag skinny16_h100"),
    "scaled_mm_m128cfg_h100.json": ("M = 96 and 128: the 64- and 128-row sm90 tiles beside the ladder (exact-size and the "
                                    "quantizers' row-padded codes; the build before the M = 65..96 rung)",
                                    f"{_MM} --backends sm90 --m 96,128 --configs swap_64x64x256_1x1_ws,swap_64x96x256_1x1_ws,"
                                    "64x64x256_1x1_ws,64x128x128_2x1_pingpong_swz8,swap_128x64x128_1x2_coop,"
                                    "swap_128x96x128_1x2_coop --tag m128cfg_h100"),
    "scaled_mm_pairsweep_h100.json": ("M = 16..128 on the N = 4096 shapes and 6144 x 4096: the swap-AB 64-row tiles "
                                      "with one token tile and as two token tiles of a 1x2 cluster, beside the ladder "
                                      "of the build before the pairs",
                                      f"W8A8_SWEEP_CONFIGS=1 build; {_MM} --backends sm90 --m 16,32,48,64,96,128 --shapes "
                                      "4096x4096,4096x14336,6144x4096 --configs swap_64x32x256_1x1_ws,swap_64x64x256_1x1_ws,"
                                      "swap_64x96x256_1x1_ws,64x64x256_1x1_ws,swap_64x16x256_1x2_ws,swap_64x32x256_1x2_ws,"
                                      "swap_64x48x256_1x2_ws,swap_64x64x256_1x2_ws --tag pairsweep_h100"),
    "scaled_mm_pair192_h100.json": ("M = 128..193 on the N = 4096 shapes: the swap-AB 64x96 tile with one and with two "
                                    "token tiles (1x2 cluster) beside the ladder (the pairs up to 192 tokens)",
                                    f"{_MM},linear --backends sm90 --m 128,129,160,192,193 --shapes 4096x4096,4096x14336 "
                                    "--configs swap_64x96x256_1x1_ws,swap_64x96x256_1x2_ws --tag pair192_h100"),
    "scaled_mm_pairwide_h100.json": ("M = 192..512 on the N = 4096 shapes: the pairs up to 512 tokens (the ladder of "
                                     "that build; sweep-only entries swap_64x128x256_1x2_ws, swap_64x192x128_1x2_ws and "
                                     "swap_64x256x128_1x2_ws now) beside the tiles of the 256, 384 and 512 rungs",
                                     f"W8A8_SWEEP_CONFIGS=1 build; {_MM},linear --backends sm90 --m "
                                     "192,193,224,256,257,320,384,385,448,512 --shapes 4096x4096,4096x14336 --configs "
                                     "swap_128x64x128_1x2_coop,swap_128x96x128_1x2_coop,swap_128x192x128_1x1_coop,"
                                     "128x128x128_2x1_pingpong_swz8 --tag pairwide_h100"),
    "linear_pairwide_h100.json": ("`W8A8Linear` end to end at the same M", "(same run as the row above)"),
    "scaled_mm_k128_h100.json": ("M = 192..256 on the N = 4096 shapes: the 128-token pair with 256- and 128-deep "
                                 "stages beside the swap-AB 128x64 1x2 tile (the ladder of that build: the "
                                 "128-deep pair)",
                                 f"W8A8_SWEEP_CONFIGS=1 build; {_MM},linear --backends sm90 --m 192,193,224,256 --shapes "
                                 "4096x4096,4096x14336 --configs swap_64x128x256_1x2_ws,swap_64x128x128_1x2_ws,"
                                 "swap_128x64x128_1x2_coop --tag k128_h100"),
    "scaled_mm_pairk128_h100.json": ("M = 16..192 on the N = 4096 shapes: the 16- to 96-token pairs on 128-deep stages "
                                     "beside the ladder of that build (those pairs on 256-deep stages)",
                                     f"W8A8_SWEEP_CONFIGS=1 build; {_MM},linear --backends sm90 --sweep --m "
                                     "16,32,48,64,96,128,192 --shapes 4096x4096,4096x14336 --configs "
                                     "swap_64x16x128_1x2_ws,swap_64x32x128_1x2_ws,swap_64x48x128_1x2_ws,"
                                     "swap_64x64x128_1x2_ws,swap_64x96x128_1x2_ws --tag pairk128_h100"),
    "linear_pairk128_h100.json": ("`W8A8Linear`, both paths of `w8a8::linear` and the single op with its GEMM forced "
                                  "to each of those pairs", "(same run as the row above)"),
    "scaled_mm_ws1x1_h100.json": ("M = 129..256 on 6144 x 4096, 8192 x 8192, 10240 x 8192: swap-AB 64-row tiles of one "
                                  "consumer warpgroup and no cluster (128, 192, 256 tokens; 64x96 256-deep) beside "
                                  "the ladder",
                                  f"W8A8_SWEEP_CONFIGS=1 build; {_MM},linear --backends sm90 --sweep --m 129,192,193,256 "
                                  "--shapes 6144x4096,8192x8192,10240x8192 --configs swap_64x128x128_1x1_ws,"
                                  "swap_64x192x128_1x1_ws,swap_64x256x128_1x1_ws,swap_64x96x256_1x1_ws --tag ws1x1_h100"),
    "linear_ws1x1_h100.json": ("`W8A8Linear`, both paths of `w8a8::linear` and the single op with its GEMM forced to "
                               "each of those tiles", "(same run as the row above)"),
    "scaled_mm_ws1x1wide_h100.json": ("M = 320..512 on the 4096-wide shapes: the 192- and 256-token tiles of one "
                                      "consumer warpgroup, with and without a 1x2 cluster, beside the ladder",
                                      f"W8A8_SWEEP_CONFIGS=1 build; {_MM},linear --backends sm90 --sweep --m 320,384,512 "
                                      "--shapes 4096x4096,4096x14336,6144x4096 --configs swap_64x192x128_1x1_ws,"
                                      "swap_64x256x128_1x1_ws,swap_64x192x128_1x2_ws,swap_64x256x128_1x2_ws "
                                      "--tag ws1x1wide_h100"),
    "linear_ws1x1wide_h100.json": ("`W8A8Linear`, both paths of `w8a8::linear` and the single op with its GEMM forced "
                                   "to each of those tiles", "(same run as the row above)"),
    "scaled_mm_twopersm_h100.json": ("M = 16..128: the swap-AB 64-row tiles sized for two CTAs per SM (the 16..64-token "
                                     "pairs, the 32- and 64-token 1x1 tiles) beside the ladder and the 1x1 tiles",
                                     f"W8A8_SWEEP_CONFIGS=1 build; {_MM} --backends sm90 --m 16,32,48,64,96,128 --shapes "
                                     "4096x4096,6144x4096,4096x14336,28672x4096 --configs swap_64x16x256_1x2_ws_2cta,"
                                     "swap_64x32x256_1x2_ws_2cta,swap_64x48x256_1x2_ws_2cta,swap_64x64x256_1x2_ws_2cta,"
                                     "swap_64x32x256_1x1_ws_2cta,swap_64x64x256_1x1_ws_2cta,swap_64x32x256_1x1_ws,"
                                     "swap_64x64x256_1x1_ws --tag twopersm_h100"),
    "linear_twopersm_h100.json": ("`W8A8Linear` at M = 16..512 on the two 4096-wide Llama-3-8B shapes: both paths of "
                                  "`w8a8::linear` and the single op with its GEMM forced to each two-per-SM pair",
                                  "W8A8_SWEEP_CONFIGS=1 build; python -m w8a8 bench --out benchmarks/results --suites "
                                  "linear --backends sm90 --sweep --m 16,32,64,128,193,256,320,384,512 --shapes "
                                  "4096x4096,6144x4096 --configs swap_64x16x256_1x2_ws_2cta,swap_64x32x256_1x2_ws_2cta,"
                                  "swap_64x96x128_1x2_ws_2cta,swap_64x128x128_1x2_ws_2cta,swap_64x160x128_1x2_ws_2cta,"
                                  "swap_64x192x128_1x2_ws_2cta --tag twopersm_h100"),
    "scaled_mm_twopersmwide_h100.json": ("M = 5..64 on 6144 x 4096 and 8192 x 8192 (whose 16-token pairs pass one wave "
                                         "at one CTA per SM): the 16- and 32-token two-per-SM pairs beside the ladder",
                                         f"W8A8_SWEEP_CONFIGS=1 build; {_MM},linear --backends sm90 --sweep --m "
                                         "5,8,12,16,24,32,48,64 --shapes 6144x4096,8192x8192 --configs "
                                         "swap_64x16x256_1x2_ws_2cta,swap_64x32x256_1x2_ws_2cta --tag twopersmwide_h100"),
    "linear_twopersmwide_h100.json": ("`W8A8Linear`, both paths of `w8a8::linear` and the single op with its GEMM forced "
                                      "to each of those pairs", "(same run as the row above)"),
    "scaled_mm_widetiles_h100.json": ("M = 96 and 128 on the six shapes with N > 4096: three tiles with fewer activation "
                                      "reads per weight byte beside the 64x128 pingpong tile",
                                      f"W8A8_SWEEP_CONFIGS=1 build; {_MM} --backends sm90 --m 96,128 --shapes "
                                      "6144x4096,8192x8192,10240x8192,28672x4096,57344x8192,8192x28672 --configs "
                                      "64x128x128_2x1_pingpong_swz8,64x256x128_2x1_pingpong,64x128x128_2x2_pingpong,"
                                      "swap_128x128x128_2x1_coop --tag widetiles_h100"),
    "scaled_mm_cluster_h100.json": ("M = 129..256: the swap-AB 128x96 and 128x64 tiles with and without a 1x2 cluster "
                                    "beside the ladder (plain launches; exact-size and the quantizers' row-padded codes)",
                                    f"W8A8_SWEEP_CONFIGS=1 build; {_MM} --backends sm90 --m 129,160,192,193,224,256 "
                                    "--configs swap_128x96x128_1x1_coop,swap_128x96x128_1x2_coop,"
                                    "swap_128x64x128_1x1_coop_dataparallel,swap_128x64x128_1x2_coop,"
                                    "swap_128x192x128_1x1_coop --tag cluster_h100"),
    "scaled_mm_cluster256_h100.json": ("M = 30..41 and 186..256: the swap-AB 128x64 tile with and without a 1x2 "
                                       "cluster beside the ladder, every launch programmatic (the 1x1 entry shipped "
                                       "then; the 37 / 38-token rows on 4096 x 4096 are the continuity sweep's step)",
                                       f"W8A8_SWEEP_CONFIGS=1 build; {_MM} --backends sm90 --m 30..41,186..200,224,256 "
                                       "--shapes 4096x4096,6144x4096,4096x14336 --configs swap_128x64x128_1x2_coop,"
                                       "swap_128x64x128_1x1_coop_dataparallel --tag cluster256_h100"),
    "scaled_mm_streamk_h100.json": ("M = 193..512: the 128x256 tile (2x1 cluster) and the 128x128 tile on CUTLASS's "
                                    "stream-K scheduler beside the ladder and its tiles (exact-size and the quantizers' "
                                    "row-padded codes)", f"W8A8_SWEEP_CONFIGS=1 build; {_MM} --backends sm90 --m "
                                    "193,256,320,384,448,512 --configs 128x256x128_2x1_coop_streamk,"
                                    "128x256x128_2x1_coop_streamk_forced,128x128x128_1x1_coop_streamk_forced,"
                                    "128x128x128_2x1_pingpong_swz8,swap_128x192x128_1x1_coop,swap_128x96x128_1x2_coop "
                                    "--tag streamk_h100"),
    "scaled_mm_streamk2_h100.json": ("M = 385..2048: the same stream-K entries beside the ladder",
                                     f"W8A8_SWEEP_CONFIGS=1 build; {_MM} --backends sm90 --m 385,448,512,640,768,1024,"
                                     "1536,2048 --configs 128x256x128_2x1_coop_streamk,128x256x128_2x1_coop_streamk_forced,"
                                     "128x128x128_1x1_coop_streamk_forced --tag streamk2_h100"),
    "scaled_mm_steps_h100.json": ("M = 65..256 around the 64 / 128 tile edges: five tiles named beside the ladder, "
                                  "the Llama-3-8B shapes", f"{_MM} --backends sm90 --m 65,72,80,96,112,128,129,136,144,160,"
                                  "192,224,256 --shapes 6144x4096,4096x4096,28672x4096,4096x14336 --configs <those entries> "
                                  "--tag steps_h100"),
    "split_k_serving_h100.json": ("split-K / stream-K of the 128-row tiles at M = 32..128, N = 4096 / 6144",
                                  "python -m w8a8 bench --out benchmarks/results --suites split_k --sweep --m 32,64,128 "
                                  "--shapes 4096x4096,6144x4096,4096x14336 --tag serving_h100"),
    "fused_quant_sweep_h100.json": ("launch shapes of the fused norm / SiLU-and-mul quantizers",
                                    "python benchmarks/bench_fused_quant.py --out benchmarks/results/fused_quant_sweep_h100.json"),
    "generate_h100.json": ("greedy generation, transformers Llama at Llama-3-8B widths, 32 layers: w8a8.Generator "
                           "(CUDA graphs) with and without its kernels, bf16 vs W8A8",
                           "python -m w8a8 bench --out benchmarks/results --suites generate --recipes graph,graph-plain"),
    "generate_h100_eager.json": ("the same models through transformers' eager generate",
                                 "python -m w8a8 bench --out benchmarks/results --suites generate --recipes eager "
                                 "--tag h100_eager"),
    "decode_attention_h100.json": ("decode attention over a static KV cache: the split-KV kernel's launch settings "
                                   "against SDPA", "python benchmarks/bench_decode_attention.py --out "
                                   "benchmarks/results/decode_attention_h100.json"),
    "tp_mlp_h200x2.json": ("tensor-parallel MLP block, 2 GPUs", "NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 "
                           "python -m w8a8.bench.tp --out benchmarks/results --tag h200x2"),
}

GRID_M = (1, 16, 64, 128, 512, 2048, 8192)
PEERS = {"w8a8 sm90": "sm90", "w8a8 triton": "triton", "torch._int_mm (int32 out, no dequant)": "`_int_mm` (int32 out)",
         "torch._int_mm + dequant (eager)": "`_int_mm` + dequant, eager",
         "torch._int_mm + dequant (compiled)": "`_int_mm` + dequant, compiled"}


@functools.lru_cache(maxsize=None)
def load(name: str) -> dict:
    """A results file, each row's ``impl`` under today's kernel names (older files say cutlass / cutlass_sm80)."""
    doc = json.loads((RESULTS / name).read_text())
    for r in doc["rows"]:
        name_ = r.get("impl") or r.get("op")
        r["impl"] = re.sub(r"\bcutlass\b", "sm90", re.sub(r"\bcutlass_sm80\b", "sm80", name_))
    return doc


def geomean(values) -> float:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _f(v) -> str:
    return "-" if v is None or v != v else f"{v:.2f}"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def _h(title: str) -> list[str]:
    return ["", f"## {title}", ""]


def _index(rows: list[dict]) -> dict:
    return {(r["impl"], r["M"], r["N"], r["K"]): r for r in rows}


def _shapes(rows: list[dict]) -> list[tuple[int, int]]:
    return list(dict.fromkeys((r["N"], r["K"]) for r in rows))


def _x(rows: list[dict], impl: str, **where) -> float:
    """Geomean x bf16 of ``impl``'s rows matching ``where`` (m_min: M at least this)."""
    m_min, shape = where.get("m_min", 0), where.get("shape")
    return geomean(r["x_bf16"] for r in rows if r["impl"] == impl and r["M"] >= m_min and shape in (None, (r["N"], r["K"]))
                   and where.get("m", r["M"]) == r["M"])


def kernel_rows() -> list[dict]:
    """The kernel grid (one run: every GEMM at every point)."""
    return load("scaled_mm_h100.json")["rows"]


def m_table(rows: list[dict], impl: str, extra: str | None = None) -> list[str]:
    """x bf16 of ``impl``, one row per shape, one column per M, geomeans in the margins."""
    idx = _index(rows)
    head = ["N x K"] + [f"M={m}" for m in GRID_M] + ["geomean"] + ([f"{extra.split()[-1]} geomean"] if extra else [])
    body = []
    for shape in _shapes(rows) + [None]:
        cells = [idx.get((impl, m) + shape, {}).get("x_bf16") if shape else _x(rows, impl, m=m) for m in GRID_M]
        body.append([f"{shape[0]} x {shape[1]}" if shape else "**all**"] + [_f(c) for c in cells] +
                    [_f(_x(rows, impl, shape=shape))] + ([_f(_x(rows, extra, shape=shape))] if extra else []))
    return _table(head, body)


def peer_table(rows: list[dict]) -> list[str]:
    """Per-shape geomean of x bf16 over M >= 64, where every peer runs (`_int_mm` refuses M <= 16)."""
    body = [[f"{s[0]} x {s[1]}" if s else "**all**"] + [_f(_x(rows, i, shape=s, m_min=64)) for i in PEERS]
            for s in _shapes(rows) + [None]]
    return _table(["N x K"] + list(PEERS.values()), body)


def decode_table() -> list[str]:
    """x bf16 of the sm90 op at decode sizes: the GEMV (M <= 4), the skinny GEMM or the 64x32 tile (M = 5..16)."""
    rows = _index(load("scaled_mm_decode_h100.json")["rows"])
    body = []
    for n, k in _shapes(load("scaled_mm_decode_h100.json")["rows"]):
        one = rows[("w8a8 sm90", 1, n, k)]
        cells = [rows.get(("w8a8 sm90", m, n, k)) for m in (1, 2, 4, 5, 8, 16)]
        body.append([f"{n} x {k}", f"{one['us']:.1f}", f"{one['gbps'] / 1e3:.2f}"] + [_f(c and c["x_bf16"]) for c in cells])
    return _table(["N x K", "M=1 us", "M=1 TB/s", "M=1", "M=2", "M=4", "M=5", "M=8", "M=16"], body)


def serving_table() -> list[str]:
    """Kernel and end-to-end x bf16 with % of the HBM read rate at M = 16..256, one row per shape."""
    kern = _index(load("scaled_mm_serving_h100.json")["rows"])
    lin = _index(load("linear_serving_h100.json")["rows"])
    body = []
    for n, k in _shapes(load("scaled_mm_serving_h100.json")["rows"]):
        cells = []
        for m in SERVING_M:
            kr, lr = kern[("w8a8 sm90", m, n, k)], lin[("W8A8Linear sm90", m, n, k)]
            cells.append(f"{kr['x_bf16']:.2f} ({kr['pct_of_bound']:.0f}%) / {lr['x_bf16']:.2f}")
        body.append([f"{n} x {k}", f"{n * k / 1e6:.0f}"] + cells)
    return _table(["N x K", "MB int8"] + [f"M={m}" for m in SERVING_M], body)


def continuity_lines() -> list[str]:
    """The largest time steps from M-1 to M (M = 2..256) per shape, and where they are: on
    exact-size codes, and on the quantizers' layout (row-padded where the rule pads)."""
    rows = load("scaled_mm_continuity_h100.json")["rows"]
    out = []
    for n, k in _shapes(rows):
        at = {(r["impl"], r["M"]): r["us"] for r in rows if (r["N"], r["K"]) == (n, k)}
        exact = {m: u for (impl, m), u in at.items() if impl == "w8a8 sm90"}
        layout = {m: at.get((_LAYOUT, m), u) for m, u in exact.items()}

        def worst(us):
            steps = sorted(((us[m] / us[m - 1], m) for m in range(2, max(us) + 1)), reverse=True)
            return ", ".join(f"{x:.2f} at M = {m}" for x, m in steps[:3])
        out.append(f"- {n} x {k}: {exact[1]:.1f} us at M = 1, {exact[max(exact)]:.1f} at M = {max(exact)}; "
                   f"largest steps on exact-size codes {worst(exact)}; on the quantizers' layout {worst(layout)}.")
    return out


def rows_table() -> list[str]:
    """Around the tile edges: the sm90 kernel on exact-size codes against the quantizers'
    row-padded layout, and W8A8Linear end to end, us (one run)."""
    kern = load("scaled_mm_rows_h100.json")["rows"]
    lin = load("linear_rows_h100.json")["rows"]
    us = {(r["impl"], r["N"], r["K"], r["M"]): r["us"] for r in kern + lin}
    ms = (64, 65, 80, 128, 129, 130, 160, 192, 193, 256)
    body = []
    for n, k in _shapes(kern):
        exact = [us[("w8a8 sm90", n, k, m)] for m in ms]
        padded = [us.get((_LAYOUT, n, k, m), e) for m, e in zip(ms, exact)]
        body += [[f"{n} x {k}", "kernel, exact-size codes"] + [f"{u:.1f}" for u in exact],
                 ["", "kernel, quantizer layout"] + [f"{u:.1f}" for u in padded],
                 ["", "`W8A8Linear`"] + [f"{us[('W8A8Linear sm90', n, k, m)]:.1f}" for m in ms]]
    return _table(["N x K", "codes"] + [f"M={m}" for m in ms], body)


def stream_table() -> list[str]:
    """Per shape: the fastest read of the int8 weights in each launch mode (% of the HBM read
    rate), then at M = 16 / 64 / 128 the sm90 kernel's x bf16 beside the fastest read's."""
    from w8a8.bench.stream import LAUNCH_MODES, M_POINTS

    rows = load("stream_h100.json")["rows"]
    body = []
    for n, k in _shapes([r for r in rows if r["M"]]):
        reads = [r for r in rows if (r["N"], r["K"]) == (n, k) and r["impl"].startswith("read ")]
        cells = [f"{min((r for r in reads if r['impl'].endswith(mode)), key=lambda r: r['us'])['pct_hbm']:.0f}"
                 for mode in LAUNCH_MODES.values()]
        at = {(r["impl"], r["M"]): r for r in rows if (r["N"], r["K"]) == (n, k) and r["M"]}
        cells += [f"{at[('w8a8 sm90', m)]['x_bf16']:.2f} / {at[('ceiling', m)]['x_bf16']:.2f}" for m in M_POINTS]
        body.append([f"{n} x {k}", f"{n * k / 1e6:.0f}"] + cells)
    return _table(["N x K", "MB int8"] + [f"read, {mode} (%)" for mode in LAUNCH_MODES.values()] +
                  [f"M={m}: sm90 / read" for m in M_POINTS], body)


def quant_table() -> list[str]:
    rows = load("quant_h100.json")["rows"]
    idx = {(r["impl"].split()[-1], r["M"], r["K"]): r for r in rows}
    ms = sorted({r["M"] for r in rows})
    body = [[role, str(k)] + [f"{idx[(kernel, m, k)]['us']:.1f}" + (f" ({idx[(kernel, m, k)]['pct_hbm']:.0f}%)" if m >= 2048 else "")
                              for m in ms]
            for kernel, role in (("cuda", "CUDA (the default on Hopper)"), ("triton", "Triton (the default elsewhere)"))
            for k in sorted({r["K"] for r in rows})]
    return _table(["kernel", "K"] + [f"M={m}" for m in ms], body)


def decode_step_tables() -> list[str]:
    rows = load("decode_h100.json")["rows"]
    host = {r["impl"]: r for r in rows if r["what"] == "host time per call"}
    labels = {"bf16 nn.Linear": "bf16 `nn.Linear`", "W8A8Linear": "`W8A8Linear` (one C++ call on sm90)",
              "op linear_sm90": "that C++ op alone", "op quantize_per_token_cuda": "CUDA quantizer op alone",
              "op scaled_mm_sm90": "sm90 GEMM op alone"}
    steps = {(r["impl"], r["pattern"]): r for r in rows if r["what"].startswith("decode step")}
    step_rows = [[p, f"{steps[('bf16', p)]['ms']:.3f}", f"{steps[('w8a8', p)]['ms']:.3f}", f"{steps[('w8a8', p)]['x_bf16']:.2f}"]
                 for p in dict.fromkeys(p for _, p in steps)]
    return (_table(["decode step, batch 1", "bf16 ms", "W8A8 ms", "x bf16"], step_rows) + [""] +
            _table(["host time per call, M = 1, 4096 x 4096", "us", "x `nn.Linear`"],
                   [[label, f"{host[i]['us']:.1f}", f"{host[i]['x_bf16_host']:.2f}"] for i, label in labels.items()]))


def sm80_table() -> list[str]:
    """The sm80 ladder forced on the H100: x bf16 at a few M, and its worst step from M-1 to M."""
    rows = load("sm80_h100.json")["rows"]
    idx, ms, body = _index(rows), (1, 16, 64, 128, 256, 512), []
    for n, k in _shapes([r for r in rows if r["impl"] == "sm80"]):
        worst = min((r for r in rows if r["impl"] == "sm80" and (r["N"], r["K"]) == (n, k) and r.get("x_prev")),
                    key=lambda r: r["x_prev"])
        body.append([f"{n} x {k}"] + [_f(idx[("sm80", m, n, k)]["x_bf16"]) for m in ms] +
                    [f"{1 / worst['x_prev']:.2f} (M={worst['M']})"])
    return _table(["N x K"] + [f"M={m}" for m in ms] + ["worst t(M) / t(M-1), M = 2..512"], body)


def tp_table() -> list[str]:
    body = [[r["impl"].replace(" TP=2", ""), str(r["M"]), f"{r['us']:.1f}", f"{r['x_bf16']:.2f}",
             f"{r['weight_gbps_per_gpu'] / 1e3:.2f}", f"{r['tops_per_gpu']:.0f}"] for r in load("tp_mlp_h200x2.json")["rows"]]
    return _table(["MLP block, TP = 2", "M", "us", "x bf16", "weight TB/s per GPU", "TOP/s per GPU"], body)


def model_table(mode: str) -> list[str]:
    """The model suite: GPU time per forward (profiler kernel sums), x bf16 and the fraction of the bound."""
    rows = load("model_h100.json")["rows"]
    at = {(r["impl"], r["mode"], r["M"]): r for r in rows}
    out = []
    for m in sorted({r["M"] for r in rows}):
        b, q, u = at["bf16", mode, m], at["w8a8", mode, m], at["w8a8-unfused", mode, m]
        out.append([str(m), f"{b['us'] / 1e3:.3f}", f"{q['us'] / 1e3:.3f}", f"{q['x_bf16']:.2f}", f"{q['bound_x']:.2f}",
                    f"{q['pct_of_bound']:.1f}%", f"{q['quant_launches']} + {q['fused_quant_launches']} fused",
                    f"{u['x_bf16']:.2f} ({u['pct_of_bound']:.0f}%)"])
    return _table(["tokens", "bf16 ms", "w8a8 ms", "x bf16", "bound x", "% of bound", "quantizers",
                   "unfused x bf16 (% of bound)"], out)


def generate_table() -> list[str]:
    """The generation suite: prefill and decode per recipe, bf16 and W8A8 side by side."""
    rows = load("generate_h100.json")["rows"] + load("generate_h100_eager.json")["rows"]
    at = {(r["recipe"], r["impl"], r["prompt"], r["batch"]): r for r in rows}
    out = []
    for (recipe, _, prompt, batch), w in at.items():
        b = at.get((recipe, "bf16", prompt, batch))
        if w["impl"] != "w8a8" or b is None or "decode_ms" not in w:
            continue
        out.append([recipe, str(prompt), str(batch), f"{b['prefill_ms']:.1f} / {w['prefill_ms']:.1f}",
                    f"{w['x_bf16_prefill']:.2f}", f"{b['decode_ms']:.2f} / {w['decode_ms']:.2f}",
                    f"{b['tokens_per_s']:.0f} / {w['tokens_per_s']:.0f}", f"**{w['x_bf16_decode']:.2f}**",
                    _f(w.get("decode_over_kernels"))])
    return _table(["recipe", "prompt", "batch", "prefill ms (bf16 / w8a8)", "prefill x bf16",
                   "decode ms/token (bf16 / w8a8)", "tokens/s (bf16 / w8a8)", "decode x bf16",
                   "w8a8 decode / kernel sum"], out)


def model_summary(mode: str) -> str:
    """The model suite in one line: the ranges of x bf16 and of the fraction of the bound."""
    rows = load("model_h100.json")["rows"]
    x = {impl: [r["x_bf16"] for r in rows if r["impl"] == impl and r["mode"] == mode] for impl in ("w8a8", "w8a8-unfused")}
    pct = [r["pct_of_bound"] for r in rows if r["impl"] == "w8a8" and r["mode"] == mode]
    return (f"- transformers Llama at Llama-3-8B widths (4 layers), {mode}: {min(x['w8a8']):.2f}-{max(x['w8a8']):.2f}x "
            f"bf16 per forward over 1..8192 tokens, {min(pct):.1f}-{max(pct):.1f}% of the 2x-projection bound "
            f"(unfused: {min(x['w8a8-unfused']):.2f}-{max(x['w8a8-unfused']):.2f}x).")


def bf16_spread() -> tuple[float, float]:
    """Median and largest relative spread of bf16 `F.linear` at one point timed in several H100 files."""
    times = {}
    for name in (n for n in SOURCES if n.endswith("_h100.json")):
        for r in load(name)["rows"]:
            if r["impl"] == "bf16 F.linear" and "what" not in r:
                times.setdefault((r["M"], r["N"], r["K"]), []).append(r["us"])
    spreads = sorted(max(t) / min(t) - 1 for t in times.values() if len(t) > 1)
    return spreads[len(spreads) // 2], spreads[-1]


def render_markdown(plots: bool = True) -> str:
    """docs/PERFORMANCE.md from the committed results (a test checks the two agree)."""
    kern, lin = kernel_rows(), load("linear_h100.json")["rows"]
    env, ceil = load("scaled_mm_h100.json")["environment"], load("scaled_mm_h100.json")["ceilings"]
    sq = _index(kern)[("w8a8 sm90", 8192, 8192, 8192)]
    sm80 = load("scaled_mm_sm80_h100.json")["rows"]
    sq80 = {i: _index(sm80)[(i, 8192, 8192, 8192)] for i in ("w8a8 sm80", "w8a8 sm90")}
    graph = next(r for r in load("decode_h100.json")["rows"] if r.get("pattern") == "manual CUDA graph" and r["impl"] == "w8a8")
    tp = {r["M"]: r["x_bf16"] for r in load("tp_mlp_h200x2.json")["rows"] if r["impl"].endswith("dequantized")}
    med, top = bf16_spread()
    lin_min = min(r["x_bf16"] for r in lin if r["impl"] == "W8A8Linear sm90")
    files = [[f"`{n}`", what, f"{load(n)['environment']['device']}, {load(n)['environment']['date'][:10]}", f"`{cmd}`"]
             for n, (what, cmd) in SOURCES.items()]
    return "\n".join([
        "# Performance",
        "",
        "Generated by `python -m w8a8.bench.report` from `benchmarks/results/` (files and commands at the end); "
        "do not edit by hand.",
        *_h("Method"),
        f"- Device: {env['device']} ({env['capability']}, {env['sm_count']} SMs, power-capped at 700 W), torch {env['torch']}, "
        f"CUDA {env['cuda']}, Triton {env['triton']}; tensor parallel on 2x H200.",
        "- Each point is the median of 20 CUDA-graph replays divided by the calls per replay. A graph holds passes over "
        "the weight sets, which rotate so that one pass reads more than 3x the 50 MB L2: weights come from HBM, as in "
        "a model. Random data (never zeros), one warm-up outside timing. The implementations of one point are captured "
        "together and their replays interleaved, each behind a GPU sleep that covers the host's launch (the grid, "
        "serving, continuity, rows, single-op, cluster, cluster256, rung384, skinny16, stream-K and read-ceiling files; the "
        "others, older, timed them one after the other, where the first timed after the operands were made ran up to 18% slow on the largest shapes).",
        "- Calls per replay: the grid, serving, continuity, rows, single-op, skinny16, cluster256, stream-K and read-ceiling "
        "files repeat the pass until a graph holds 20 calls or "
        "lasts 250 us (a replay costs about 2.5 us beyond its kernels, which one pass of 2-6 calls had charged to each "
        "call: 0.4-1.3 us, 1-3.5% of the ratio to bf16 at M = 16..128); the other files hold one pass.",
        "- Launches: every kernel of the sm90 path starts while the one before it finishes (programmatic dependent "
        "launch, [KERNELS.md](KERNELS.md)), so back-to-back calls overlap launch and start-up. The grid, serving, "
        "continuity, rows, single-op, cluster256, stream-K, read-ceiling, quantizer, decode and model files were measured so; the others before it, when only the decode "
        "kernels and `W8A8Linear`'s GEMM launched that way (3.2% more time for `scaled_mm` over the serving grid).",
        "- `x bf16` is bf16 `F.linear`'s time over ours, same shape, same run (above 1: faster). Kernel rows take int8 "
        "activations and write bf16 (per-token x per-channel scales, no bias); `W8A8Linear` rows take bf16 and include "
        "the per-token quantization. sm90 is the Hopper table: CUTLASS tiles, GEMV, skinny GEMM ([KERNELS.md](KERNELS.md)).",
        f"- Ceilings of the grid run: HBM read {ceil['hbm_read_bytes_per_s'] / 1e12:.2f} TB/s, bf16 GEMM "
        f"{ceil['bf16_flops'] / 1e12:.0f} TFLOP/s, cuBLAS int8 {ceil['int8_cublas_ops'] / 1e12:.0f} TOP/s (8192^3).",
        f"- Noise: bf16 `F.linear` at one point, timed in several of these files, differs by {100 * med:.1f}% "
        f"(median) and up to {100 * top:.0f}%: compare ratios, not microseconds, across files.",
        *_h("Summary"),
        f"- 8192 x 8192 x 8192: sm90 {sq['tops']:.0f} TOP/s ({sq['x_bf16']:.2f}x bf16).",
        f"- Kernel geomean over the grid: sm90 {_x(kern, 'w8a8 sm90'):.2f}x bf16, Triton {_x(kern, 'w8a8 triton'):.2f}x.",
        f"- `W8A8Linear` end to end: sm90 {_x(lin, 'W8A8Linear sm90'):.2f}x bf16 (min {lin_min:.2f}), "
        f"Triton {_x(lin, 'W8A8Linear triton'):.2f}x.",
        model_summary("eager"),
        model_summary("compile"),
        f"- Decode step (4 blocks, batch 1, CUDA graph): {graph['x_bf16']:.2f}x bf16. Tensor-parallel MLP block "
        f"(2x H200): {tp[1]:.2f}x at M = 1, {tp[2048]:.2f}x at M = 2048.",
        *_h("Model: transformers Llama at Llama-3-8B widths"),
        "`LlamaForCausalLM` (hidden 4096, ffn 14336, 32 heads, 8 KV heads, vocab 128256), 4 decoder layers, random "
        "weights, lm_head kept bf16, batch 1, no cache; `quantize_model` as a user calls it (fused: shared and "
        "producer-fused quantization, merged q/k/v and gate/up) beside `fuse=False` (unfused). GPU time per forward: "
        "the sum of the kernel times `torch.profiler` records (median of 5 forwards). The bound: every quantized "
        "projection at exactly 2x its bf16 GEMM time, nothing else changed (from the bf16 run's own profile). "
        "Compiled: `torch.compile(model)` with w8a8's graph pass. Quantizers: standalone launches per forward "
        "(one per o_proj) + fused ones (norms, SiLU-and-mul).",
        "",
        "Eager:",
        "",
        *model_table("eager"),
        "",
        "Compiled:",
        "",
        *model_table("compile"),
        *(["", "![model speed-ups](model_h100.png)"] if plots else []),
        *_h("Generation: greedy `generate`, transformers Llama at Llama-3-8B widths"),
        "`LlamaForCausalLM` as above with 32 decoder layers (Llama-3-8B's depth), random weights, lm_head bf16; "
        "random prompts, 128 greedy tokens. `graph`: `w8a8.Generator(model, prefill_graphs=True)` "
        "(docs/INFERENCE.md, Generation), the same for both models: prefill is the prompt's forward (a CUDA graph "
        "up to 4096 tokens, eager above), median of 3; decode is the wall time per token of 127 graph replays, "
        "median of 3; the kernel sum is one eager step's CUDA kernel times (profiler). `graph-plain`: the same "
        "with `kernels=False` (transformers' rotary embedding and cache write, SDPA attention); its batch-64 / "
        "2048-token point is missing (the run's time cap). `eager`: transformers' `model.generate` as it runs "
        "by default (dynamic cache, no graphs), 16 tokens timed (a separate run).",
        "",
        *generate_table(),
        *(["", "![generation speed-ups](generate_h100.png)"] if plots else []),
        *_h("Kernel: `scaled_mm`, int8 activations in (x bf16)"),
        *m_table(kern, "w8a8 sm90"),
        "",
        "Every GEMM, geomean over M = 64..8192 (`torch._int_mm` refuses M <= 16 and does not dequantize; "
        "'+ dequant' adds the fp32 scaling in eager PyTorch or under `torch.compile`):",
        "",
        *peer_table(kern),
        *(["", "![kernel speed-ups](speedup_scaled_mm_h100.png)", "",
           "![fraction of the binding ceiling](roofline_scaled_mm_h100.png)"] if plots else []),
        *_h("End to end: `W8A8Linear` (bf16 in, dynamic per-token quantization, bf16 out; x bf16)"),
        *m_table(lin, "W8A8Linear sm90", extra="W8A8Linear triton"),
        *(["", "![end-to-end speed-ups](speedup_linear_h100.png)"] if plots else []),
        *_h("Serving regime: M = 16..256 (sm90; kernel x bf16 (% of the HBM read rate) / `W8A8Linear` end to end x bf16)"),
        "One run of every GEMM at these M (the `scaled_mm` and `linear` suites). The % is the kernel's bytes (int8 "
        "weights and activations, bf16 out) over its time, against the run's measured HBM read rate.",
        "",
        *serving_table(),
        "",
        "Continuity (sm90 kernel, each M of 1..256, one timing per M; isolated spikes of one M are timing noise, "
        "steps that persist over the following M are the ladder's; `scaled_mm_continuity_h100.json`):",
        "",
        *continuity_lines(),
        "",
        "The steps on exact-size codes at M = 65, 129 and 193 are the ladder's tiles running a partly filled token "
        "tile (the TMA loads of the rows past M cost more than real rows). The package's quantizers return codes "
        "and scales in storage padded to the tile edge (M = 33..47 to 48 rows, 65..96 to 96, 97..128 to 128, 129..192 to "
        "192, 193..256 to 256), "
        "and the sm90 GEMM runs on those rows (`w8a8/rows.py`). Around the edges, us (one run; "
        "`scaled_mm_rows_h100.json`, `linear_rows_h100.json`):",
        "",
        *rows_table(),
        "",
        "The read ceiling (`stream_h100.json`, `python benchmarks/bench_stream.py`): the fastest of seven shapes of a "
        "kernel that only reads the layer's int8 weights (16-byte loads, timed like the GEMMs), launched in stream "
        "order, as a programmatic dependent whose reads wait for the kernel before it, and as one whose reads wait "
        "for nothing (as weights may, where nothing before writes them); % of the run's HBM read rate (torch's "
        "2 GiB reduction, which the read kernel passes on the large shapes). Then x bf16 of the sm90 kernel and of "
        "the fastest read (the most any kernel that reads the weights can show):",
        "",
        *stream_table(),
        *_h("Decode sizes (sm90; x bf16; the dp4a GEMV at M <= 4; at M = 5..16 the skinny GEMM on 28672 x 4096 "
            "(more 64-row weight tiles than SMs, K < 8192), the 64x32 tile elsewhere)"),
        *decode_table(),
        *_h("Activation quantization (per token, bf16 in; us, % of the measured HBM read rate)"),
        *quant_table(),
        *_h("Decode step and host overhead"),
        "Four blocks at Llama-3-8B widths (hidden 4096, ffn 14336; ~1.9 GB of bf16 weights), batch 1. Host time: the "
        "wall time of issuing one call, queued behind a GPU sleep so that only the host is timed.",
        "",
        *decode_step_tables(),
        *_h("sm80 kernels, forced on the H100 (x bf16; not Ampere / Ada figures)"),
        f"At 8192^3: sm80 {sq80['w8a8 sm80']['tops']:.0f} TOP/s ({sq80['w8a8 sm80']['x_bf16']:.2f}x bf16), sm90 "
        f"{sq80['w8a8 sm90']['tops']:.0f} in the same run; geomean over that run's grid: sm80 {_x(sm80, 'w8a8 sm80'):.2f}x "
        "bf16. The ladder over M = 1..512, median of 3 passes per M:",
        "",
        *sm80_table(),
        *_h("Tensor parallel (2x H200; Llama-3-70B MLP: gate_up column-, down row-parallel)"),
        "A CUDA graph of 4 blocks per replay, median of 30 replays, rank 0's clock; `reduce=int32` is the exact default.",
        "",
        *tp_table(),
        *_h("Sources"),
        "Each file is written by its command on the GPU machine (`pip install --no-build-isolation -e .` first); "
        "`<those>`: the table entries the file names.",
        "",
        *_table(["file", "holds", "device, date", "command"], files),
        "",
    ])


def _plots() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kern, lin = kernel_rows(), load("linear_h100.json")["rows"]
    for rows, impls, name in ((kern, list(PEERS)[:3], "speedup_scaled_mm_h100.png"),
                              (lin, ["W8A8Linear sm90", "W8A8Linear triton"], "speedup_linear_h100.png")):
        fig, axes = plt.subplots(2, 4, figsize=(16, 7), sharey=True)
        for ax, (n, k) in zip(axes.flat, _shapes(rows)):
            for impl in impls:
                pts = sorted((r["M"], r["x_bf16"]) for r in rows if r["impl"] == impl and (r["N"], r["K"]) == (n, k))
                ax.plot(*zip(*pts), marker="o", label=impl)
            ax.axhline(1.0, color="gray", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set(title=f"N={n}, K={k}", xlabel="M (tokens)")
        axes[0][0].set(ylabel="speed-up over bf16 F.linear, H100")
        axes[0][0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(DOCS / name, dpi=80)
    model = load("model_h100.json")["rows"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for impl, mode, style in (("w8a8", "eager", "o-"), ("w8a8", "compile", "s-"),
                              ("w8a8-unfused", "eager", "o:"), ("w8a8-unfused", "compile", "s:")):
        pts = sorted((r["M"], r["pct_of_bound"]) for r in model if r["impl"] == impl and r["mode"] == mode)
        ax.plot(*zip(*pts), style, label=f"{impl}, {mode}")
    ax.axhline(100, color="gray", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="tokens per forward", ylabel="% of the 2x-projection bound",
           title="transformers Llama, Llama-3-8B widths, 4 layers, H100")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(DOCS / "model_h100.png", dpi=80)
    gen = [r for r in load("generate_h100.json")["rows"] if r["recipe"] == "graph" and r["impl"] == "w8a8"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for prompt, style in ((128, "o-"), (2048, "s-")):
        for key, label in (("x_bf16_decode", "decode"), ("x_bf16_prefill", "prefill")):
            pts = sorted((r["batch"], r[key]) for r in gen if r["prompt"] == prompt)
            ax.plot(*zip(*pts), style if key == "x_bf16_decode" else style[0] + ":", label=f"{label}, prompt {prompt}")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="batch", ylabel="W8A8 x bf16", title="greedy generation, w8a8.Generator, Llama-3-8B widths, 32 layers, H100")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(DOCS / "generate_h100.png", dpi=80)
    fig, ax = plt.subplots(figsize=(8, 5))
    for impl in PEERS:
        ax.scatter(*zip(*[(r["M"], r["pct_of_bound"]) for r in kern if r["impl"] == impl]), label=impl, s=14)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="M (tokens)", ylabel="% of the binding ceiling (int8 ops at 1450 TOP/s, or HBM read)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(DOCS / "roofline_scaled_mm_h100.png", dpi=80)


def main() -> int:
    (DOCS / "PERFORMANCE.md").write_text(render_markdown())
    try:
        _plots()
    except ImportError:
        print("matplotlib is not installed: the plots were not redrawn", file=sys.stderr)
    print(f"wrote {DOCS / 'PERFORMANCE.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
