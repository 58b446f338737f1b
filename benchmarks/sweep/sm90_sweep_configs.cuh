// Sweep-only sm90 configs (the lab, not the product): candidates timed beside the ladder
// (python -m benchmarks --configs NAME; python -m benchmarks.sweep builds them). The
// product's configs header includes this file only with -DW8A8_SWEEP_CONFIGS, after its own
// structs, so these reuse its templates. What each comparison measured is on the evidence
// page (docs/EVIDENCE.md); a candidate that wins moves into the product's table.
#pragma once

// (Included inside namespace w8a8::sm90.)

// The one-wave 384-row tile 144 wide. [evidence sm90.rung384-one-wave]
using Sm90Coop128x144x128_1x1 = Sm90Coop128xNx128<144, 1>;

// 256x128 cooperative, 1x2 cluster: a candidate for M > 512. [evidence sm90.m512-compute-tile]
struct Sm90Coop256x128x128_1x2 {
  using TileShape = Shape<_256, _128, _128>;
  using ClusterShape = Shape<_1, _2, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = false;
};

// The 128-token pair with 256-deep stages. [evidence sm90.pair-stage-depth]
using Sm90SwapABWarpSpecialized64x128x256_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<128, 256, 2>;
// The pairs at 384 and 512 rows. [evidence sm90.paired-token-tiles]
using Sm90SwapABWarpSpecialized64x192x128_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<192, 128, 2>;
using Sm90SwapABWarpSpecialized64x256x128_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<256, 128, 2>;
// The 16- to 64-token pairs on 128-deep stages, the 96-token pair on 256-deep ones.
// [evidence sm90.pair-stage-depth]
using Sm90SwapABWarpSpecialized64x16x128_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<16, 128, 8>;
using Sm90SwapABWarpSpecialized64x32x128_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<32, 128, 8>;
using Sm90SwapABWarpSpecialized64x48x128_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<48, 128, 4>;
using Sm90SwapABWarpSpecialized64x64x128_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<64, 128, 4>;
using Sm90SwapABWarpSpecialized64x96x256_1x2 = Sm90SwapABWarpSpecialized64xTxK_1x2<96, 256, 2>;
// Two CTAs per SM (TwoPerSm): the pairs of 16..192 tokens and the 1x1 tiles of 32 / 64 with
// the stages that fit half the shared memory. [evidence sm90.two-ctas-per-sm]
using Sm90SwapABWarpSpecialized64x16x256_1x2_2PerSm = Sm90SwapABWarpSpecialized64xTxK<16, 256, 4, 2, 5>;
using Sm90SwapABWarpSpecialized64x32x256_1x2_2PerSm = Sm90SwapABWarpSpecialized64xTxK<32, 256, 4, 2, 4>;
using Sm90SwapABWarpSpecialized64x48x256_1x2_2PerSm = Sm90SwapABWarpSpecialized64xTxK<48, 256, 2, 2, 3>;
using Sm90SwapABWarpSpecialized64x64x256_1x2_2PerSm = Sm90SwapABWarpSpecialized64xTxK<64, 256, 2, 2, 3>;
using Sm90SwapABWarpSpecialized64x96x128_1x2_2PerSm = Sm90SwapABWarpSpecialized64xTxK<96, 128, 4, 2, 5>;
using Sm90SwapABWarpSpecialized64x128x128_1x2_2PerSm = Sm90SwapABWarpSpecialized64xTxK<128, 128, 2, 2, 4>;
using Sm90SwapABWarpSpecialized64x160x128_1x2_2PerSm = Sm90SwapABWarpSpecialized64xTxK<160, 128, 2, 2, 3>;
using Sm90SwapABWarpSpecialized64x192x128_1x2_2PerSm = Sm90SwapABWarpSpecialized64xTxK<192, 128, 2, 2, 3>;
using Sm90SwapABWarpSpecialized64x32x256_1x1_2PerSm = Sm90SwapABWarpSpecialized64xTxK<32, 256, 4, 1, 4>;
using Sm90SwapABWarpSpecialized64x64x256_1x1_2PerSm = Sm90SwapABWarpSpecialized64xTxK<64, 256, 4, 1, 3>;
// One consumer warpgroup, no cluster, over 128 / 192 / 256 tokens.
// [evidence sm90.one-warpgroup-wide-tiles]
using Sm90SwapABWarpSpecialized64x128x128_1x1 = Sm90SwapABWarpSpecialized64xTxK<128, 128, 2, 1>;
using Sm90SwapABWarpSpecialized64x192x128_1x1 = Sm90SwapABWarpSpecialized64xTxK<192, 128, 2, 1>;
using Sm90SwapABWarpSpecialized64x256x128_1x1 = Sm90SwapABWarpSpecialized64xTxK<256, 128, 2, 1>;

