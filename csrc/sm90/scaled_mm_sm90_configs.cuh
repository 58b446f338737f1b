// Tile configs of the sm90 int8 scaled matmul, the config ids and the
// dispatch ladder on M.
//
// A config is a compile-time struct (one CUTLASS instantiation per config and
// output dtype, explicitly instantiated in scaled_mm_sm90_<config>.cu). An
// entry of the config table (scaled_mm_sm90.cu) pairs a config with run-time
// tile-scheduler options (swizzle, raster order, stream-K decomposition), so
// scheduler variants cost no extra compilation. The op's config_id indexes
// that table; -1 runs the ladder select_config below.
//
// Figures quoted below are from /work/shared/HOPPER-INT8-FACTS.md (our H100,
// random int8 data, bf16 out).
#pragma once

#include <cstdint>

#include <cute/layout.hpp>
#include <cutlass/bfloat16.h>
#include <cutlass/epilogue/dispatch_policy.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>
#include <cutlass/half.h>

#include "scaled_mm_sm90.h"

namespace w8a8::sm90 {

using cute::Shape;
using cute::_1;
using cute::_2;
using cute::_16;
using cute::_64;
using cute::_128;
using cute::_256;

// ---------------------------------------------------------------------------
// Configs. Fields: TileShape (CTA tile M x N x K of the GEMM as CUTLASS sees
// it, i.e. after the swap for kSwapAB), ClusterShape, KernelSchedule,
// EpilogueSchedule, TileScheduler, kSwapAB.
//
// Swap-AB (decode): out^T = b @ a^T is computed instead, so the weight rows
// fill the 128-row wgmma M side and the few tokens sit on the wgmma N side
// (16..64 wide) instead of being padded to a 64-row tile. At these M the GEMM
// streams the weights (memory-bound), so the tiles are cooperative (two
// consumer warpgroups, 128 weight rows) with the stream-K scheduler: a model
// with N = 4096 has only 32 tiles of 128 rows for 132 SMs, and stream-K /
// split-K spreads the K loop over the idle SMs.
// ---------------------------------------------------------------------------

// Serves M <= 64 in the ladder (data-parallel, config 6; see select_config); under
// scheduler "auto" M = 17..64, the GEMV taking 1..4 and the skinny GEMM 5..16
// (GemvPolicy, SkinnyPolicy). Decode.
// Swap-AB, 16 token columns (the smallest tile that
// covers a 16-row batch; wgmma N = 16). smem per stage 16 KiB + 2 KiB.
struct Sm90Int8SwapN16 {
  using TileShape = Shape<_128, _16, _128>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using TileScheduler = cutlass::gemm::StreamKScheduler;
  static constexpr bool kSwapAB = true;
};

// Serves M in (128, 256] with N <= 4096 (config 7). Swap-AB, 64 token columns; still
// memory-bound (128x64x128 wgmma per 16 KiB of weights), so one tile width
// serves 17..64 tokens. smem per stage 16 KiB + 8 KiB.
struct Sm90Int8SwapN64 {
  using TileShape = Shape<_128, _64, _128>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using TileScheduler = cutlass::gemm::StreamKScheduler;
  static constexpr bool kSwapAB = true;
};

// For M in (64, 128]: 64-row tiles, 2 M tiles = one 2x1 cluster, so each
// weight tile is multicast to both (weights dominate the traffic here).
// Pingpong overlaps one warpgroup's epilogue with the other's mainloop.
struct Sm90Int8M128 {
  using TileShape = Shape<_64, _128, _128>;
  using ClusterShape = Shape<_2, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = false;
};

// Serves M in (128, 512] (config 3; N > 4096 below 256): 128x128 pingpong, 2x1 cluster (weights multicast to
// the 2 M tiles). The facts table shows 2x1 pingpong losing at M = 8192 with
// huge N (928 TOP/s) but that is the large-M regime served below.
struct Sm90Int8M256 {
  using TileShape = Shape<_128, _128, _128>;
  using ClusterShape = Shape<_2, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = false;
};

// Serves M > 512: compute-bound. 128x256x128 cooperative, 2x1 cluster: 1360 /
// 1386 / 1340 TOP/s on the three facts shapes, best-in-class on the big-N
// shapes (1451 with swizzle 8, raster along N).
struct Sm90Int8Large128x256 {
  using TileShape = Shape<_128, _256, _128>;
  using ClusterShape = Shape<_2, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = false;
};

// Alternative for M > 256 (benchmark via config_id): 256x128x128 cooperative,
// 1x2 cluster: best on 8192^3 (1405; 1434 with swizzle 8, raster along M),
// within 3% of the above elsewhere.
struct Sm90Int8Large256x128 {
  using TileShape = Shape<_256, _128, _128>;
  using ClusterShape = Shape<_1, _2, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using TileScheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kSwapAB = false;
};

// Serves split_k > 1 / scheduler "streamk" requests for M > 256 (config 11;
// the swap-AB configs above serve them below that, and the ladder's picks at
// these M use the persistent scheduler, which cannot split K). 128x128
// cooperative: the stream-K scheduler needs the cooperative kernel. Never
// picked by the heuristic: at M > 256 the tile grid already fills the SMs.
struct Sm90Int8Coop128x128StreamK {
  using TileShape = Shape<_128, _128, _128>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using TileScheduler = cutlass::gemm::StreamKScheduler;
  static constexpr bool kSwapAB = false;
};

// ---------------------------------------------------------------------------
// Run-time scheduler options of a table entry.
// ---------------------------------------------------------------------------
enum class Raster : int { kHeuristic, kAlongM, kAlongN };  // CUTLASS RasterOrderOptions
enum class Decomposition : int { kHeuristic, kDataParallel, kSplitK, kStreamK };  // stream-K scheduler only

struct SchedulerOptions {
  // Upper bound on the tile-scheduler swizzle (1, 2, 4, 8). The launcher
  // lowers it when the padding it implies would waste more than 1/32 of the
  // tiles (CUTLASS pads the tile grid to a multiple of swizzle x cluster and
  // runs the padded tiles).
  int max_swizzle;
  Raster raster;
  Decomposition decomposition;  // ignored by the persistent scheduler
  int splits;                   // for kSplitK (and kHeuristic when > 1)
};

// The launcher each .cu instantiates (defined in scaled_mm_sm90_kernel.cuh).
// ElementOut: cutlass::bfloat16_t or cutlass::half_t.
template <class Config, class ElementOut>
struct ScaledMmSm90Launcher {
  static size_t workspace_size(const ScaledMmSm90Params& params, const SchedulerOptions& options);
  static void run(const ScaledMmSm90Params& params, const SchedulerOptions& options, void* workspace,
                  cudaStream_t stream);
};

// ---------------------------------------------------------------------------
// Config ids: the index of an entry of the table in scaled_mm_sm90.cu (the
// table pairs a config with its SchedulerOptions; it lives in that one file
// because taking the launchers' addresses where their definitions are visible
// would instantiate every config in every .cu). Ids are the benchmarking
// interface (the op's config_id): append, never renumber.
// ---------------------------------------------------------------------------
enum ConfigId : int {
  kSwapN16StreamK = 0,       // Sm90Int8SwapN16, stream-K heuristic
  kSwapN64StreamK = 1,       // Sm90Int8SwapN64, stream-K heuristic
  kM128Pingpong = 2,         // Sm90Int8M128
  kM256Pingpong = 3,         // Sm90Int8M256
  kLarge128x256 = 4,         // Sm90Int8Large128x256, swizzle 8, raster along N
  kLarge256x128 = 5,         // Sm90Int8Large256x128, swizzle 8, raster along M
  kSwapN16DataParallel = 6,  // Sm90Int8SwapN16, no K split
  kSwapN64DataParallel = 7,  // Sm90Int8SwapN64, no K split
  kLarge128x256RasterM = 8,  // Sm90Int8Large128x256, swizzle 8, raster along M
  kSwapN16ForceStreamK = 9,  // Sm90Int8SwapN16, stream-K even where the heuristic keeps whole tiles
  kSwapN64ForceStreamK = 10, // Sm90Int8SwapN64, same
  kCoop128x128StreamK = 11,  // Sm90Int8Coop128x128StreamK, for split / stream-K requests at M > 256
  kGemvSplit1 = 12,          // the dp4a GEMV (scaled_mm_gemv.h), one warp per weight row
  kGemvSplit2 = 13,          // the GEMV, 2 warps per weight row (K split in the CTA)
  kGemvSplit4 = 14,          // the GEMV, 4 warps per weight row
  kGemvSplit8 = 15,          // the GEMV, 8 warps per weight row
  kSkinnySplit1 = 16,        // the mma.sync skinny GEMM (scaled_mm_skinny.h), one warp per 16-row group
  kSkinnySplit2 = 17,        // the skinny GEMM, 2 warps per row group (K split in the CTA)
  kSkinnySplit4 = 18,        // the skinny GEMM, 4 warps per row group
  kSkinnySplit8 = 19,        // the skinny GEMM, 8 warps per row group
  kNumConfigs = 20
};

// The ladder on next_pow2(M) (and N in one bucket), set from the config sweep
// of docs/TUNING.md (H100, CUDA-graph replay, all 8 grid shapes; "wins k/8"
// counts the shapes where the pick was fastest or within 3% of it):
//   M <= 64:  swap-AB 128x16, data-parallel. Fastest on 6/8 shapes at M = 1
//             and 16, and 5-35% ahead of the stream-K variant (the stream-K
//             fix-up and its workspace memset cost more than the idle SMs).
//             At M = 64 the 128x64 swap tile is 3% faster on big N but 30%
//             slower on 4096 x 4096, so the 16-wide tile serves all of M <= 64.
//   M <= 128: 64x128 pingpong, 2x1 cluster: best or within 1% on 8/8.
//   M <= 256: N <= 4096 (32 weight tiles of 128 rows): swap-AB 128x64 is
//             25-30% faster than 128x128 tiles (16 tiles for 132 SMs);
//             larger N: 128x128 pingpong, best on 4/5 of those shapes.
//   M <= 512: 128x128 pingpong: best on 5/8, up to 40% ahead of 128x256
//             (wave quantization: 4 x N/256 tiles leave SMs idle); 7-9%
//             behind it on N = 57344 and K = 28672.
//   M > 512:  128x256 cooperative, 2x1 cluster, swizzle 8, raster along N.
inline int select_config(int64_t m, int64_t n) {
  int64_t m_pow2 = 1;
  while (m_pow2 < m) m_pow2 <<= 1;
  if (m_pow2 <= 64) return kSwapN16DataParallel;
  if (m_pow2 <= 128) return kM128Pingpong;
  if (m_pow2 <= 256) return n <= 4096 ? kSwapN64DataParallel : kM256Pingpong;
  if (m_pow2 <= 512) return kM256Pingpong;
  return kLarge128x256;
}

// The stream-K-scheduler config that serves an explicit split_k > 1 or
// scheduler "streamk" at this M: the ladder's own pick where it already runs
// the stream-K scheduler (M <= 64), else the swap-AB 128x64 tile (M <= 256:
// few token columns, so the weight rows still fill the 128-row side), else
// 128x128 cooperative.
inline int split_capable_config(int64_t m) {
  if (m <= 64) return kSwapN16StreamK;
  if (m <= 256) return kSwapN64StreamK;
  return kCoop128x128StreamK;
}

// ---------------------------------------------------------------------------
// No CUTLASS split-K under scheduler "auto". The swap-AB tile gained from a
// K split only at M <= 16 on long-K, few-tile shapes (4096x14336: 1.13-1.20x,
// docs/TUNING.md "Split-K", benchmarks/results/split_k_sweep_h100.json) and
// lost everywhere else (0.79-0.97x); the skinny GEMM below now serves those
// M and is faster than either (4096x14336, M = 16: 26.2 us against 31.8 split
// and 35.8 data-parallel). Explicit split_k / scheduler requests still run
// the stream-K-scheduler configs (split_capable_config).
// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// The decode GEMV (scaled_mm_gemv.h; not a CUTLASS kernel): at a few tokens the
// GEMM streams its weights and nothing else, and the swap-AB tile pays for
// TMA, wgmma on 16 token columns of which 1..4 are real, and a tile grid of
// N / 128 CTAs (32 for N = 4096: a quarter of the SMs read the weights).
// ---------------------------------------------------------------------------
// Measured on the H100 (docs/TUNING.md "Decode GEMV", benchmarks/results/scaled_mm_gemvsweep_h100.csv,
// CUDA-graph replays, 8 shapes from 4096x4096 to 57344x8192, M in {1, 2, 3, 4, 8, 16}):
//   * M <= 4: the GEMV (one warp per row) beats the swap-AB 128x16 tile on every shape, most on
//     small N x K (4096x4096 at M = 1: 8.0 vs 15.0 us; 4096x14336: 22.8 vs 35.2 us) and by 0-8%
//     on the largest (57344x8192: 153.6 vs 167.3 us, 3.07 TB/s of int8 weights).
//   * M = 8: it wins on 2 of 8 shapes and loses up to 30% elsewhere (four token tiles re-read
//     the weights, 8192x28672: 104.3 vs 87.6 us); M = 16: 1.5-2.3x slower. So it serves M <= 4.
//   * Splitting K over 2, 4 or 8 warps per row is never more than 3% ahead of one warp (6144x4096
//     and 57344x8192 at M = 1 by 2-3%) and up to 4x behind at M = 3 and 4 (fewer rows per CTA,
//     the same activation reads): one warp per row everywhere; the split entries stay in the
//     table for benchmarking.
struct GemvPolicy {
  // Tokens served by the GEMV under scheduler "auto" (explicit split_k / scheduler
  // requests keep the CUTLASS ladder).
  static constexpr int64_t kMaxM = 4;
  static constexpr int kConfig = kGemvSplit1;
};

// ---------------------------------------------------------------------------
// The skinny GEMM (scaled_mm_skinny.h; mma.sync, not CUTLASS): past the GEMV's
// tokens the weights are still the whole cost, and the swap-AB tile still
// launches N / 128 CTAs. A warp per 16 weight rows, K split over k_split warps
// of a CTA so that the grid has enough warps to keep HBM busy.
// ---------------------------------------------------------------------------
// Measured on the H100 (docs/TUNING.md "Skinny GEMM", benchmarks/results/scaled_mm_skinnysweep_h100.csv,
// CUDA-graph replays, the 8 shapes of the GEMV sweep, M in {4, 5, 8, 12, 16, 24, 32}):
//   * M = 5..16: the best K split beats the swap-AB 128x16 tile (id 6) by 1.30-1.52x on
//     4096x4096, 1.37-1.45x on 4096x14336, 1.20-1.22x on 8192x8192, 1.17-1.20x on 8192x28672,
//     1.08-1.15x on 12288x4096 and 6144x4096, and ties it (0.99-1.06x) on 28672x4096 and
//     57344x8192. M = 24 and 32: 0.82-1.03x (the token rows are re-read per 16-token tile and
//     every warp holds two halves): so M <= 16.
//   * K split 8 is best or within 3% on 6 of 8 shapes; split 4 is 2-10% ahead on N = 8192
//     (8192x8192, 8192x28672), where split 8 launches 512 CTAs: 1.9 waves of the 2 CTAs per SM
//     the kernel's registers allow, the second wave nearly full of idle tail. Split 4 is 256 CTAs,
//     one wave. Rule: split 8, unless its grid ends in a second, partial wave (more than one and
//     at most two waves), then split 4 (6144x4096: 1.45 waves, split 4 ties split 8).
//   * M <= 4 stays with the GEMV: the skinny GEMM ties it on N = 4096 and is 2-5% slower elsewhere.
struct SkinnyPolicy {
  // Tokens served under scheduler "auto", after the GEMV's.
  static constexpr int64_t kMaxM = 16;
  // CTAs of the skinny kernel resident per SM (__launch_bounds__(256, 2) in scaled_mm_skinny.cu).
  static constexpr int64_t kCtasPerSm = 2;

