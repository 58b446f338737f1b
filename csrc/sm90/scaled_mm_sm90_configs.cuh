// Tile configs of the sm90 int8 scaled matmul, the config ids and the
// heuristics that pick them (the M ladder, the decode kernels' policies, the
// split / stream-K request path).
//
// A config is a compile-time struct (one CUTLASS instantiation per config and
// output dtype, explicitly instantiated in instances/<config>.cu). An entry of
// the config table (scaled_mm_sm90.cu) pairs a config with run-time
// tile-scheduler options (swizzle, raster order, stream-K decomposition), so
// scheduler variants cost no extra compilation. Struct names: Sm90 [SwapAB]
// <kernel schedule> [StreamK scheduler] <tile M x N x K>_<cluster M x N>.
//
// Figures below were measured on the H100 (SXM, 132 SMs) with random int8
// data and bf16 out; TOP/s figures name the shape as M x N x K.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cute/layout.hpp>
#include <cutlass/bfloat16.h>
#include <cutlass/epilogue/dispatch_policy.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>
#include <cutlass/half.h>

#include "sm90/scaled_mm_sm90.h"

namespace w8a8::sm90 {

using cute::Shape;
using cute::_1;
using cute::_2;
using cute::_16;
using cute::_32;
using cute::_64;
using cute::_128;
using cute::_256;

// ---------------------------------------------------------------------------
// Configs. Fields: TileShape (CTA tile M x N x K of the GEMM as CUTLASS sees
// it, i.e. after the swap for kSwapAB), ClusterShape, KernelSchedule,
// EpilogueSchedule, TileScheduler, kSwapAB.
//
// Swap-AB (few tokens): out^T = b @ a^T is computed instead, so the weight
// rows fill the 128-row wgmma M side and the few tokens sit on the wgmma N
// side (16..64 wide) instead of being padded to a 64-row tile. At these M the
// GEMM streams the weights (memory-bound), so the tiles are cooperative (two
// consumer warpgroups, 128 weight rows) on the stream-K scheduler, which can
// also run them data-parallel or split K over idle SMs when asked.
// ---------------------------------------------------------------------------

// Optional field: kPrefetchKTiles, the weight tiles (K blocks) each CTA of a plain
// scaled_mm prefetches into L2 before it waits for the kernel ahead
// (scaled_mm_sm90_mainloop.cuh); 2 where a config does not set it.
template <class Config, class = void>
struct PrefetchKTiles : std::integral_constant<int, 2> {};
template <class Config>
struct PrefetchKTiles<Config, std::void_t<decltype(Config::kPrefetchKTiles)>>
    : std::integral_constant<int, Config::kPrefetchKTiles> {};

// Optional field: kStages, the pipeline stages of a config sized for two CTAs per SM
// (TwoPerSm below); where a config does not set it (0), CUTLASS fills the shared memory
// its epilogue leaves with stages, one CTA per SM.
template <class Config, class = void>
struct PipelineStages : std::integral_constant<int, 0> {};
template <class Config>
struct PipelineStages<Config, std::void_t<decltype(Config::kStages)>>
    : std::integral_constant<int, Config::kStages> {};

// Two CTAs per SM: the shared memory a CTA may take so that two fit in the H100's 228 KiB
// (1 KiB of each CTA's is the system's). The one-consumer-warpgroup tiles use 48-128
// registers a thread (256 threads), so shared memory is what keeps a second CTA out: of
// the kernel behind on the stream, which can then start (prologue, L2 prefetch) while this
// one drains, or of a second tile of the same grid.
struct TwoPerSm {
  static constexpr int kSmemPerSm = 228 * 1024;
  static constexpr int kSmemPerCta = kSmemPerSm / 2 - 1024;
};

// Tiles of `rows` weight rows (output channels) that cover N: the CTAs per token tile of a
// swap-AB tile, the unit the policies below count against the SMs.
constexpr int64_t weight_tiles(int64_t n, int64_t rows) { return (n + rows - 1) / rows; }

// The K blocks of weights each CTA loads before its wait when the kernel ahead is
// w8a8::linear's quantizer (ScaledMmSm90Params::weights_ready; scaled_mm_sm90_mainloop.cuh).
// Every stage of the pipeline, as this path first loaded, overfills the quantizer's
// window where K is short: the first wave's weight loads pass what HBM delivers while the
// quantizer runs, the quantizer's reads and the activation loads after the wait queue
// behind them, and the single op ran slower than quantize + scaled_mm launched apart
// (4096 x 4096 at M = 96: 11.8 against 11.1 us). So the stages are capped by a byte
// budget that grows with the quantizer's time, which grows with K (a row per warp or
// block: 2.0 us at K = 4096, 3.7 at 14336, 5.3 at 28672, quant_serving_h100.json):
// 2 MiB + 384 bytes per element of K, over the distinct weight bytes one stage of the
// first wave loads (CTAs on the same weight tile share them). H100, W8A8Linear as the
// single op against 2, 3, 4, 6 and every stage forced (one build, interleaved graph
// replays; 8 shapes at M = 16..256, then 7 shapes at 16..128): never more than 1.7%
// behind the best of them, 0.7% less time than every stage over the 64-point serving
// grid, up to 9% less at M = 64..128 on K = 4096 (4096 x 4096 at 96: 10.7 against 11.8
// us, at 128 10.5 against 11.1; 6144 x 4096 at 64 13.0 against 13.8); K = 14336 and
// 28672 keep (nearly) every stage, which is fastest there.
struct WeightsFirstPolicy {
  static constexpr int64_t kBaseBytes = int64_t(2) << 20;
  static constexpr int64_t kBytesPerK = 384;
  // m: the GEMM's token rows (as padded); weight_rows / token_cols / tile_k: the tile's
  // extent over the weights, the tokens and K; stages: the pipeline's. At least 1; one CTA
  // per SM (the configs take most of its shared memory).
  static constexpr int stages(int64_t m, int64_t n, int64_t k, int sm_count, int64_t weight_rows,
                              int64_t token_cols, int64_t tile_k, int stages) {
    const int64_t token_tiles = (m + token_cols - 1) / token_cols;
    const int64_t tiles = weight_tiles(n, weight_rows) * token_tiles;
    const int64_t resident = tiles < sm_count ? tiles : sm_count;
    // The weight tiles the first wave covers (at most all of them, as resident <= tiles).
    const int64_t distinct = (resident + token_tiles - 1) / token_tiles;
    const int64_t budget = kBaseBytes + kBytesPerK * k;
    const int64_t fit = budget / (distinct * weight_rows * tile_k);
    return fit < 1 ? 1 : fit > stages ? stages : static_cast<int>(fit);
  }
};
// The picks quoted above (132 SMs; 7 / 5 stages on the 48-token pair / the 64x96 tile).
static_assert(WeightsFirstPolicy::stages(96, 4096, 4096, 132, 64, 48, 256, 7) == 3, "4096 x 4096, M = 96");
static_assert(WeightsFirstPolicy::stages(96, 6144, 4096, 132, 64, 96, 256, 5) == 2, "6144 x 4096, M = 96");
static_assert(WeightsFirstPolicy::stages(96, 10240, 8192, 132, 64, 96, 256, 5) == 2, "10240 x 8192, M = 96");
static_assert(WeightsFirstPolicy::stages(96, 4096, 14336, 132, 64, 48, 256, 7) == 7, "4096 x 14336, M = 96");

// Split / stream-K requests at M <= 64 (CUTLASS's stream-K scheduler needs
// the cooperative kernel, so 128 weight rows per tile). 16 token columns: the
// smallest tile that covers a 16-row batch (wgmma N = 16). Data-parallel it
// was the ladder's tile for M = 17..64 until the non-persistent 64-row tiles
// (sweep-only entry now). smem per stage 16 KiB + 2 KiB.
struct Sm90SwapABCoopStreamK128x16x128_1x1 {
  using TileShape = Shape<_128, _16, _128>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using TileScheduler = cutlass::gemm::StreamKScheduler;
  static constexpr bool kSwapAB = true;
};

// Split / stream-K requests at M in (64, 256]; data-parallel, the ladder's tile for M in
// (192, 256] with N <= 4096 before the 1x2 cluster below (a sweep-only entry now). 64
// token columns, still memory-bound (128x64x128 wgmma per 16 KiB of weights). smem per
// stage 16 KiB + 8 KiB.
struct Sm90SwapABCoopStreamK128x64x128_1x1 {
  using TileShape = Shape<_128, _64, _128>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using TileScheduler = cutlass::gemm::StreamKScheduler;
  static constexpr bool kSwapAB = true;
};

// The ladder's tile for M in (96, 128] (and (64, 96] with N > 128 x SMs): 64-row tiles, 2 M tiles = one 2x1
// cluster, so each weight tile is multicast to both (weights dominate the
// traffic here). Pingpong overlaps one warpgroup's epilogue with the other's
// mainloop. Fastest or within 1% on the 8 shapes of the sweep.
struct Sm90Pingpong64x128x128_2x1 {
  using TileShape = Shape<_64, _128, _128>;
  using ClusterShape = Shape<_2, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = false;
};

// The ladder's tile for M in (384, 512], and for (192, 256] with N > 4096:
// 128x128 pingpong, 2x1 cluster (weights multicast to the 2 M tiles). Not for
// large M: 928 TOP/s at 8192 x 57344 x 8192, where 128x256 cooperative runs 1386.
struct Sm90Pingpong128x128x128_2x1 {
  using TileShape = Shape<_128, _128, _128>;
  using ClusterShape = Shape<_2, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = false;
};

// Not swapped, cooperative, 128 token rows by kN weight columns, a kClusterM x 1 cluster
// (2: the weight tile multicast to two token tiles).
template <int kN, int kClusterM>
struct Sm90Coop128xNx128 {
  using TileShape = Shape<_128, cute::Int<kN>, _128>;
  using ClusterShape = Shape<cute::Int<kClusterM>, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = false;
};
template <int kN>
using Sm90Coop128xNx128_2x1 = Sm90Coop128xNx128<kN, 2>;

// The ladder's tile for M > 512 (compute-bound): 128x256 cooperative, 2x1
// cluster. 1360 / 1386 / 1340 TOP/s at 8192^3 / 8192 x 57344 x 8192 /
// 8192 x 28672 x 4096 with the persistent defaults; 1451 at 8192 x 57344 x 8192
// with swizzle 8, raster along N (the table entry's options).
using Sm90Coop128x256x128_2x1 = Sm90Coop128xNx128_2x1<256>;

// One tile per CTA, 96 or 192 weight columns wide: for M in (192, 256] and
// (384, 512], where the 128x128 tile leaves a wave partly idle (6144 x 4096 at 256: 96
// tiles on 132 SMs) or needs a second (10240 x 8192 at 256: 160). Cooperative, not
// pingpong: with one tile per CTA both consumer warpgroups share it. OneWavePolicy picks
// the width. H100, scaled_mm against the ladder's pingpong 128x128 (one run,
// scaled_mm_onewave_h100.json): 6144 x 4096 at 256 14.0 (96 wide) against 15.1 us; 10240 x 8192
// at 256 38.5 (192 wide) against 50.0, at 193 40.0 against 54.0; 6144 x 4096 at 512 20.2
// (192 wide) against 23.9. In an earlier build, 160-wide tiles (128 CTAs on 10240) ran
// 42.8 there, and a cooperative 128x128 tile tied the pingpong one (not kept).
using Sm90Coop128x96x128_2x1 = Sm90Coop128xNx128_2x1<96>;
using Sm90Coop128x192x128_2x1 = Sm90Coop128xNx128_2x1<192>;

// M in (320, 384] where the swap-AB tiles leave much of their last wave idle (Rung384Policy):
// three 128-token tiles x N / 240 weight columns in a single wave (10240 x 8192: 3 x 43 = 129
// CTAs, against 320 of the 96-token swap-AB tiles, 2.4 waves). No cluster: a 2x1 one would
// round the three token tiles up to four. H100 at 384 rows: 10240 x 8192 47.2 against 57.9 us
// for the 96-token tiles (scaled_mm_rung384_h100.json); W8A8Linear 58.0 us, 1.56x bf16
// (linear_single_op_h100.json), against 65.3, 1.37x, with those tiles.
using Sm90Coop128x240x128_1x1 = Sm90Coop128xNx128<240, 1>;


// The non-persistent warp-specialized kernel (one CTA per output tile, one
// consumer warpgroup) for M in (16, 128]: 64-row tiles, so twice as many
// CTAs stream the weights as with the 128-row cooperative tiles (N = 4096:
// 64 instead of 32), and, swapped, one token tile covers all of M (each
// weight byte read once; the 128x16 tile re-reads it per 16 tokens). K 256
// deep: half the barrier round trips per weight byte of a 128-deep stage.
// Figures: the H100 sweep (CUDA-graph replays, 8 shapes, x bf16 F.linear in
// the same run; benchmarks/results/scaled_mm_tilesweep_h100.json).

// The ladder's tile for M in (16, 32]: swap-AB, 32 token columns. Best or
// within 3% on 8/8 shapes at M = 32 (4096 x 4096: 1.52x bf16 against 1.35x
// for the 128x16 cooperative tile; 8192 x 28672: 2.08x). smem per stage
// 16 KiB of weights + 8 KiB of tokens.
struct Sm90SwapABWarpSpecialized64x32x256_1x1 {
  using TileShape = Shape<_64, _32, _256>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecialized;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = true;
  // 64 CTAs on N = 4096: 4 prefetched weight tiles took 3.5-3.9% less time than 2 there.
  static constexpr int kPrefetchKTiles = 4;
};

// The ladder's tile for M in (32, 64]: swap-AB, 64 token columns. Best or
// within 2% on 8/8 shapes at M = 48 and 64 (6144 x 4096 at 64: 1.60x bf16
// against 1.29x for the 128x16 tile; 28672 x 4096: 1.80x against 1.63x).
// A 2x1 cluster multicasting the token tile measured the same or 1-2% slower.
// smem per stage 16 KiB + 16 KiB.
struct Sm90SwapABWarpSpecialized64x64x256_1x1 {
  using TileShape = Shape<_64, _64, _256>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecialized;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = true;
  // 64 CTAs on N = 4096: 4 prefetched weight tiles took 3.5-3.9% less time than 2 there.
  static constexpr int kPrefetchKTiles = 4;
};

// The ladder's tile for M in (96, 128] with N <= 4096: not swapped, 64 token
// rows x 64 channels (2 x N / 64 CTAs: 128 for N = 4096, where 64x128 tiles
// launch 64). 4096 x 4096 at 128: 1.52x bf16 against 1.32x for the 64x128
// pingpong tile; 4096 x 14336: 1.96x against 1.79x. Larger N: the pingpong
// tile leads by up to 40% (wave quantization of N / 64 x 2 tiles).
struct Sm90WarpSpecialized64x64x256_1x1 {
  using TileShape = Shape<_64, _64, _256>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecialized;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = false;
};

// Swap-AB cooperative tiles: 128 weight rows (two consumer warpgroups of 64) x kTokens
// token columns, K 128 deep, a 1 x kTokenTiles cluster along the tokens (the weight tile
// multicast to the cluster's token tiles). The ladder's rungs at 129..384 tokens use them.
template <int kTokens, int kTokenTiles>
struct Sm90SwapABCoop128xTx128 {
  using TileShape = Shape<_128, cute::Int<kTokens>, _128>;
  using ClusterShape = Shape<_1, cute::Int<kTokenTiles>, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = true;
};

// The ladder's tiles for M in (128, 192]: the quantizers pad those rows to 192
// (w8a8/rows.py), so the tiles cover 192 tokens with no empty token tile; on
// the 256-row tiles above M = 128 the same GEMM costs what M = 256 costs.
// H100 at M = 192 (scaled_mm_rung192_h100.json, 10 shapes), against the
// 256-row tiles at M = 256 (what padding to 256 cost): 6144 x 4096 16.4
// against 17.6 us, 4096 x 4096 12.1 against 13.1, 8192 x 8192 32.0 against
// 33.9, 28672 x 4096 58.9 against 61.1, 10240 x 8192 42.2 against 54.9. The
// rule below picks the fastest of the five tiles swept, or one within 3%, on
// all 10 shapes.

// N <= 4096: swap-AB, 64 weight rows x 96 token columns, non-persistent: two
// token tiles x N / 64 CTAs (128 for N = 4096; 128-row tiles give 64 or 96).
// 4096 x 4096: 12.1 against 12.9 us for the 128x64 tile. smem per stage
// 16 KiB + 24 KiB. Also the ladder's tile for M in (64, 96], one token tile
// (Rung96Policy below).
struct Sm90SwapABWarpSpecialized64x96x256_1x1 {
  using TileShape = Shape<_64, cute::Int<96>, _256>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecialized;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = true;
};

// N > 4096 where two token tiles per 128 weight rows fit one wave (N <= 64 x
// SMs), or where neither fits one (several waves; the smaller tile balances
// them better: 57344 x 8192, 185.7 against 197.1 us for 128x192). A 1x2
// cluster along the tokens: the two token tiles of a weight tile are one
// cluster and the weight tile is multicast to both (see "Weights multicast to
// the token tiles" below). Without the cluster (a sweep entry now): as fast
// in a plain launch at 192 rows (H100, scaled_mm_cluster_h100.json, within
// 2% on 6 shapes), 15% slower at 129 exact rows on 57344 x 8192.
using Sm90SwapABCoop128x96x128_1x2 = Sm90SwapABCoop128xTx128<96, 2>;

// N > 4096 where one token tile per 128 weight rows fits one wave and two do
// not (64 x SMs < N <= 128 x SMs): all 192 tokens in one tile, each weight
// byte read once. 10240 x 8192: 41.9 against 50.6 us for 128x96 (160 tiles,
// 1.2 waves).
using Sm90SwapABCoop128x192x128_1x1 = Sm90SwapABCoop128xTx128<192, 1>;

// M in (256, 320]: the 384-row rung's two tiles cut to 320 tokens (Rung320Policy): four
// 80-token tiles in 1x2 clusters or two of 160, a sixth less wgmma work per CTA than
// the 96 / 192 of padding to 384, on the same grid.
using Sm90SwapABCoop128x80x128_1x2 = Sm90SwapABCoop128xTx128<80, 2>;
using Sm90SwapABCoop128x160x128_1x1 = Sm90SwapABCoop128xTx128<160, 1>;

// Weights multicast to the token tiles. In the cooperative swap-AB tiles with
// several token tiles per weight tile, those token tiles are separate CTAs that
// without a cluster share each weight tile only through L2, and how well depends
// on where the CTAs land. Launched as a programmatic dependent whose predecessor
// lets it start early (w8a8::linear: its quantizer does), a CTA takes an SM as the
// quantizer's blocks leave it, and the 1x1 tiles ran 5-21% slower than launched
// plainly after the same quantizer (57344 x 8192 at M = 192: 230.8 against 191.6
// us for quantizer + GEMM; 4096 x 14336 at M = 256: 61.9 against 55.3), while with
// a 1x2 cluster (the weight tile multicast to both CTAs of the cluster) the early
// start ran as fast as or faster than the plain launch (194.7, 48.8). Measured
// with a standalone probe of these kernels on the H100 (SM id and times of every
// CTA; not in the package). A 1x4 cluster: 116 CTAs resident, 25-30% slower.

// (192, 256] tokens with N <= 4096: four 64-token tiles per 128 weight rows, in two
// clusters. Every launch starts early now (common/programmatic_launch.cuh), and the 1x1
// tile (sweep-only: kSwap128x64DataParallel) ran up to 6% slower than the cluster in plain
// scaled_mm calls too: 4096 x 4096 at M = 256 11.94 against 11.20 us, 4096 x 14336 32.4
// against 31.0, 193..224 exact rows 0-4% (scaled_mm_cluster256_h100.json). Before that,
// in plain launches the cluster had been 0-3% slower with every token tile full and
// 6-17% slower with a partial one (scaled_mm_cluster_h100.json).
using Sm90SwapABCoop128x64x128_1x2 = Sm90SwapABCoop128xTx128<64, 2>;

// Paired token tiles (PairedTokenTilesPolicy below): where two CTAs per 64 weight rows fit
// one wave (N <= 32 x SMs: the 4096-wide Llama-3-8B projections), the rungs up to 256 tokens
// split their tokens over two swap-AB tiles of a 1x2 cluster that multicasts the weight tile
// to both: twice the CTAs (128 for N = 4096), each weight byte read once from L2, half the
// wgmma work per CTA. H100, exact-size codes, against the 1x1 tiles of the ladder then
// (scaled_mm_pairsweep_h100.json, scaled_mm_pair192_h100.json): 4096 x 14336 at M = 16 / 32 /
// 48 / 64 / 96 / 128 / 192 21.9 / 21.9 / 22.2 / 22.2 / 24.2 / 24.1 / 26.6 us against 22.4 /
// 22.8 / 23.1 / 23.3 / 25.8 / 25.3 / 29.6; 4096 x 4096 7.6 / 7.8 / 7.8 / 7.9 / 9.0 / 8.6 / 9.3
// against 7.8 / 7.7 / 8.0 / 8.0 / 8.8 / 9.1 / 9.9. At 256 (scaled_mm_k128_h100.json) 10.2
// against 11.2 and 27.6 against 31.0 for the swap-AB 128x64 1x2 tile. W8A8Linear on
// 4096 x 4096 at M = 65..96 took 11.9 us against 11.3 on the 64x96 one-token-tile rung while
// the single op loaded every stage's weights before its wait; under WeightsFirstPolicy's
// budget the pair takes 10.8 (linear_single_op_h100.json), the 64x96 tile 10.9-11.2 (forced,
// one run).
// Where two CTAs per weight tile pass one wave they lose: 6144 x 4096 12.8 against 11.7 us
// at M = 64.
// kStageCount > 0: that many pipeline stages, sized for two CTAs per SM (TwoPerSm).
template <int kTokens, int kTileK, int kPrefetch, int kTokenTiles = 2, int kStageCount = 0>
struct Sm90SwapABWarpSpecialized64xTxK {
  using TileShape = Shape<_64, cute::Int<kTokens>, cute::Int<kTileK>>;
  using ClusterShape = Shape<_1, cute::Int<kTokenTiles>, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecialized;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = true;
  static constexpr int kPrefetchKTiles = kPrefetch;
  static constexpr int kStages = kStageCount;
};
template <int kTokens, int kTileK, int kPrefetch>
using Sm90SwapABWarpSpecialized64xTxK_1x2 = Sm90SwapABWarpSpecialized64xTxK<kTokens, kTileK, kPrefetch, 2>;
// M <= 32 (and M = 5..16 under "auto", where the skinny GEMM does not run): 16-token tiles.
// Prefetch 4 weight tiles, as on the 64x32 1x1 tile.
using Sm90SwapABWarpSpecialized64x16x256_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<16, 256, 4>;
// M in (32, 64].
using Sm90SwapABWarpSpecialized64x32x256_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<32, 256, 4>;
// M in (64, 96]. Its wgmmas are 64x48 (the build enables CuTe's extended wgmma shapes):
// with three 16-wide ones per K step, 4096 x 4096 at 96 rows took 9.1 against 8.5 us,
// 4096 x 14336 24.5 against 23.4 (H100, the two builds run one after the other).
using Sm90SwapABWarpSpecialized64x48x256_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<48, 256, 2>;
// M in (96, 128].
using Sm90SwapABWarpSpecialized64x64x256_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<64, 256, 2>;
// M in (128, 192]: 128-deep stages (20 KiB each): 4096 x 4096 at 192 rows 9.3
// against 9.4 us, 4096 x 14336 25.4 against 26.7; W8A8Linear 11.8 / 32.8 against 12.1 / 33.9
// (scaled_mm_pairk128_h100.json).
using Sm90SwapABWarpSpecialized64x96x128_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<96, 128, 4>;
// M in (192, 256]: 128-deep stages (24 KiB, 8 of them), against 256-deep ones (48 KiB, 4):
// 4096 x 14336 at M = 256 27.6 against 31.6 us, 4096 x 4096 10.2 against 10.7
// (scaled_mm_k128_h100.json).
using Sm90SwapABWarpSpecialized64x128x128_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<128, 128, 2>;




// Split_k > 1 / scheduler "streamk" requests at M > 256 (the ladder's tiles
// there run the persistent scheduler, which cannot split K). 128x128
// cooperative: the stream-K scheduler needs the cooperative kernel. No
// heuristic picks it: at M > 256 the tile grid already fills the SMs.
struct Sm90CoopStreamK128x128x128_1x1 {
  using TileShape = Shape<_128, _128, _128>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using TileScheduler = cutlass::gemm::StreamKScheduler;
  static constexpr bool kSwapAB = false;
};


// The launcher each instance file instantiates (defined in
// scaled_mm_sm90_kernel.cuh). ElementOut: cutlass::bfloat16_t or cutlass::half_t.
template <class Config, class ElementOut>
struct ScaledMmSm90Launcher {
  static size_t workspace_size(const ScaledMmSm90Params& params, const SchedulerOptions& options);
  static void run(const ScaledMmSm90Params& params, const SchedulerOptions& options, void* workspace,
                  cudaStream_t stream);
};

// ---------------------------------------------------------------------------
// The config table, stated once: X(id, name, config, scheduler options) for a CUTLASS
// entry, D(id, name, kernel, K split) for a decode kernel. It gives the ids below (positions;
// names are the interface), the table of scaled_mm_sm90.cu, and setup.py generates one
// instance file per CUTLASS config from the X lines. Every entry is one a heuristic or the
// split / stream-K request path picks; sweep-only entries live in benchmarks/sweep/
// (W8A8_SM90_SWEEP_TABLE, built there with -DW8A8_SWEEP_CONFIGS).
// ---------------------------------------------------------------------------
#define W8A8_SM90_TABLE(X, D)                                                                                    \
  X(kSwap128x16StreamK, "swap_128x16x128_1x1_coop_streamk", Sm90SwapABCoopStreamK128x16x128_1x1, kDefault)      \
  X(kSwap128x64StreamK, "swap_128x64x128_1x1_coop_streamk", Sm90SwapABCoopStreamK128x64x128_1x1, kDefault)      \
  X(kPingpong64x128, "64x128x128_2x1_pingpong_swz8", Sm90Pingpong64x128x128_2x1, kSwizzle8)                    \
  X(kPingpong128x128, "128x128x128_2x1_pingpong_swz8", Sm90Pingpong128x128x128_2x1, kSwizzle8)                 \
  X(kCoop128x256RasterN, "128x256x128_2x1_coop_swz8_rasterN", Sm90Coop128x256x128_2x1, kSwizzle8RasterN)       \
  X(kCoop128x128StreamK, "128x128x128_1x1_coop_streamk", Sm90CoopStreamK128x128x128_1x1, kDataParallel)         \
  D(kGemvSplit1, "gemv_dp4a_ksplit1", gemv_run, 1)                                                              \
  D(kSkinnySplit8, "skinny_mma_ksplit8", skinny_run, 8)                                                         \
  X(kSwap64x32, "swap_64x32x256_1x1_ws", Sm90SwapABWarpSpecialized64x32x256_1x1, kDefault)                      \
  X(kSwap64x64, "swap_64x64x256_1x1_ws", Sm90SwapABWarpSpecialized64x64x256_1x1, kDefault)                      \
  X(kWarpSpecialized64x64, "64x64x256_1x1_ws", Sm90WarpSpecialized64x64x256_1x1, kDefault)                      \
  X(kSwap64x96, "swap_64x96x256_1x1_ws", Sm90SwapABWarpSpecialized64x96x256_1x1, kDefault)                      \
  X(kSwap128x96Cluster, "swap_128x96x128_1x2_coop", Sm90SwapABCoop128x96x128_1x2, kDefault)                     \
  X(kSwap128x192, "swap_128x192x128_1x1_coop", Sm90SwapABCoop128x192x128_1x1, kDefault)                         \
  X(kSwap128x64Cluster, "swap_128x64x128_1x2_coop", Sm90SwapABCoop128x64x128_1x2, kDefault)                     \
  X(kSwap64x16Cluster, "swap_64x16x256_1x2_ws", Sm90SwapABWarpSpecialized64x16x256_1x2, kDefault)               \
  X(kSwap64x32Cluster, "swap_64x32x256_1x2_ws", Sm90SwapABWarpSpecialized64x32x256_1x2, kDefault)               \
  X(kSwap64x48Cluster, "swap_64x48x256_1x2_ws", Sm90SwapABWarpSpecialized64x48x256_1x2, kDefault)               \
  X(kSwap64x64Cluster, "swap_64x64x256_1x2_ws", Sm90SwapABWarpSpecialized64x64x256_1x2, kDefault)               \
  X(kSwap64x96Cluster, "swap_64x96x128_1x2_ws", Sm90SwapABWarpSpecialized64x96x128_1x2, kDefault)               \
  X(kSwap64x128Cluster, "swap_64x128x128_1x2_ws", Sm90SwapABWarpSpecialized64x128x128_1x2, kDefault)            \
  X(kCoop128x96Cluster, "128x96x128_2x1_coop", Sm90Coop128x96x128_2x1, kDefault)                                \
  X(kCoop128x192Cluster, "128x192x128_2x1_coop", Sm90Coop128x192x128_2x1, kDefault)                             \
  X(kSwap128x80Cluster, "swap_128x80x128_1x2_coop", Sm90SwapABCoop128x80x128_1x2, kDefault)                     \
  X(kSwap128x160, "swap_128x160x128_1x1_coop", Sm90SwapABCoop128x160x128_1x1, kDefault)                         \
  X(kCoop128x240, "128x240x128_1x1_coop", Sm90Coop128x240x128_1x1, kDefault)

#ifdef W8A8_SWEEP_CONFIGS
#include "sm90_sweep_configs.cuh"  // benchmarks/sweep/: sweep-only structs and W8A8_SM90_SWEEP_TABLE
#else
#define W8A8_SM90_SWEEP_TABLE(X, D)
#endif

#define W8A8_SM90_CONFIG_ID(id, ...) id,
enum ConfigId : int {
  W8A8_SM90_TABLE(W8A8_SM90_CONFIG_ID, W8A8_SM90_CONFIG_ID)
  W8A8_SM90_SWEEP_TABLE(W8A8_SM90_CONFIG_ID, W8A8_SM90_CONFIG_ID)
  kNumConfigs
};
#undef W8A8_SM90_CONFIG_ID

// The ladder on next_pow2(M) (192 between 128 and 256, 320 and 384 between 256 and 512) and
// N, from the config sweeps on the H100 (CUDA-graph replay, 8 shapes from 4096 x 4096 to
// 57344 x 8192 as N x K; "best" = fastest or within 3%):
//   N <= 32 x SMs and M <= 256 (two CTAs per 64 weight rows fit one wave): the rung's
//             tokens as two swap-AB token tiles of a 1x2 cluster (PairedTokenTilesPolicy).
//             The N <= 4096 rules below serve such N only on GPUs with fewer SMs.
//   M <= 32:  swap-AB 64x32x256, non-persistent (under "auto": 17..32, and
//             5..16 but where the skinny GEMM runs, see SkinnyPolicy).
//   M <= 64:  swap-AB 64x64x256, non-persistent: best on 8/8 at 48 and 64.
//   M <= 96:  swap-AB 64x96x256, non-persistent: all 96 tokens in one tile,
//             each weight byte read once, where N / 64 <= 2 x SMs (Rung96Policy).
//   M <= 128: N <= 4096: 64x64x256 non-persistent (twice the CTAs of
//             64x128 tiles: 13-15% faster on 4096 x 4096 and 4096 x 14336);
//             larger N: 64x128 pingpong, 2x1 cluster: fastest or within 1%
//             on the 6 other shapes.
//   M <= 192: swap-AB tiles covering 192 tokens (Rung192Policy below).
//   M <= 256: N <= 4096 (32 weight tiles of 128 rows): swap-AB 128x64 is
//             25-30% faster than 128x128 tiles (16 tiles for 132 SMs), in
//             a 1x2 cluster (every launch starts early);
//             larger N: 128-row token tiles 96, 128 or 192 weights wide,
//             whichever fills one wave best, else 128x128 pingpong (OneWavePolicy).
//   M <= 320: swap-AB tiles covering 320 tokens (Rung320Policy).
//   M <= 384: swap-AB tiles covering 384 tokens, or three 128-token tiles 240 weights
//             wide where those make one fuller wave (Rung384Policy).
//   M <= 512: the same choice over four token tiles (OneWavePolicy); the
//             128x128 pingpong tile was best on 5/8, up to 40% ahead of 128x256
//             (wave quantization: 4 x N/256 tiles leave SMs idle); 7-9%
//             behind it on N = 57344 and K = 28672.
//   M > 512:  128x256 cooperative, 2x1 cluster, swizzle 8, raster along N.
// (64, 96] tokens: the quantizers pad them to 96 (w8a8/rows.py), and the swap-AB 64x96 tile
// covers them in one token tile, N / 64 CTAs, where those fit two waves. H100 at M = 96
// (scaled_mm_m128cfg_h100.json, 8 shapes), against the 128-row tiles on the 128 rows the
// quantizers padded to before: 6144 x 4096 11.7 against 12.4 us, 8192 x 8192 25.8 against
// 27.2, 10240 x 8192 35.9 against 37.6, 4096 x 4096 8.9 against 9.1, 4096 x 14336 25.6
// against 25.0; on 96 exact-size rows the 128-row tiles took 10.4 and 31.2 us on 4096 x 4096
// and 4096 x 14336 (a partly filled token tile). In several waves of its non-persistent CTAs
// it loses: 28672 x 4096 (3.4 waves) 48.4 against 47.2, and W8A8Linear 4% slower there
// (serving grid); 57344 x 8192 (6.8 waves) 1% slower. There the pingpong 64x128 tile runs
// the 96 rows, as fast as 128 (47.1 against 47.2 us on 28672 x 4096).
struct Rung96Policy {
  static constexpr int64_t kMaxM = 96;
  static constexpr bool serves(int64_t n, int sm_count) { return weight_tiles(n, 64) <= 2 * int64_t(sm_count); }
};

struct Rung192Policy {
  static constexpr int64_t kMaxM = 192;
  // N <= 4096: the 64-row tile (N / 64 x 2 CTAs). Wider: 128 weight rows per tile, two
  // token tiles of 96 where they fit one wave, else one of 192 where that fits, else
  // (several waves either way) 96.
  static constexpr int config(int64_t n, int sm_count) {
    const int64_t tiles = weight_tiles(n, 128);
    if (n <= 4096) return kSwap64x96;
    if (2 * tiles <= sm_count) return kSwap128x96Cluster;
    return tiles <= sm_count ? kSwap128x192 : kSwap128x96Cluster;
  }
};

// (256, 320] and (320, 384] tokens: the quantizers pad them to 320 and 384 (w8a8/rows.py),
// and swap-AB tiles cover them with 128 weight rows per tile, as two token tiles of half
// the rung or four of a quarter (1x2 cluster), whichever fills the waves of SMs better by
// more than 0.15 of a wave; a half-rung tile reads each weight tile half as often, which
// pays for some idle SMs. The 128x128 pingpong tile the ladder ran there (2x1 cluster: 3
// token tiles become 4) was slower at M = 320 than at 512. H100 at 384 rows
// (scaled_mm_rung384_h100.json): 57344 x 8192 241.2 us against 453.8 on the pingpong tile
// (338.3 at 512); 4096 x 14336 35.5 (four 96-token tiles) against 53.0 (two of 192) and
// 59.6; at 320 rows 4096 x 14336 34.1 (four of 80) against 45.2 (two of 160) and 47.4 on the
// 384-row rung's 96-token tiles, 57344 x 8192 220.4 (two of 160) against 268.2 (four of
// 80) and 337.6 (two of 192). The rule picks the faster of the two on 8 of 8 shapes at both
// rungs (on 28672 x 4096 at 384 rows, 85% against 97% of the waves filled, the two are
// within 4% and the faster one changes from run to run: 75.3 against 78.2 us here).
// At 384 rows, three 128-token tiles 240 weight columns wide, not swapped
// (Sm90Coop128x240x128_1x1), take over where they make one wave that fills the SMs better
// than the swap-AB pick by the same margin: 10240 x 8192 (129 CTAs against 320 of 96 tokens,
// 2.4 waves).
// kOneWaveTiles: the one-wave entry (-1: none), kRows / 128 token tiles x N / kOneWaveWidth
// weight columns.
template <int64_t kRows, int kQuarterTiles, int kHalfTiles, int kOneWaveTiles = -1, int64_t kOneWaveWidth = 0>
struct WideRungPolicy {
  static constexpr int64_t kMaxM = kRows;
  static constexpr double kMargin = 0.15;
  // The share of the SM waves a grid of `tiles` CTAs fills.
  static constexpr double filled(int64_t tiles, int sm_count) {
    const int64_t waves = (tiles + sm_count - 1) / sm_count;
    return double(tiles) / double(waves * sm_count);
  }
  static constexpr int config(int64_t n, int sm_count) {
    const int64_t tiles = weight_tiles(n, 128);
    const double quarter = filled(4 * tiles, sm_count), half = filled(2 * tiles, sm_count);
    const bool use_quarter = quarter > half + kMargin;
    if constexpr (kOneWaveTiles >= 0) {
      const int64_t ctas = (kRows / 128) * weight_tiles(n, kOneWaveWidth);
      if (ctas <= sm_count && filled(ctas, sm_count) > (use_quarter ? quarter : half) + kMargin) return kOneWaveTiles;
    }
    return use_quarter ? kQuarterTiles : kHalfTiles;
  }
};
using Rung320Policy = WideRungPolicy<320, kSwap128x80Cluster, kSwap128x160>;
using Rung384Policy = WideRungPolicy<384, kSwap128x96Cluster, kSwap128x192, kCoop128x240, 240>;
static_assert(Rung320Policy::config(4096, 132) == kSwap128x80Cluster, "4096 x 4096 at 320: 128 CTAs");
static_assert(Rung320Policy::config(6144, 132) == kSwap128x160, "6144 x 4096 at 320: 96 CTAs, not 192");
static_assert(Rung384Policy::config(4096, 132) == kSwap128x96Cluster, "4096 x 4096 at 384: 128 CTAs");
static_assert(Rung384Policy::config(8192, 132) == kSwap128x192, "8192 x 8192 at 384: 128 CTAs");
static_assert(Rung384Policy::config(6144, 132) == kSwap128x192, "6144 x 4096 at 384: 96 CTAs");
static_assert(Rung384Policy::config(10240, 132) == kCoop128x240, "10240 x 8192 at 384: 129 CTAs, not 320");
static_assert(Rung384Policy::config(28672, 132) == kSwap128x192, "28672 x 4096 at 384: no wave fits");

// Where two CTAs per 64 weight rows fit one wave (N <= 32 x SMs), every rung up to 256
// tokens runs as two token tiles of a 1x2 cluster (see "Paired token tiles" above): 16, 32,
// 48, 64, 96 or 128 tokens per CTA.
struct PairedTokenTilesPolicy {
  static constexpr int64_t kMaxM = 256;
  static constexpr bool serves(int64_t n, int sm_count) { return 2 * weight_tiles(n, 64) <= int64_t(sm_count); }
  static constexpr int config(int64_t m) {
    return m <= 32 ? kSwap64x16Cluster
           : m <= 64 ? kSwap64x32Cluster
           : m <= 96 ? kSwap64x48Cluster
           : m <= 128 ? kSwap64x64Cluster
           : m <= 192 ? kSwap64x96Cluster
                      : kSwap64x128Cluster;
  }
};

// M in (192, 256] with N > 4096 and M in (384, 512]: 2 or 4 token tiles of 128 rows, and
// of the weight widths 96, 128 and 192 the one whose tiles make the most CTAs within one
// wave (the 2x1-cluster tiles above; 128: the pingpong tile the ladder ran before, which
// ties the cooperative one there); where none fits one wave, the pingpong 128x128.
// H100 (scaled_mm_onewave_h100.json): 6144 x 4096 -> 96 (256 rows) and 192 (512),
// 10240 x 8192 -> 192 (256), 8192 x 8192 and 4096 x 4096 -> 128; 28672 x 4096 at 256
// and 10240 x 8192 at 512 fit no wave, where the pingpong tile was fastest or within 1%.
struct OneWavePolicy {
  static constexpr int config(int64_t n, int64_t token_tiles, int sm_count) {
    const int widths[] = {96, 128, 192};
    const int ids[] = {kCoop128x96Cluster, kPingpong128x128, kCoop128x192Cluster};
    int best = kPingpong128x128;
    int64_t best_ctas = 0;
    for (int i = 0; i < 3; ++i) {
      const int64_t ctas = token_tiles * weight_tiles(n, widths[i]);
      if (ctas <= sm_count && ctas > best_ctas) {
        best = ids[i];
        best_ctas = ctas;
      }
    }
    return best;
  }
};
static_assert(OneWavePolicy::config(6144, 2, 132) == kCoop128x96Cluster, "6144 x 4096 at 256");
static_assert(OneWavePolicy::config(10240, 2, 132) == kCoop128x192Cluster, "10240 x 8192 at 256");
static_assert(OneWavePolicy::config(8192, 2, 132) == kPingpong128x128, "8192 x 8192 at 256");
static_assert(OneWavePolicy::config(28672, 2, 132) == kPingpong128x128, "28672 x 4096 at 256");
static_assert(OneWavePolicy::config(6144, 4, 132) == kCoop128x192Cluster, "6144 x 4096 at 512");
static_assert(OneWavePolicy::config(4096, 4, 132) == kPingpong128x128, "4096 x 4096 at 512");

inline int select_config(int64_t m, int64_t n, int sm_count) {
  if (m <= PairedTokenTilesPolicy::kMaxM && PairedTokenTilesPolicy::serves(n, sm_count)) {
    return PairedTokenTilesPolicy::config(m);
  }
  int64_t m_pow2 = 1;
  while (m_pow2 < m) m_pow2 <<= 1;
  if (m_pow2 <= 32) return kSwap64x32;
  if (m_pow2 <= 64) return kSwap64x64;
  if (m <= Rung96Policy::kMaxM && Rung96Policy::serves(n, sm_count)) return kSwap64x96;
  if (m_pow2 <= 128) return n <= 4096 ? kWarpSpecialized64x64 : kPingpong64x128;
  if (m <= Rung192Policy::kMaxM) return Rung192Policy::config(n, sm_count);
  if (m_pow2 <= 256) return n > 4096 ? OneWavePolicy::config(n, 2, sm_count) : kSwap128x64Cluster;
  if (m <= Rung320Policy::kMaxM) return Rung320Policy::config(n, sm_count);
  if (m <= Rung384Policy::kMaxM) return Rung384Policy::config(n, sm_count);
  if (m_pow2 <= 512) return OneWavePolicy::config(n, 4, sm_count);
  return kCoop128x256RasterN;
}

// The stream-K-scheduler entry that serves an explicit split_k > 1 or
// scheduler "streamk" without a named config: the swap-AB tile of the ladder's
// M range (M <= 64: 16 token columns; M <= 256: 64, few enough that the
// weight rows still fill the 128-row side), else 128x128 cooperative. The
// request's decomposition and split count replace the entry's own.
inline int split_capable_config(int64_t m) {
  if (m <= 64) return kSwap128x16StreamK;
  if (m <= 256) return kSwap128x64StreamK;
  return kCoop128x128StreamK;
}

// No CUTLASS split-K under scheduler "auto": the swap-AB tile gained from a K
// split only at M <= 16 on long-K, few-tile shapes (4096 x 14336: 1.13-1.20x)
// and lost everywhere else (0.79-0.97x); the skinny GEMM below serves those M
// and is faster than either (4096 x 14336, M = 16: 26.2 us against 31.8 split
// and 35.8 data-parallel). Explicit split_k / scheduler requests still run
// the stream-K-scheduler entries (split_capable_config).

// The decode GEMV (decode/scaled_mm_gemv.h; dp4a, not CUTLASS): at a few
// tokens the GEMM streams its weights and nothing else, and the swap-AB tile
// pays for TMA, wgmma on 16 token columns of which 1..4 are real, and a tile
// grid of N / 128 CTAs (32 for N = 4096: a quarter of the SMs read the weights).
// Measured on the H100 (CUDA-graph replays, 8 shapes from 4096 x 4096 to
// 57344 x 8192, M in {1, 2, 3, 4, 8, 16}):
//   * M <= 4: one warp per row beats the swap-AB 128x16 tile on every shape,
//     most on small N x K (4096 x 4096 at M = 1: 8.0 vs 15.0 us; 4096 x 14336:
//     22.8 vs 35.2 us) and by 0-8% on the largest (57344 x 8192: 153.6 vs
//     167.3 us, 3.07 TB/s of int8 weights).
//   * M = 8: it wins on 2 of 8 shapes and loses up to 30% elsewhere (four
//     token tiles re-read the weights, 8192 x 28672: 104.3 vs 87.6 us);
//     M = 16: 1.5-2.3x slower. So it serves M <= 4.
//   * Splitting K over 2, 4 or 8 warps per row is never more than 3% ahead of
//     one warp and up to 4x behind at M = 3 and 4 (fewer rows per CTA, the
//     same activation reads): one warp per row; the split entries are sweep-only.
//   * Against the swap-AB 64x32 tile with its early launch and L2 prefetch (the
//     A/B of SkinnyPolicy below, M = 1, 2, 4): W8A8Linear at M = 1 is 1-13%
//     slower on the tile on 6 of 8 shapes (28672 x 4096: 46.6 against 41.4 us),
//     at M = 4 faster on 5 (6144 x 4096: 13.0 against 13.8; 8192 x 28672: 82.2
//     against 86.7): mixed, so the GEMV keeps M <= 4.
struct GemvPolicy {
  static constexpr int64_t kMaxM = 4;  // tokens served under scheduler "auto"
  static constexpr int kConfig = kGemvSplit1;
};

// The skinny GEMM (decode/scaled_mm_skinny.h; mma.sync, not CUTLASS): past
// the GEMV's tokens the weights are still the whole cost. A warp per 16 weight
// rows, K split over 8 warps of a CTA so that the grid has enough warps to keep
// HBM busy, 2 CTAs per SM.
// Measured on the H100 (CUDA-graph replays, the 8 shapes of the GEMV sweep,
// M in {4, 5, 8, 12, 16, 24, 32}), before the CUTLASS tiles launched early and
// prefetched their first weights:
//   * M = 5..16: the best K split beat the swap-AB 128x16 tile by 1.08-1.52x on
//     the narrower shapes and tied it on 28672 x 4096 and 57344 x 8192. M = 24
//     and 32: 0.82-1.03x (the token rows are re-read per 16-token tile and every
//     warp holds two halves): so M <= 16. Splits 1 and 2 never won, split 4 only
//     where split 8 needs 1.5-2 waves (N = 6144..8192 with K = 4096), which the
//     64x32 tile serves now: sweep-only.
//   * M <= 4 stays with the GEMV: the skinny GEMM ties it on N = 4096 and is
//     2-5% slower elsewhere.
//   * Against the non-persistent swap-AB 64x32 tile, which since launches early
//     (its CTAs start while the kernel ahead drains) and prefetches its first
//     weight tiles into L2 (scaled_mm_sm90_mainloop.cuh). Same build, one env
//     switch (not kept), interleaved CUDA-graph replays, M = 5, 8, 12, 16: where
//     the tile's grid is one wave (N / 64 <= SMs) it wins: W8A8Linear on
//     6144 x 4096 12.9-13.0 us against 13.5-15.0, 4096 x 4096 9.9-10.1 against
//     10.5-11.3, 4096 x 14336 24.7-25.3 against 28.0-28.8 (scaled_mm alone
//     up to 12% / 15% / 8% less time; 2.6% more on 4096 x 4096 at M = 5). On
//     28672 x 4096 (448 tiles, 3.4 waves of 256 KiB each) the skinny GEMM keeps
//     it: W8A8Linear 44.2-46.4 us against 46.1-46.9 (equal at 16). Where N and K
//     are both >= 8192 (several waves of long tiles) the tile wins too (8192 x
//     28672: 2.04x bf16 against 1.84-1.90x; 57344 x 8192, 8192 x 8192,
//     10240 x 8192: 1-6%).
struct SkinnyPolicy {
  // Tokens served under scheduler "auto", after the GEMV's.
  static constexpr int64_t kMaxM = 16;
  static constexpr int kConfig = kSkinnySplit8;
  // Rows of K at least this long run the 64x32 tile whatever its grid.
  static constexpr int64_t kMinTileK = 8192;

  // The skinny GEMM: more 64-row weight tiles than SMs, on short rows.
  static constexpr bool serves(int64_t n, int64_t k, int sm_count) {
    return weight_tiles(n, 64) > sm_count && k < kMinTileK;
  }
};

// The entry scheduler "auto" runs, with the scheduler options of its table
// entry: the GEMV for a few tokens, the skinny GEMM for a few more on the
// shapes it serves (each with its K split inside the CTA), else the ladder's
// entry, data-parallel.
inline int plan_auto(int64_t m, int64_t n, int64_t k, int sm_count) {
  if (m <= GemvPolicy::kMaxM) return GemvPolicy::kConfig;
  if (m <= SkinnyPolicy::kMaxM && SkinnyPolicy::serves(n, k, sm_count)) return SkinnyPolicy::kConfig;
  return select_config(m, n, sm_count);
}

}  // namespace w8a8::sm90