// The swap-AB 128x96 tile without a cluster. [evidence sm90.cluster-multicast]
using Sm90SwapABCoop128x96x128_1x1 = Sm90SwapABCoop128xTx128<96, 1>;

// Swap-AB 64x16x256, non-persistent: a candidate for M <= 16.
struct Sm90SwapABWarpSpecialized64x16x256_1x1 {
  using TileShape = Shape<_64, _16, _256>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecialized;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = true;
};

// Candidates for M in (64, 128] on N > 4096: 256 weight rows per tile, a 2x2 cluster, and a
// swap-AB 128x128 tile in a 2x1 cluster. [evidence sm90.rung128-wide-tiles]
struct Sm90Pingpong64x256x128_2x1 {
  using TileShape = Shape<_64, _256, _128>;
  using ClusterShape = Shape<_2, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = false;
};
struct Sm90Pingpong64x128x128_2x2 {
  using TileShape = Shape<_64, _128, _128>;
  using ClusterShape = Shape<_2, _2, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = false;
};
struct Sm90SwapABCoop128x128x128_2x1 {
  using TileShape = Shape<_128, _128, _128>;
  using ClusterShape = Shape<_2, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = true;
};

// The M > 512 tile on CUTLASS's stream-K scheduler. [evidence sm90.stream-k-m193-512]
struct Sm90CoopStreamK128x256x128_2x1 {
  using TileShape = Shape<_128, _256, _128>;
  using ClusterShape = Shape<_2, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using TileScheduler = cutlass::gemm::StreamKScheduler;
  static constexpr bool kSwapAB = false;
};

