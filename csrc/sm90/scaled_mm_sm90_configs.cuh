// Tile configs of the sm90 int8 scaled matmul and the config table; the heuristics that pick
// an entry are in scaled_mm_sm90_heuristics.cuh. A config's comment names the rule that picks
// it by the rule's id; the measurements behind an id are on docs/EVIDENCE.md (from
// benchmarks/results/evidence.json).
//
// A config is a compile-time struct (one CUTLASS instantiation per config and output dtype);
// a table entry pairs it with run-time scheduler options (swizzle, raster order, K
// decomposition), so scheduler variants cost no extra compilation. Struct names:
// Sm90[SwapAB]<kernel schedule>[StreamK]<tile M x N x K>_<cluster M x N>.
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
// Configs. Fields: TileShape (the CTA tile M x N x K as CUTLASS sees it, after the swap for
// kSwapAB), ClusterShape, KernelSchedule, EpilogueSchedule, TileScheduler, kSwapAB.
// Swap-AB computes out^T = b @ a^T: the weight rows fill the wgmma's 64- or 128-row M side
// and the tokens its narrow N side, where a few tokens would pad a 64-row tile.
// ---------------------------------------------------------------------------

// Optional field kPrefetchKTiles: the weight tiles (K blocks) a plain scaled_mm's CTA
// prefetches into L2 before its dependency wait (scaled_mm_sm90_mainloop.cuh); 2 where a
// config does not set it. More compete with the loads after the wait. [evidence sm90.prefetch]
template <class Config, class = void>
struct PrefetchKTiles : std::integral_constant<int, 2> {};
template <class Config>
struct PrefetchKTiles<Config, std::void_t<decltype(Config::kPrefetchKTiles)>>
    : std::integral_constant<int, Config::kPrefetchKTiles> {};

// Optional field kStages: pipeline stages sized for two CTAs per SM (TwoPerSm); where a
// config does not set it (0), CUTLASS fills the shared memory its epilogue leaves with
// stages, one CTA per SM.
template <class Config, class = void>
struct PipelineStages : std::integral_constant<int, 0> {};
template <class Config>
struct PipelineStages<Config, std::void_t<decltype(Config::kStages)>>
    : std::integral_constant<int, Config::kStages> {};

// Two CTAs per SM: the shared memory a CTA may take so that two fit in the H100's 228 KiB (1 KiB
// of each is the system's). Sweep-only configs: a second resident CTA does not pay end to end.
// [evidence sm90.two-ctas-per-sm]
struct TwoPerSm {
  static constexpr int kSmemPerSm = 228 * 1024;
  static constexpr int kSmemPerCta = kSmemPerSm / 2 - 1024;
};

// Tiles of `rows` weight rows (output channels) that cover N: the CTAs per token tile of a
// swap-AB tile, the unit the policies below and in scaled_mm_sm90_heuristics.cuh count against
// the SMs.
constexpr int64_t weight_tiles(int64_t n, int64_t rows) { return (n + rows - 1) / rows; }

// The waves of SMs a grid of `ctas` CTAs (one per SM at a time) takes.
constexpr int64_t sm_waves(int64_t ctas, int sm_count) { return (ctas + sm_count - 1) / sm_count; }

// In w8a8::linear (ScaledMmSm90Params::weights_ready) each CTA loads the weights of its first
// stages() pipeline stages before it waits for the quantizer: as many as fit 2 MiB + 384 bytes
// per element of K over the distinct weight bytes one stage of the first wave loads (CTAs on the
// same weight tile share them). Why: the quantizer's time grows with K, and weight loads past
// what HBM delivers meanwhile delay it and the activation loads queued behind them.
// [evidence sm90.weights-first]
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
// Picks on 132 SMs (7 / 5 stages: the 48-token pair / the 64x96 tile).
static_assert(WeightsFirstPolicy::stages(96, 4096, 4096, 132, 64, 48, 256, 7) == 3, "4096 x 4096, M = 96");
static_assert(WeightsFirstPolicy::stages(96, 6144, 4096, 132, 64, 96, 256, 5) == 2, "6144 x 4096, M = 96");
static_assert(WeightsFirstPolicy::stages(96, 10240, 8192, 132, 64, 96, 256, 5) == 2, "10240 x 8192, M = 96");
static_assert(WeightsFirstPolicy::stages(96, 4096, 14336, 132, 64, 48, 256, 7) == 7, "4096 x 14336, M = 96");

