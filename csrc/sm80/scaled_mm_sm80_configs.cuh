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

#include "sm80/scaled_mm_sm80.h"

typedef struct CUstream_st* cudaStream_t;

namespace w8a8::sm80 {

constexpr int kMaxSharedMemoryBytes = 101376;  // sm86 / sm89 opt-in limit per block

// Struct names: Sm80Tile<tile M x N x K>_W<warp tile M x N x K>_S<stages>.
// "Narrow N" / "wide N" are the ladder's two branches (select_config below).

// The ladder's tile for M <= 32 (every N): 16-row tiles waste little on a few
// tokens; 64 wide so that N = 4096 still launches 64 CTAs per 16 rows (every SM
// busy). Two warps split the 128-deep K tile. 5 stages x 10 KB = 50 KB.
struct Sm80Tile16x64x128_W16x64x64_S5 {
  using TileShape = cutlass::gemm::GemmShape<16, 64, 128>;
  using WarpShape = cutlass::gemm::GemmShape<16, 64, 64>;
  static constexpr int kStages = 5;
};

// The ladder's tile for M in (32, 128] on narrow N: 32-row tiles, otherwise as
// the 16-row one. 5 x 12 KB = 60 KB.
struct Sm80Tile32x64x128_W32x64x64_S5 {
  using TileShape = cutlass::gemm::GemmShape<32, 64, 128>;
  using WarpShape = cutlass::gemm::GemmShape<32, 64, 64>;
  static constexpr int kStages = 5;
};

// The ladder's tile for M in (128, 256] on narrow N (4 x 32 tiles = one wave
// at N = 4096) and M in (32, 64] on wide N: four warps (2 along N, 2 along K).
// 4 stages x 24 KB = 96 KB (5 stages would need 120 KB, over the sm86/89 limit).
struct Sm80Tile64x128x128_W64x64x64_S4 {
  using TileShape = cutlass::gemm::GemmShape<64, 128, 128>;
  using WarpShape = cutlass::gemm::GemmShape<64, 64, 64>;
  static constexpr int kStages = 4;
};

// The ladder's tile for M in (384, 512] (both branches), (192, 256] on wide N,
// and M > 512 where the 128 x 256 tile would fill fewer than four waves: four
// 64 x 64 warps. 5 stages x 16 KB = 80 KB.
struct Sm80Tile128x128x64_W64x64x64_S5 {
  using TileShape = cutlass::gemm::GemmShape<128, 128, 64>;
  using WarpShape = cutlass::gemm::GemmShape<64, 64, 64>;
  static constexpr int kStages = 5;
};

// The ladder's tile for M > 512 once it fills four waves, and on wide N for M in
// (64, 128] (112 tiles at N = 28672: one wave) and (320, 384]: eight 64 x 64
// warps, the most MACs per byte of shared memory read of the table. 4 stages x
// 24 KB = 96 KB.
struct Sm80Tile128x256x64_W64x64x64_S4 {
  using TileShape = cutlass::gemm::GemmShape<128, 256, 64>;
  using WarpShape = cutlass::gemm::GemmShape<64, 64, 64>;
  static constexpr int kStages = 4;
};

// The ladder's tile for M in (320, 384] on narrow N and (128, 192] on wide N:
// 96-row tiles keep four M tiles up to M = 384 (128 CTAs at N = 4096: one wave
// on 132 SMs) where 64-row ones need six (a second wave) and 128-row ones pay
// for 128 rows; four 48 x 64 warps. 5 stages x 14 KB = 70 KB.
struct Sm80Tile96x128x64_W48x64x64_S5 {
  using TileShape = cutlass::gemm::GemmShape<96, 128, 64>;
  using WarpShape = cutlass::gemm::GemmShape<48, 64, 64>;
  static constexpr int kStages = 5;
};

// The ladder's tile for M in (256, 320] (both branches; on narrow N where the
// split-K tile below does not split): 80 rows keep four M tiles up to M = 320,
// where 64-row tiles need a fifth (a further wave at N = 4096). Four 80 x 32 warps side by side along N,
// each with the whole 128-deep K tile (80 = five m16 rows; 80 x 64 warps would
// hold 160 accumulator registers). 3 stages x 26 KB = 78 KB.
struct Sm80Tile80x128x128_W80x32x128_S3 {
  using TileShape = cutlass::gemm::GemmShape<80, 128, 128>;
  using WarpShape = cutlass::gemm::GemmShape<80, 32, 128>;
  static constexpr int kStages = 3;
};

// What the ladder knows of the device.
struct Sm80Device {
  int sm_count = 0;
  int shared_memory_per_sm = 0;  // bytes; 0: unknown, and K is never split
};

// Split-K form of a data-parallel config: the same tile and mainloop, with K
// cut into split_k_slices() ranges whose int32 partial sums a second kernel
// adds and dequantizes (scaled_mm_sm80_split_k.cuh).
template <class DataParallelConfig>
struct SplitK : DataParallelConfig {};

// Shared memory of a config's mainloop: (tile M + tile N) x tile K int8 per stage.
template <class Config>
constexpr int config_shared_bytes() {
  return (Config::TileShape::kM + Config::TileShape::kN) * Config::TileShape::kK * Config::kStages;
}

// The ladder's tile for M in (256, 288] on narrow N where split_k_slices
// splits: with a long K just past a wave (4096 x 14336 at M = 257: three 96-row
// M tiles, 96 CTAs on 132 SMs) four K ranges make 384 CTAs, at most three per
// SM, all resident at once. [evidence sm80.split-k]
using Sm80Tile96x128x64_W48x64x64_S5_SplitK = SplitK<Sm80Tile96x128x64_W48x64x64_S5>;

// The split-K kernel is compiled for kSplitKCtasPerSm resident CTAs (launch
// bounds: 65536 registers / (3 x 128 threads) = at most 170 per thread, where
// the unbounded 96 x 128 tile takes 186). Three is what the 96-tile case
// needs (ceil(384 / 132) = 3) and what fits the 227 KB of an sm90 SM
// (3 x 70 KB); an A100 (164 KB) holds two, sm86 / sm89 (100 KB) one.
constexpr int kSplitKCtasPerSm = 3;

template <class Config>
constexpr int split_k_resident_ctas(const Sm80Device& device) {
  const int by_shared_memory = device.shared_memory_per_sm / config_shared_bytes<Config>();
  return by_shared_memory < kSplitKCtasPerSm ? by_shared_memory : kSplitKCtasPerSm;
}

// The number of K ranges of a split-K config, 1 where splitting does not pay.
// Ranges are tried while they stay >= kSplitKMinSliceK deep, and a count
// qualifies when its CTAs
//   * are all resident at once (tiles x slices <= SMs x resident CTAs): past
//     one resident round, each SM that frees up takes a whole new set of CTAs
//     and some end up running twice the others' share;
//   * fill at least kSplitKMinResidentFill of those places: bounded to 170
//     registers, the kernel alone on an SM is much slower than the unbounded
//     data-parallel one, and catches up only with three CTAs per SM to hide
//     latency;
//   * cut the busiest SM's load, ceil(tiles x slices / SMs) / slices in
//     unsplit tiles, to at most kSplitKMaxLoadRatio of the unsplit grid's: the
//     partial sums and the second kernel cost 3-4 us.
// [evidence sm80.split-k]
// kSplitKMinSliceK = 2048: each range adds a slab of M x N int32 (8 bytes per
// output written and read back) to 2 x range MACs per output; at 2048 that
// traffic is ~10% of the GEMM's time at the mma.sync rate.
constexpr int kSplitKMaxSlices = 8;
constexpr int64_t kSplitKMinSliceK = 2048;
constexpr double kSplitKMinResidentFill = 0.9;
constexpr double kSplitKMaxLoadRatio = 0.9;

template <class Config>
int split_k_slices(int64_t m, int64_t n, int64_t k, const Sm80Device& device) {
  const int64_t tiles =
      ((m + Config::TileShape::kM - 1) / Config::TileShape::kM) * ((n + Config::TileShape::kN - 1) / Config::TileShape::kN);
  const int64_t resident = int64_t(device.sm_count) * split_k_resident_ctas<Config>(device);
  auto load = [&](int slices) {  // the busiest SM's share, in unsplit tiles
    return double((tiles * slices + device.sm_count - 1) / device.sm_count) / slices;
  };
  int best = 1;
  for (int slices = 2; slices <= kSplitKMaxSlices; ++slices) {
    if (k / slices < kSplitKMinSliceK || tiles * slices > resident) break;
    const bool fills = double(tiles * slices) >= kSplitKMinResidentFill * double(resident);
    if (fills && load(slices) < load(best) && load(slices) <= kSplitKMaxLoadRatio * load(1)) best = slices;
  }
  return best;
}

// The config table, stated once: X(id, name, config) for a data-parallel entry, S(id, name,
// config) for a split-K one. It gives the ids below (positions; names are the interface),
// the table of scaled_mm_sm80.cu, and setup.py generates one instance file per config from
// it. Every entry is a rung of the ladder below.
#define W8A8_SM80_TABLE(X, S)                                                          \
  X(kTile16x64, "16x64x128_w16x64x64_s5", Sm80Tile16x64x128_W16x64x64_S5)               \
  X(kTile32x64, "32x64x128_w32x64x64_s5", Sm80Tile32x64x128_W32x64x64_S5)               \
  X(kTile64x128, "64x128x128_w64x64x64_s4", Sm80Tile64x128x128_W64x64x64_S4)            \
  X(kTile128x128, "128x128x64_w64x64x64_s5", Sm80Tile128x128x64_W64x64x64_S5)           \
  X(kTile128x256, "128x256x64_w64x64x64_s4", Sm80Tile128x256x64_W64x64x64_S4)           \
  X(kTile96x128, "96x128x64_w48x64x64_s5", Sm80Tile96x128x64_W48x64x64_S5)              \
  X(kTile80x128, "80x128x128_w80x32x128_s3", Sm80Tile80x128x128_W80x32x128_S3)          \
  S(kTile96x128SplitK, "96x128x64_w48x64x64_s5_splitk", Sm80Tile96x128x64_W48x64x64_S5_SplitK)

#define W8A8_SM80_CONFIG_ID(id, ...) id,
enum ConfigId : int { W8A8_SM80_TABLE(W8A8_SM80_CONFIG_ID, W8A8_SM80_CONFIG_ID) kNumConfigs };
#undef W8A8_SM80_CONFIG_ID

// The ladder: the entry a call without a named config runs. Each M range takes
// the fastest config of a sweep of every config at every M = 1..512 on the
// Llama-3-8B projections, and the ranges end where a config's tile count
// crosses a wave of the SMs. [evidence sm80.ladder]
//   narrow N (a row of 128-wide tiles leaves SMs idle: N = 4096, 6144):
//     M <= 32: 16x64 (every SM busy on 64-wide tiles); <= 128: 32x64;
//     <= 256: 64x128 (4 x 32 tiles = one wave at N = 4096); <= 288: 96x128
//     split-K where split_k_slices splits; <= 320: 80x128 (four M tiles);
//     <= 384: 96x128; then 128x128.
//   wide N (N / 128 >= SMs, e.g. 28672): 64x128 to M = 64, 128x256 to 128
//     (112 tiles, one wave), 96x128 to 192, 128x128 to 256, 80x128 to 320,
//     128x256 to 384, then 128x128.
//   M > 512: 128x256 once it fills four waves, 128x128 below that.
inline ConfigId select_config(int64_t m, int64_t n, int64_t k, const Sm80Device& device) {
  const int sm_count = device.sm_count;
  if (m <= 32) return kTile16x64;
  if (m > 512) {
    const int64_t large_tiles = ((m + 127) / 128) * ((n + 255) / 256);
    return large_tiles >= 4 * int64_t(sm_count) ? kTile128x256 : kTile128x128;
  }
  const bool wide_n = (n + 127) / 128 >= sm_count;
  if (!wide_n) {
    if (m <= 128) return kTile32x64;
    if (m <= 256) return kTile64x128;
    if (m <= 288 && split_k_slices<Sm80Tile96x128x64_W48x64x64_S5_SplitK>(m, n, k, device) > 1) {
      return kTile96x128SplitK;
    }
    if (m <= 320) return kTile80x128;
    if (m <= 384) return kTile96x128;
    return kTile128x128;
  }
  if (m <= 64) return kTile64x128;
  if (m <= 128) return kTile128x256;
  if (m <= 192) return kTile96x128;
  if (m <= 256) return kTile128x128;
  if (m <= 320) return kTile80x128;
  if (m <= 384) return kTile128x256;
  return kTile128x128;
}

// Defined in scaled_mm_sm80_kernel.cuh, instantiated once per config and
// output type in the instance file setup.py generates for it. k_slices is the plan's; the
// data-parallel launcher ignores it (always 1 for its entries).
template <class Config, class ElementOut>
struct ScaledMmSm80Launcher {
  static size_t workspace_size(const ScaledMmSm80Params& params, int k_slices);
  static void run(const ScaledMmSm80Params& params, int k_slices, void* workspace, cudaStream_t stream);
};

// Defined in scaled_mm_sm80_split_k.cuh for the SplitK<...> configs: K in
// k_slices ranges (split_k_slices, computed once by the plan).
template <class Config, class ElementOut>
struct ScaledMmSm80SplitKLauncher {
  static size_t workspace_size(const ScaledMmSm80Params& params, int k_slices);
  static void run(const ScaledMmSm80Params& params, int k_slices, void* workspace, cudaStream_t stream);
};

}  // namespace w8a8::sm80
