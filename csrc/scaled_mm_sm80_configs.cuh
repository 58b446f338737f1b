// Tile configs of the sm80 int8 scaled matmul (mma.sync m16n8k32, cp.async
// multistage mainloop, CUTLASS 2.x), the config ids and the M ladder.
//
// Shared memory: every config fits the 99 KB (101376 B) a block may opt into
// on sm86 and sm89 (sm80 allows 163 KB, sm90 227 KB), so one table serves
// every 8.x device and the forced path on sm90; ScaledMmSm80Gemm asserts it.
// A stage holds (tile M + tile N) x tile K int8 bytes.
#pragma once

#include <cstdint>

#include <cutlass/gemm/gemm.h>
#include <cutlass/numeric_types.h>

#include "scaled_mm_sm80.h"

typedef struct CUstream_st* cudaStream_t;

namespace w8a8::sm80 {

constexpr int kMaxSharedMemoryBytes = 101376;  // sm86 / sm89 opt-in limit per block

// M in [1, 16] (decode): 16-row tiles waste no rows on a single token; 64 wide
// so that N = 4096 still launches 64 CTAs. Two warps split the 128-deep K tile.
// 5 stages x 10 KB = 50 KB.
struct Sm80Int8M16 {
  using TileShape = cutlass::gemm::GemmShape<16, 64, 128>;
  using WarpShape = cutlass::gemm::GemmShape<16, 64, 64>;
  static constexpr int kStages = 5;
};

// M in (16, 32]: one 32-row tile, otherwise as M16. 5 x 12 KB = 60 KB.
struct Sm80Int8M32 {
  using TileShape = cutlass::gemm::GemmShape<32, 64, 128>;
  using WarpShape = cutlass::gemm::GemmShape<32, 64, 64>;
  static constexpr int kStages = 5;
};

// M in (32, 64]: 64 x 128 tiles, four warps (2 along N, 2 along K).
// 4 stages x 24 KB = 96 KB (5 stages would need 120 KB, over the sm86/89 limit).
struct Sm80Int8M64 {
  using TileShape = cutlass::gemm::GemmShape<64, 128, 128>;
  using WarpShape = cutlass::gemm::GemmShape<64, 64, 64>;
  static constexpr int kStages = 4;
};

// M in (64, 128] and mid M: 128 x 128 tiles, four 64 x 64 warps.
// 5 stages x 16 KB = 80 KB.
struct Sm80Int8M128 {
  using TileShape = cutlass::gemm::GemmShape<128, 128, 64>;
  using WarpShape = cutlass::gemm::GemmShape<64, 64, 64>;
  static constexpr int kStages = 5;
};

// Large M: 128 x 256 tiles, eight 64 x 64 warps: the most MACs per byte of
// shared memory read of the table. 4 stages x 24 KB = 96 KB.
struct Sm80Int8Large {
  using TileShape = cutlass::gemm::GemmShape<128, 256, 64>;
  using WarpShape = cutlass::gemm::GemmShape<64, 64, 64>;
  static constexpr int kStages = 4;
};

// M in (256, 384] on narrow N: 96-row tiles keep three M tiles where 64-row
// ones would need five (a second wave on 132 SMs at N = 4096) and 128-row ones
// would pay for 128 rows; four 48 x 64 warps. 5 stages x 14 KB = 70 KB.
struct Sm80Int8M96 {
  using TileShape = cutlass::gemm::GemmShape<96, 128, 64>;
  using WarpShape = cutlass::gemm::GemmShape<48, 64, 64>;
  static constexpr int kStages = 5;
};

// Between the 64- and 96-row tiles: 80 rows keep four M tiles up to M = 320
// and five up to 400, where 64-row tiles need a further wave. Four 80 x 32
// warps side by side along N, each with the whole 128-deep K tile (80 = five
// m16 rows; 80 x 64 warps would hold 160 accumulator registers).
// 3 stages x 26 KB = 78 KB.
struct Sm80Int8M80 {
  using TileShape = cutlass::gemm::GemmShape<80, 128, 128>;
  using WarpShape = cutlass::gemm::GemmShape<80, 32, 128>;
  static constexpr int kStages = 3;
};

// Index of each config in the table of scaled_mm_sm80.cu (the config_id of the op).
enum ConfigId : int {
  kM16 = 0,
  kM32 = 1,
  kM64 = 2,
  kM128 = 3,
  kLarge = 4,
  kM96 = 5,
  kM80 = 6,
  kNumConfigs = 7
};

// The ladder: the config a call with config_id = -1 runs. Read from the sweep
// of every config at every M = 1..512 on the H100 (forced path; rows in
// benchmarks/results/sm80_sweep_h100.json, method in docs/SM80.md): each step
// takes the fastest config of its M range on the Llama-3-8B projections, and
// the ranges end where a config's tile count crosses a wave of the SMs.
//   narrow N (a row of 128-wide tiles leaves SMs idle: N = 4096, 6144):
//     M <= 32: 16x64 (11-14 us at 4096 x 4096, every SM busy on 64-wide tiles)
//     <= 128: 32x64; <= 256: 64x128 (4 x 32 tiles = one wave at N = 4096);
//     <= 320: 80x128 (four M tiles); <= 384: 96x128; then 128x128.
//   wide N (N / 128 >= SMs, e.g. 28672): 64x128 to M = 64, 128x256 to 128
//     (112 tiles, one wave), 96x128 to 192, 128x128 to 256, 80x128 to 320,
//     128x256 to 384, then 128x128.
//   M > 512: 128x256 once it fills four waves (8192^3: 896 TOP/s against
//     844 for 128x128), 128x128 below that.
inline ConfigId select_config(int64_t m, int64_t n, int64_t k, int sm_count) {
  (void)k;
  if (m <= 32) return kM16;
  if (m > 512) {
    const int64_t large_tiles = ((m + 127) / 128) * ((n + 255) / 256);
    return large_tiles >= 4 * int64_t(sm_count) ? kLarge : kM128;
  }
  const bool wide_n = (n + 127) / 128 >= sm_count;
  if (!wide_n) {
    if (m <= 128) return kM32;
    if (m <= 256) return kM64;
    if (m <= 320) return kM80;
    if (m <= 384) return kM96;
    return kM128;
  }
  if (m <= 64) return kM64;
  if (m <= 128) return kLarge;
  if (m <= 192) return kM96;
  if (m <= 256) return kM128;
  if (m <= 320) return kM80;
  if (m <= 384) return kLarge;
  return kM128;
}

// Defined in scaled_mm_sm80_kernel.cuh, instantiated once per config and
// output type in scaled_mm_sm80_<config>.cu.
template <class Config, class ElementOut>
struct ScaledMmSm80Launcher {
  static size_t workspace_size(const ScaledMmSm80Params& params);
  static void run(const ScaledMmSm80Params& params, void* workspace, cudaStream_t stream);
};

}  // namespace w8a8::sm80