// Appended to the product's W8A8_SM90_TABLE (same X / D columns; the options are the
// product table's named SchedulerOptions). Besides the structs above: the 256x128 and 128x256
// tiles rastered along M [evidence sm90.m512-compute-tile]; the swap-AB stream-K tiles with
// stream-K forced, or data-parallel [evidence sm90.split-k-off-under-auto]; the GEMV's and the
// skinny GEMM's other K splits [evidence sm90.gemv] [evidence sm90.skinny]; the 128x64 tile
// without a cluster [evidence sm90.cluster-multicast]; the 128x256 and 128x128 tiles with
// stream-K forced [evidence sm90.stream-k-m193-512].
#define W8A8_SM90_SWEEP_TABLE(X, D)                                                                                \
  X(kCoop256x128RasterM, "256x128x128_1x2_coop_swz8_rasterM", Sm90Coop256x128x128_1x2, kSwizzle8RasterM)         \
  X(kCoop128x256RasterM, "128x256x128_2x1_coop_swz8_rasterM", Sm90Coop128x256x128_2x1, kSwizzle8RasterM)         \
  X(kSwap128x16ForcedStreamK, "swap_128x16x128_1x1_coop_streamk_forced", Sm90SwapABCoopStreamK128x16x128_1x1,    \
    kForcedStreamK)                                                                                              \
  X(kSwap128x64ForcedStreamK, "swap_128x64x128_1x1_coop_streamk_forced", Sm90SwapABCoopStreamK128x64x128_1x1,    \
    kForcedStreamK)                                                                                              \
  D(kGemvSplit2, "gemv_dp4a_ksplit2", gemv_run, 2)                                                                \
  D(kGemvSplit4, "gemv_dp4a_ksplit4", gemv_run, 4)                                                                \
  D(kGemvSplit8, "gemv_dp4a_ksplit8", gemv_run, 8)                                                                \
  D(kSkinnySplit1, "skinny_mma_ksplit1", skinny_run, 1)                                                           \
  D(kSkinnySplit2, "skinny_mma_ksplit2", skinny_run, 2)                                                           \
  D(kSkinnySplit4, "skinny_mma_ksplit4", skinny_run, 4)                                                           \
  X(kSwap64x16WS, "swap_64x16x256_1x1_ws", Sm90SwapABWarpSpecialized64x16x256_1x1, kDefault)                      \
  X(kSwap128x16DataParallel, "swap_128x16x128_1x1_coop_dataparallel", Sm90SwapABCoopStreamK128x16x128_1x1,        \
    kDataParallel)                                                                                               \
  X(kSwap128x96NoCluster, "swap_128x96x128_1x1_coop", Sm90SwapABCoop128x96x128_1x1, kDefault)                     \
  X(kSwap128x64DataParallel, "swap_128x64x128_1x1_coop_dataparallel", Sm90SwapABCoopStreamK128x64x128_1x1,        \
    kDataParallel)                                                                                               \
  X(kCoop128x256StreamK, "128x256x128_2x1_coop_streamk", Sm90CoopStreamK128x256x128_2x1, kDefault)                \
  X(kCoop128x256ForcedStreamK, "128x256x128_2x1_coop_streamk_forced", Sm90CoopStreamK128x256x128_2x1,             \
    kForcedStreamK)                                                                                              \
  X(kCoop128x128ForcedStreamK, "128x128x128_1x1_coop_streamk_forced", Sm90CoopStreamK128x128x128_1x1,             \
    kForcedStreamK)                                                                                              \
  X(kPingpong64x256, "64x256x128_2x1_pingpong", Sm90Pingpong64x256x128_2x1, kDefault)                             \
  X(kPingpong64x128Cluster2x2, "64x128x128_2x2_pingpong", Sm90Pingpong64x128x128_2x2, kDefault)                   \
  X(kSwap128x128Cluster, "swap_128x128x128_2x1_coop", Sm90SwapABCoop128x128x128_2x1, kDefault)                    \
  X(kSwap64x128K256Cluster, "swap_64x128x256_1x2_ws", Sm90SwapABWarpSpecialized64x128x256_1x2, kDefault)          \
  X(kSwap64x192Cluster, "swap_64x192x128_1x2_ws", Sm90SwapABWarpSpecialized64x192x128_1x2, kDefault)              \
  X(kSwap64x256Cluster, "swap_64x256x128_1x2_ws", Sm90SwapABWarpSpecialized64x256x128_1x2, kDefault)              \
  X(kSwap64x16K128Cluster, "swap_64x16x128_1x2_ws", Sm90SwapABWarpSpecialized64x16x128_1x2, kDefault)             \
  X(kSwap64x32K128Cluster, "swap_64x32x128_1x2_ws", Sm90SwapABWarpSpecialized64x32x128_1x2, kDefault)             \
  X(kSwap64x48K128Cluster, "swap_64x48x128_1x2_ws", Sm90SwapABWarpSpecialized64x48x128_1x2, kDefault)             \
  X(kSwap64x64K128Cluster, "swap_64x64x128_1x2_ws", Sm90SwapABWarpSpecialized64x64x128_1x2, kDefault)             \
  X(kSwap64x96K256Cluster, "swap_64x96x256_1x2_ws", Sm90SwapABWarpSpecialized64x96x256_1x2, kDefault)             \
  X(kSwap64x128WS, "swap_64x128x128_1x1_ws", Sm90SwapABWarpSpecialized64x128x128_1x1, kDefault)                   \
  X(kSwap64x192WS, "swap_64x192x128_1x1_ws", Sm90SwapABWarpSpecialized64x192x128_1x1, kDefault)                   \
  X(kSwap64x256WS, "swap_64x256x128_1x1_ws", Sm90SwapABWarpSpecialized64x256x128_1x1, kDefault)                   \
  X(kCoop128x144, "128x144x128_1x1_coop", Sm90Coop128x144x128_1x1, kDefault)                                      \
  X(kSwap64x16Cluster2PerSm, "swap_64x16x256_1x2_ws_2cta", Sm90SwapABWarpSpecialized64x16x256_1x2_2PerSm,         \
    kDefault)                                                                                                    \
  X(kSwap64x32Cluster2PerSm, "swap_64x32x256_1x2_ws_2cta", Sm90SwapABWarpSpecialized64x32x256_1x2_2PerSm,         \
    kDefault)                                                                                                    \
  X(kSwap64x48Cluster2PerSm, "swap_64x48x256_1x2_ws_2cta", Sm90SwapABWarpSpecialized64x48x256_1x2_2PerSm,         \
    kDefault)                                                                                                    \
  X(kSwap64x64Cluster2PerSm, "swap_64x64x256_1x2_ws_2cta", Sm90SwapABWarpSpecialized64x64x256_1x2_2PerSm,         \
    kDefault)                                                                                                    \
  X(kSwap64x96Cluster2PerSm, "swap_64x96x128_1x2_ws_2cta", Sm90SwapABWarpSpecialized64x96x128_1x2_2PerSm,         \
    kDefault)                                                                                                    \
  X(kSwap64x128Cluster2PerSm, "swap_64x128x128_1x2_ws_2cta", Sm90SwapABWarpSpecialized64x128x128_1x2_2PerSm,      \
    kDefault)                                                                                                    \
  X(kSwap64x160Cluster2PerSm, "swap_64x160x128_1x2_ws_2cta", Sm90SwapABWarpSpecialized64x160x128_1x2_2PerSm,      \
    kDefault)                                                                                                    \
  X(kSwap64x192Cluster2PerSm, "swap_64x192x128_1x2_ws_2cta", Sm90SwapABWarpSpecialized64x192x128_1x2_2PerSm,      \
    kDefault)                                                                                                    \
  X(kSwap64x32TwoPerSm, "swap_64x32x256_1x1_ws_2cta", Sm90SwapABWarpSpecialized64x32x256_1x1_2PerSm, kDefault)    \
  X(kSwap64x64TwoPerSm, "swap_64x64x256_1x1_ws_2cta", Sm90SwapABWarpSpecialized64x64x256_1x1_2PerSm, kDefault)