// Split / stream-K requests at M <= 64 (split_capable_config): swap-AB, 16 token columns,
// cooperative (the stream-K scheduler needs it).
struct Sm90SwapABCoopStreamK128x16x128_1x1 {
  using TileShape = Shape<_128, _16, _128>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using TileScheduler = cutlass::gemm::StreamKScheduler;
  static constexpr bool kSwapAB = true;
};

// Split / stream-K requests at M in (64, 256]: swap-AB, 64 token columns.
struct Sm90SwapABCoopStreamK128x64x128_1x1 {
  using TileShape = Shape<_128, _64, _128>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using TileScheduler = cutlass::gemm::StreamKScheduler;
  static constexpr bool kSwapAB = true;
};

// Ladder: M in (96, 128] with N > 4096, and (64, 96] where Rung96Policy does not serve. 64-row
// pingpong tiles in a 2x1 cluster: the weight tile multicast to both token tiles, one
// warpgroup's epilogue overlapping the other's mainloop. [evidence sm90.rung128]
struct Sm90Pingpong64x128x128_2x1 {
  using TileShape = Shape<_64, _128, _128>;
  using ClusterShape = Shape<_2, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = false;
};

// 128x128 pingpong, 2x1 cluster: OneWavePolicy's 128-wide pick and its fallback where no width
// fits one wave (M in (192, 256] with N > 4096, and (384, 512]); rastered along N, the ladder's
// tile for M >= 1024 on narrow weights and short rows (NarrowWeightsPolicy).
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

// Ladder: M > 512 (compute-bound): 128x256 cooperative, 2x1 cluster; its table entry runs
// swizzle 8, raster along N. Why: the widest tile loads the least operand data per MAC.
// Also OneWavePolicy's fallback at 512 rows where its waves are no more than 128x128's.
// [evidence sm90.m512-compute-tile]
using Sm90Coop128x256x128_2x1 = Sm90Coop128xNx128_2x1<256>;

// OneWavePolicy's 96- and 192-wide tiles. Cooperative: with one tile per CTA both consumer
// warpgroups share it.
using Sm90Coop128x96x128_2x1 = Sm90Coop128xNx128_2x1<96>;
using Sm90Coop128x192x128_2x1 = Sm90Coop128xNx128_2x1<192>;

// Rung384Policy's one-wave tile: three 128-token tiles x N / 240 weight columns; no cluster,
// which would round three token tiles up to four. [evidence sm90.rung384-one-wave]
using Sm90Coop128x240x128_1x1 = Sm90Coop128xNx128<240, 1>;

// The non-persistent warp-specialized kernel (one CTA per output tile, one consumer
// warpgroup): 64 weight rows per CTA, twice the CTAs of a 128-row tile, and K 256 deep (half
// the barrier round trips per weight byte of a 128-deep stage).

// Ladder: M <= 32 where neither the pairs nor the decode kernels run: swap-AB, 32 token
// columns, all the tokens in one tile (each weight byte read once). [evidence sm90.rung32]
struct Sm90SwapABWarpSpecialized64x32x256_1x1 {
  using TileShape = Shape<_64, _32, _256>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecialized;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = true;
  // 64 CTAs on N = 4096 leave HBM room for 4 prefetched K blocks. [evidence sm90.prefetch]
  static constexpr int kPrefetchKTiles = 4;
};

// Ladder: M in (32, 64] where the pairs do not run: swap-AB, 64 token columns.
// [evidence sm90.rung64]
struct Sm90SwapABWarpSpecialized64x64x256_1x1 {
  using TileShape = Shape<_64, _64, _256>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecialized;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = true;
  // 64 CTAs on N = 4096 leave HBM room for 4 prefetched K blocks. [evidence sm90.prefetch]
  static constexpr int kPrefetchKTiles = 4;
};

// Ladder: M in (96, 128] with 32 x SMs < N <= 4096 (GPUs with fewer SMs): not swapped, 64
// token rows x 64 channels, 2 x N / 64 CTAs (twice the 64x128 tile's). [evidence sm90.rung128]
struct Sm90WarpSpecialized64x64x256_1x1 {
  using TileShape = Shape<_64, _64, _256>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecialized;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = false;
};

