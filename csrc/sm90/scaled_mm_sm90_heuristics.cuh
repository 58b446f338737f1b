// The heuristics that pick an entry of the sm90 config table (scaled_mm_sm90_configs.cuh):
// the decode kernels' policies, the M ladder and the split / stream-K request path.
// Each heuristic states its rule, a one-line reason and an id; the measurements behind an id
// are on docs/EVIDENCE.md (from benchmarks/results/evidence.json).
#pragma once

#include <cstdint>

#include "sm90/scaled_mm_sm90_configs.cuh"

namespace w8a8::sm90 {

// The ladder (select_config), on next_pow2(M) with rungs at 96, 192, 320 and 384 (the rows the
// quantizers pad to, w8a8/padding.py), and on N against the SM count. Under scheduler "auto"
// the GEMV and the skinny GEMM serve the fewest tokens first (plan_auto).
//   M <= 256, N <= 32 x SMs   token-tile pairs, 1x2 cluster (PairedTokenTilesPolicy)
//   M <= 32                   swap-AB 64x32x256, non-persistent           [evidence sm90.rung32]
//   M <= 64                   swap-AB 64x64x256, non-persistent           [evidence sm90.rung64]
//   M <= 96                   swap-AB 64x96x256, one token tile, where N / 64 <= 2 x SMs
//                             (Rung96Policy); else as M <= 128
//   M <= 128                  64x64x256 (N <= 4096), else 64x128 pingpong, 2x1 cluster
//                                                                         [evidence sm90.rung128]
//   M <= 192                  swap-AB tiles covering 192 tokens (Rung192Policy)
//   M <= 256                  swap-AB 128x64, 1x2 cluster (N <= 4096)     [evidence sm90.rung256]
//                             else 128-token tiles filling one wave (OneWavePolicy)
//   M <= 320, M <= 384        swap-AB tiles covering the rung (WideRungPolicy); at 384 a
//                             one-wave 128x240 tile where it fills the SMs better
//   M <= 512                  128-token tiles filling one wave (OneWavePolicy)
//   M >= 1024, N <= 6144, K <= 4096
//                             128x128 pingpong, 2x1 cluster, raster along N (NarrowWeightsPolicy)
//   M > 512                   128x256 cooperative, 2x1 cluster, swizzle 8, raster along N
//                                                               [evidence sm90.m512-compute-tile]

// M in (64, 96] (padded to 96 rows) where N / 64 <= 2 x SMs: the swap-AB 64x96 tile, all 96
// rows in one token tile. Why: each weight byte is read once and the non-persistent CTAs fit two
// waves; in more waves the pingpong 64x128 tile is faster. [evidence sm90.rung96]
struct Rung96Policy {
  static constexpr int64_t kMaxM = 96;
  static constexpr bool serves(int64_t n, int sm_count) { return weight_tiles(n, 64) <= 2 * int64_t(sm_count); }
};

// M in (128, 192] (padded to 192 rows): N <= 4096 the swap-AB 64x96 tile (two token tiles,
// N / 64 x 2 CTAs); wider, 128 weight rows per tile: two token tiles of 96 where they fit one
// wave, else one of 192 where that fits, else (several waves either way) 96. Why: the grid that
// fits one wave reads each weight byte the fewest times; in several waves the smaller tile
// balances them better. [evidence sm90.rung192]
struct Rung192Policy {
  static constexpr int64_t kMaxM = 192;
  static constexpr int config(int64_t n, int sm_count) {
    const int64_t tiles = weight_tiles(n, 128);
    if (n <= 4096) return kSwap64x96;
    if (2 * tiles <= sm_count) return kSwap128x96Cluster;
    return tiles <= sm_count ? kSwap128x192 : kSwap128x96Cluster;
  }
};

// M in (256, 320] and (320, 384] (padded to 320 and 384 rows): swap-AB tiles of 128 weight rows
// covering the rung, as two token tiles of half the rung or four of a quarter (1x2 cluster),
// the quarter ones where they fill the SM waves better by more than kMargin of a wave. Why: a
// half-rung tile reads each weight tile half as often, which pays for some idle SMs.
// kOneWaveTiles (>= 0): an entry of kRows / 128 token tiles x N / kOneWaveWidth weight columns,
// taken where it makes one wave that fills the SMs better than that pick by kMargin.
// [evidence sm90.rung320-384]
template <int64_t kRows, int kQuarterTiles, int kHalfTiles, int kOneWaveTiles = -1, int64_t kOneWaveWidth = 0>
struct WideRungPolicy {
  static constexpr int64_t kMaxM = kRows;
  static constexpr double kMargin = 0.15;
  // The share of the SM waves a grid of `tiles` CTAs fills.
  static constexpr double filled(int64_t tiles, int sm_count) {
    return double(tiles) / double(sm_waves(tiles, sm_count) * sm_count);
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
// Rung320Policy has no one-wave entry; Rung384Policy's is the 128x240 tile.
// [evidence sm90.rung384-one-wave]
using Rung320Policy = WideRungPolicy<320, kSwap128x80Cluster, kSwap128x160>;
using Rung384Policy = WideRungPolicy<384, kSwap128x96Cluster, kSwap128x192, kCoop128x240, 240>;
static_assert(Rung320Policy::config(4096, 132) == kSwap128x80Cluster, "4096 x 4096 at 320: 128 CTAs");
static_assert(Rung320Policy::config(6144, 132) == kSwap128x160, "6144 x 4096 at 320: 96 CTAs, not 192");
static_assert(Rung384Policy::config(4096, 132) == kSwap128x96Cluster, "4096 x 4096 at 384: 128 CTAs");
static_assert(Rung384Policy::config(8192, 132) == kSwap128x192, "8192 x 8192 at 384: 128 CTAs");
static_assert(Rung384Policy::config(6144, 132) == kSwap128x192, "6144 x 4096 at 384: 96 CTAs");
static_assert(Rung384Policy::config(10240, 132) == kCoop128x240, "10240 x 8192 at 384: 129 CTAs, not 320");
static_assert(Rung384Policy::config(28672, 132) == kSwap128x192, "28672 x 4096 at 384: no wave fits");

// M <= 256 where two CTAs per 64 weight rows fit one wave (N <= 32 x SMs): the rung's tokens as
// two token tiles of a 1x2 cluster that multicasts the weight tile, 16, 32, 48, 64, 96 or 128
// tokens per CTA. Why: twice the CTAs stream the weights, each byte read once from HBM; past
// one wave the second CTA per weight tile costs a wave. [evidence sm90.paired-token-tiles]
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

// M in (192, 256] with N > 4096 (2 token tiles) and (384, 512] (4): 128-token tiles of the
// weight width (96, 128 or 192; 2x1 cluster) whose tiles make the most CTAs within one wave;
// where none fits one wave, the 128x128 pingpong tile, or on rows longer than 4096 the 128x256
// cooperative one where its waves are no more than the pingpong tile's half-waves (a pingpong
// CTA runs its two tiles one after the other). Why: the 128x128 tile alone leaves a wave partly
// idle or needs a second; at equal waves the wider tile loads less operand data per MAC, where
// the rows are long enough to hide the epilogue that the pingpong tile overlaps.
// [evidence sm90.one-wave]
struct OneWavePolicy {
  static constexpr int config(int64_t n, int64_t k, int64_t token_tiles, int sm_count) {
    const int widths[] = {96, 128, 192};
    const int ids[] = {kCoop128x96Cluster, kPingpong128x128, kCoop128x192Cluster};
    int best = -1;
    int64_t best_ctas = 0;
    for (int i = 0; i < 3; ++i) {
      const int64_t ctas = token_tiles * weight_tiles(n, widths[i]);
      if (ctas <= sm_count && ctas > best_ctas) {
        best = ids[i];
        best_ctas = ctas;
      }
    }
    if (best >= 0) return best;
    if (k <= 4096) return kPingpong128x128;
    const int64_t wide = sm_waves(token_tiles * weight_tiles(n, 256), sm_count);
    const int64_t pingpong = sm_waves(token_tiles * weight_tiles(n, 128), sm_count);
    return 2 * wide <= pingpong ? kCoop128x256RasterN : kPingpong128x128;
  }
};
static_assert(OneWavePolicy::config(6144, 4096, 2, 132) == kCoop128x96Cluster, "6144 x 4096 at 256");
static_assert(OneWavePolicy::config(10240, 8192, 2, 132) == kCoop128x192Cluster, "10240 x 8192 at 256");
static_assert(OneWavePolicy::config(8192, 8192, 2, 132) == kPingpong128x128, "8192 x 8192 at 256");
static_assert(OneWavePolicy::config(28672, 4096, 2, 132) == kPingpong128x128, "28672 x 4096 at 256: K = 4096");
static_assert(OneWavePolicy::config(6144, 4096, 4, 132) == kCoop128x192Cluster, "6144 x 4096 at 512");
static_assert(OneWavePolicy::config(4096, 4096, 4, 132) == kPingpong128x128, "4096 x 4096 at 512");
static_assert(OneWavePolicy::config(57344, 8192, 4, 132) == kCoop128x256RasterN, "57344 x 8192 at 512: 7 waves, 14 half");
static_assert(OneWavePolicy::config(8192, 8192, 4, 132) == kCoop128x256RasterN, "8192 x 8192 at 512: 1 wave, 2 half");
static_assert(OneWavePolicy::config(10240, 8192, 4, 132) == kPingpong128x128, "10240 x 8192 at 512: 2 waves, 3 half");
static_assert(OneWavePolicy::config(28672, 4096, 4, 132) == kPingpong128x128, "28672 x 4096 at 512: 4 waves, 7 half");
static_assert(OneWavePolicy::config(57344, 8192, 2, 132) == kPingpong128x128, "57344 x 8192 at 256: 4 waves, 7 half");

// M >= 1024 on narrow weights (N <= 6144) and short rows (K <= 4096): the 128x128 pingpong tile,
// rastered along N, swizzle 1. Why: a pingpong CTA overlaps one tile's epilogue with the next
// one's mainloop, which 32 K steps do not amortise on the cooperative tile; rastered along N it
// also holds at token counts off multiples of 256, where swizzle 8 along M loses.
// [evidence sm90.narrow-weights-pingpong]
struct NarrowWeightsPolicy {
  static constexpr int64_t kMinM = 1024;
  static constexpr int64_t kMaxN = 6144;
  static constexpr int64_t kMaxK = 4096;
  static constexpr bool serves(int64_t m, int64_t n, int64_t k) { return m >= kMinM && n <= kMaxN && k <= kMaxK; }
};

// The ladder above: the entry a data-parallel call without a named config runs.
inline int select_config(int64_t m, int64_t n, int64_t k, int sm_count) {
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
  if (m_pow2 <= 256) return n > 4096 ? OneWavePolicy::config(n, k, 2, sm_count) : kSwap128x64Cluster;
  if (m <= Rung320Policy::kMaxM) return Rung320Policy::config(n, sm_count);
  if (m <= Rung384Policy::kMaxM) return Rung384Policy::config(n, sm_count);
  if (m_pow2 <= 512) return OneWavePolicy::config(n, k, 4, sm_count);
  if (NarrowWeightsPolicy::serves(m, n, k)) return kPingpong128x128RasterN;
  return kCoop128x256RasterN;
}

// split_k > 1 or scheduler "stream_k" without a named config: the stream-K-scheduler entry of
// M's range (that scheduler needs the cooperative kernel); the request's decomposition and
// split count replace the entry's own. Scheduler "auto" never splits K: a split paid only at
// M <= 16 on long-K shapes, where the decode kernels are faster.
// [evidence sm90.split-k-off-under-auto]
inline int split_capable_config(int64_t m) {
  if (m <= 64) return kSwap128x16StreamK;
  if (m <= 256) return kSwap128x64StreamK;
  return kCoop128x128StreamK;
}

// The decode GEMV (decode/scaled_mm_gemv.h; dp4a, not CUTLASS) for M <= 4, one warp per weight
// row (no K split). Why: at a few tokens the GEMM streams its weights and nothing else, and the
// swap-AB tile pays for TMA, wgmma on mostly empty token columns and a grid of N / 128 CTAs.
// [evidence sm90.gemv]
struct GemvPolicy {
  static constexpr int64_t kMaxM = 4;  // tokens served under scheduler "auto"
  static constexpr int kConfig = kGemvSplit1;
};

// The skinny GEMM (decode/scaled_mm_skinny.h; mma.sync, not CUTLASS) for M = 5..16 where
// N / 64 > SMs and K < kMinTileK: a warp per 16 weight rows, K split over 8 warps of a CTA,
// 2 CTAs per SM. Why: where the 64x32 tile would run several waves of short tiles it keeps
// HBM busy in one wave; on one-wave grids and long rows the tile (launched early, its first
// weights in L2) is faster. [evidence sm90.skinny]
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

// The entry scheduler "auto" runs, with its table options: the GEMV for a few tokens, the
// skinny GEMM for a few more where it serves, else the ladder's entry, data-parallel.
inline int plan_auto(int64_t m, int64_t n, int64_t k, int sm_count) {
  if (m <= GemvPolicy::kMaxM) return GemvPolicy::kConfig;
  if (m <= SkinnyPolicy::kMaxM && SkinnyPolicy::serves(n, k, sm_count)) return SkinnyPolicy::kConfig;
  return select_config(m, n, k, sm_count);
}

}  // namespace w8a8::sm90
