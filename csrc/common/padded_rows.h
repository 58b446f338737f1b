// Activation rows padded to the sm90 GEMM's tile edge, stated once (torch-free).
//
// The CUTLASS tiles run slower on a partly filled token tile than on a full one (the TMA
// loads of the rows past M cost more than real rows), and up to 512 tokens the GEMM is
// memory-bound, so the padded problem is the faster one. So the package's activation
// producers on an sm90 GPU (the quantizers, the fused norm / SiLU-mul quantizers, the single
// op w8a8::linear) allocate their codes and scales with padded_rows(M) rows and return views
// of the first M; the sm90 GEMM, given operands whose storage holds those rows, runs on them
// and keeps the first M rows of its output. Output row m depends only on row m of the codes
// and of the scales, so the pad rows (never written) reach only dropped rows.
// Rule: the token counts of each range below run as its upper end. [evidence padding.rows]
#pragma once

#include <cstdint>

namespace w8a8 {

// (low, high]: low < M <= high runs as `high` rows. 33..47 -> 48 (the 64-token tiles run
// 48 rows faster than their own count), then the ladder's rung edges up to 512; past 512 the
// GEMM is compute-bound and padding would cost compute.
struct PaddedRange {
  int64_t low, high;
};
constexpr PaddedRange kPaddedRanges[] = {{32, 48},   {64, 96},   {96, 128},  {128, 192},
                                         {192, 256}, {256, 320}, {320, 384}, {384, 512}};

constexpr int64_t padded_rows(int64_t m) {
  for (const PaddedRange& r : kPaddedRanges) {
    if (r.low < m && m <= r.high) return r.high;
  }
  return m;
}

static_assert(padded_rows(1) == 1 && padded_rows(32) == 32 && padded_rows(33) == 48 && padded_rows(48) == 48);
static_assert(padded_rows(49) == 49 && padded_rows(64) == 64 && padded_rows(65) == 96 && padded_rows(97) == 128);
static_assert(padded_rows(129) == 192 && padded_rows(193) == 256 && padded_rows(257) == 320);
static_assert(padded_rows(321) == 384 && padded_rows(385) == 512 && padded_rows(513) == 513);

}  // namespace w8a8