  static constexpr int config(int64_t n, int sm_count) {
    const int64_t ctas_split8 = (n + 15) / 16;  // one 16-row group per CTA
    const int64_t wave = kCtasPerSm * sm_count;
    return ctas_split8 > wave && ctas_split8 <= 2 * wave ? kSkinnySplit4 : kSkinnySplit8;
  }
};

// The K split of a decode kernel's config id (the GEMV's or the skinny GEMM's).
constexpr int decode_kernel_splits(int config_id) {
  switch (config_id) {
    case kGemvSplit2: case kSkinnySplit2: return 2;
    case kGemvSplit4: case kSkinnySplit4: return 4;
    case kGemvSplit8: case kSkinnySplit8: return 8;
    default: return 1;
  }
}

// The config scheduler "auto" runs, with the scheduler options of its table
// entry: the GEMV for a few tokens, the skinny GEMM for a few more (each with
// its K split inside the CTA), else the ladder's config, data-parallel.
inline int plan_auto(int64_t m, int64_t n, int sm_count) {
  if (m <= GemvPolicy::kMaxM) return GemvPolicy::kConfig;
  if (m <= SkinnyPolicy::kMaxM) return SkinnyPolicy::config(n, sm_count);
  return select_config(m, n);
}

}  // namespace w8a8::sm90