// Swap-AB cooperative tiles: 128 weight rows (two consumer warpgroups of 64) x kTokens token
// columns, K 128 deep, a 1 x kTokenTiles cluster along the tokens. Where several token tiles
// share a weight tile they form a 1x2 cluster that multicasts it: without one they share it
// only through L2, which an early programmatic start makes unreliable.
// [evidence sm90.cluster-multicast]
template <int kTokens, int kTokenTiles>
struct Sm90SwapABCoop128xTx128 {
  using TileShape = Shape<_128, cute::Int<kTokens>, _128>;
  using ClusterShape = Shape<_1, cute::Int<kTokenTiles>, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = true;
};

// Rung96Policy (one token tile) and Rung192Policy at N <= 4096 (two): swap-AB 64x96,
// non-persistent.
struct Sm90SwapABWarpSpecialized64x96x256_1x1 {
  using TileShape = Shape<_64, cute::Int<96>, _256>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecialized;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = true;
};

// Rung192Policy where two 96-token tiles per 128 weight rows fit one wave, or neither this
// nor one 192-token tile does; Rung384Policy's quarter tiles.
using Sm90SwapABCoop128x96x128_1x2 = Sm90SwapABCoop128xTx128<96, 2>;

// Rung192Policy where one 192-token tile fits one wave and two 96-token tiles do not;
// Rung384Policy's half tiles.
using Sm90SwapABCoop128x192x128_1x1 = Sm90SwapABCoop128xTx128<192, 1>;

// Rung320Policy's quarter (80 tokens, 1x2 cluster) and half (160) tiles.
using Sm90SwapABCoop128x80x128_1x2 = Sm90SwapABCoop128xTx128<80, 2>;
using Sm90SwapABCoop128x160x128_1x1 = Sm90SwapABCoop128xTx128<160, 1>;

// Ladder: M in (192, 256] with 32 x SMs < N <= 4096 (GPUs with fewer SMs): four 64-token tiles
// per 128 weight rows in two clusters, 128 CTAs on N = 4096 where 128x128 tiles give 64.
// [evidence sm90.rung256]
using Sm90SwapABCoop128x64x128_1x2 = Sm90SwapABCoop128xTx128<64, 2>;

// The token-tile pairs (PairedTokenTilesPolicy): swap-AB, 64 weight rows x kTokens tokens x
// kTileK, non-persistent, a 1 x kTokenTiles cluster multicasting the weight tile; kPrefetch:
// the config's kPrefetchKTiles; kStageCount > 0: stages sized for two CTAs per SM (TwoPerSm).
// Stages 256 deep up to 64 tokens, 128 deep at 96 and 128 (more stages fit).
// [evidence sm90.pair-stage-depth]
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
// M <= 32 (and 5..16 under "auto" where the skinny GEMM does not run).
using Sm90SwapABWarpSpecialized64x16x256_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<16, 256, 4>;
// M in (32, 64].
using Sm90SwapABWarpSpecialized64x32x256_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<32, 256, 4>;
// M in (64, 96]: 64x48 wgmmas (the build enables CuTe's extended wgmma shapes).
// [evidence sm90.extended-wgmma-shapes]
using Sm90SwapABWarpSpecialized64x48x256_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<48, 256, 2>;
// M in (96, 128].
using Sm90SwapABWarpSpecialized64x64x256_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<64, 256, 2>;
// M in (128, 192]; 4 K blocks of 128 prefetched, the bytes of 2 of 256.
using Sm90SwapABWarpSpecialized64x96x128_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<96, 128, 4>;
// M in (192, 256].
using Sm90SwapABWarpSpecialized64x128x128_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<128, 128, 2>;

// Split / stream-K requests at M > 256 (the ladder's tiles there run the persistent
// scheduler, which cannot split K): 128x128 cooperative.
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
  X(kCoop128x240, "128x240x128_1x1_coop", Sm90Coop128x240x128_1x1, kDefault)                                    \
  X(kPingpong128x128RasterN, "128x128x128_2x1_pingpong_rasterN", Sm90Pingpong128x128x128_2x1, kRasterN)

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

}  // namespace w8a8::sm90
