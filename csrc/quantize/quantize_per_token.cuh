// The per-token kernels of the CUDA activation quantizers (launched by Launch, quantize.cu): a
// row's largest |x| (RowMax, reduce_row), its scale (RowScale) and its codes without a division
// per value (quantize_per_token_codes), the row held in registers or read twice
// (quantize_per_token_kernel), or held in registers on a persistent grid that copies the next
// rows into shared memory meanwhile (quantize_per_token_ring_kernel). Included by quantize.cu only
// (the anonymous namespace: internal to that translation unit).
#pragma once

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/programmatic_launch.cuh"
#include "quantize/quantize_common.cuh"

namespace w8a8 {
namespace {

// One thread's share of a row's largest |x| and whether the row holds Inf or NaN. fmaxf
// drops NaN and keeps Inf, so NaN is tested apart and an Inf shows as an infinite max.
// 16-byte vectors of a 16-bit type compare magnitude bits two at a time instead, unwidened
// (sign cleared, the integer order of the bits is the order of |x|, with Inf and then NaN
// above every finite value).
template <class T>
struct RowMax {
  float amax = 0.0f;
  bool nan = false;
  uint32_t halves = 0;  // 16-bit T: the largest magnitude bits seen in each half of a word

  template <int kVec>
  __device__ __forceinline__ void add(const Raw<T, kVec>& raw) {
    if constexpr (sizeof(T) == 2 && kVec * sizeof(T) == 16) {
      const uint32_t* w = reinterpret_cast<const uint32_t*>(&raw);
#pragma unroll
      for (int i = 0; i < 4; ++i) halves = __vmaxu2(halves, w[i] & 0x7fff7fffu);
    } else {
      float v[kVec];
      widen<T, kVec>(raw, v);
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        amax = fmaxf(amax, fabsf(v[i]));
        nan = nan || v[i] != v[i];
      }
    }
  }

  // The finite max where the row holds no Inf / NaN (bad false); anything where it does.
  __device__ __forceinline__ void finish(float& max_out, bool& bad) const {
    float m = amax;
    bool b = nan || !(amax <= FLT_MAX);
    if constexpr (sizeof(T) == 2) {
      const uint32_t top = max(halves & 0xffffu, halves >> 16);
      constexpr uint32_t kInfBits = std::is_same_v<T, __half> ? 0x7c00u : 0x7f80u;
      const uint16_t top16 = static_cast<uint16_t>(top);
      b = b || top >= kInfBits;
      m = fmaxf(m, to_float(*reinterpret_cast<const T*>(&top16)));
    }
    max_out = m;
    bad = b;
  }
};

// Threads of a block: whole rows, at least 256 threads (several rows when rows are short).
template <int kThreadsPerRow>
__host__ __device__ constexpr int block_threads() {
  return kThreadsPerRow > 256 ? kThreadsPerRow : 256;
}

// Max and "any" over the kThreadsPerRow threads that share a row (a warp or a group of
// warps). Every thread of the block must call it (it may synchronise the block).
template <int kThreadsPerRow>
__device__ __forceinline__ void reduce_row(float& amax, bool& bad) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  }
  bad = __any_sync(0xffffffffu, bad);
  if constexpr (kThreadsPerRow > 32) {
    constexpr int kWarpsPerRow = kThreadsPerRow / 32;
    constexpr int kWarps = block_threads<kThreadsPerRow>() / 32;
    __shared__ float warp_amax[kWarps];
    __shared__ int warp_bad[kWarps];
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) {
      warp_amax[warp] = amax;
      warp_bad[warp] = bad;
    }
    __syncthreads();
    const int first = warp / kWarpsPerRow * kWarpsPerRow;
    amax = warp_amax[first];
    bad = warp_bad[first];
#pragma unroll
    for (int w = 1; w < kWarpsPerRow; ++w) {
      amax = fmaxf(amax, warp_amax[first + w]);
      bad = bad || warp_bad[first + w];
    }
  }
}

// rint(v / scale) without an IEEE division per element, bit-identical to the reference's
// rint(RN(v / scale)) either way; no clamp (|quotient| < 127.5 rounds into [-127, 127]).
//
// 16-bit rows (bf16, fp16): the quotient corrected once, Q = RN(p + RN(v - p d) inv) with
// p = RN(v inv), d = scale, inv = RN(1 / d) (two FMAs: the remainder v - p d and the
// correction), then rint(Q). No test and no branch per value. Exact for every 16-bit value under
// every row max: the pairs are few enough to check them all (tests/ops/test_quantize.py), and they
// are the same at every exponent while d >= kMinCorrectedDivisor (the remainder stays on its
// exact grid); rows with a smaller d (bf16 rows whose max is under 127 * 2^-100) divide.
// Why: a near-tie test with a branch per vector took up to 1.5x the time of this arithmetic
// (most of the kernel's distance to a copy of its bytes). [evidence quant.corrected-quotient]
//
// fp32 rows: y = v * (1 / scale), two roundings, is within 2^-23 |y| of the quotient, under
// 2^-16 for |y| <= 127.0001 (the quantizable rows: every |v| <= amax and scale = RN(amax / 127)).
// It can round to another integer than the quotient only where the two straddle a
// half-integer, so values whose y lies within kTieMargin (2^-14, four times that bound) of one,
// and rows whose reciprocal is not a normal number (exact_row), take __fdiv_rn. (The corrected
// quotient is not proven exact for 24-bit values: its first product need not be within an ulp.)
// Why: about 9 instructions per value instead of a division. [evidence quant.reciprocal-product]
constexpr float kTieMargin = 1.0f / 16384.0f;  // 2^-14
constexpr float kMinCorrectedDivisor = 0x1p-100f;

// A row's scale, from its finite amax and whether it holds Inf/NaN (the reference's rules).
struct RowScale {
  float stored;     // what scale[row] holds: amax / 127, NaN for a row with Inf/NaN
  bool quantizable; // finite and not all zero; other rows quantize to 0
  float divisor;    // the scale codes divide by (1 where not quantizable)
  float inv;        // 1 / divisor, for the reciprocal product
  bool exact_row;   // the reciprocal is not a normal number: divide every value

  __device__ __forceinline__ RowScale(float amax, bool bad) {
    const float scale = __fdiv_rn(amax, kSymmetricQMax);
    stored = bad ? __int_as_float(0x7fc00000) : scale;
    quantizable = !bad && amax > 0.0f;
    divisor = quantizable ? scale : 1.0f;
    inv = __fdiv_rn(1.0f, divisor);
    exact_row = !(inv <= FLT_MAX) || divisor < FLT_MIN;
  }
};

// 1.5 * 2^23: adding it to |y| <= 2^22 rounds y half to even, and the sum's bits are
// 0x4B400000 + rint(y), so the low byte is rint(y) as int8 (y clamped to [-128, 127] first
// where it may leave that range; the bounds are integers, so clamping before rounding gives
// the same code).
constexpr float kRintMagic = 12582912.0f;

template <int kVec>
__device__ __forceinline__ void divided_sums(const float (&v)[kVec], const RowScale& rs, float (&sum)[kVec]) {
#pragma unroll
  for (int i = 0; i < kVec; ++i) sum[i] = __fadd_rn(fminf(fmaxf(__fdiv_rn(v[i], rs.divisor), kQMin), kQMax), kRintMagic);
}

// T: the row's element type (the arithmetic above, by its width).
template <class T, int kVec>
__device__ __forceinline__ PackedCodes<kVec> quantize_per_token_codes(const float (&v)[kVec], const RowScale& rs) {
  float sum[kVec];  // rint(quotient) + kRintMagic: rint in the low byte
  if constexpr (sizeof(T) == 2) {
    if (rs.divisor < kMinCorrectedDivisor) {  // the same for the whole row (and every exact_row of a 16-bit row)
      divided_sums<kVec>(v, rs, sum);
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const float p = __fmul_rn(v[i], rs.inv);  // _rn: no contraction
        const float remainder = __fmaf_rn(-p, rs.divisor, v[i]);
        sum[i] = __fadd_rn(__fmaf_rn(remainder, rs.inv, p), kRintMagic);
      }
    }
  } else {
    bool exact = rs.exact_row;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float y = __fmul_rn(v[i], rs.inv);  // _rn: no contraction into the sum below
      sum[i] = __fadd_rn(y, kRintMagic);
      // y - rint(y), exact, in [-0.5, 0.5]: near +-0.5 the quotient may round the other way.
      exact = exact || fabsf(__fsub_rn(y, __fsub_rn(sum[i], kRintMagic))) >= 0.5f - kTieMargin;
    }
    // Rare (about one vector in a thousand on random data): a value next to a half-integer
    // anywhere in the vector sends the whole vector through the IEEE division, so the
    // common path has one branch per vector, not one per value.
    if (exact) divided_sums<kVec>(v, rs, sum);
  }
  PackedCodes<kVec> codes;
  if constexpr (kVec % 4 == 0) {  // the low bytes of four sums to a word: three byte permutes
#pragma unroll
    for (int i = 0; i < kVec / 4; ++i) {
      const uint32_t lo = __byte_perm(__float_as_uint(sum[4 * i]), __float_as_uint(sum[4 * i + 1]), 0x0040);
      const uint32_t hi = __byte_perm(__float_as_uint(sum[4 * i + 2]), __float_as_uint(sum[4 * i + 3]), 0x0040);
      codes.w[i] = rs.quantizable ? __byte_perm(lo, hi, 0x5410) : 0u;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      codes.v[i] = rs.quantizable ? static_cast<int8_t>(__float_as_int(sum[i])) : int8_t(0);
    }
  }
  return codes;
}

// A row held in registers (raw: this thread's kMaxVecs vectors of it; slots past the row's end
// hold values that cannot raise its max: any of its values, or zeros): its max, reduced over the
// kThreadsPerRow threads of the row (every thread of the block must call this), its scale, then its
// codes. Nothing is stored for a row past the end.
template <class T, int kVec, int kThreadsPerRow, int kMaxVecs>
__device__ __forceinline__ void quantize_held_row(const Raw<T, kVec> (&raw)[kMaxVecs], int64_t row, bool row_ok,
                                                  int lane, int64_t vecs, int8_t* __restrict__ qr,
                                                  float* __restrict__ scale_out) {
  RowMax<T> row_max;
#pragma unroll
  for (int j = 0; j < kMaxVecs; ++j) row_max.template add<kVec>(raw[j]);
  float amax;
  bool bad;
  row_max.finish(amax, bad);
  reduce_row<kThreadsPerRow>(amax, bad);
  const RowScale rs(amax, bad);
  if (row_ok && lane == 0) scale_out[row] = rs.stored;
#pragma unroll
  for (int j = 0; j < kMaxVecs; ++j) {
    const int64_t idx = lane + int64_t(j) * kThreadsPerRow;
    if (row_ok && idx < vecs) {
      float v[kVec];
      widen<T, kVec>(raw[j], v);
      store(qr + idx * kVec, quantize_per_token_codes<T, kVec>(v, rs));
    }
  }
}

// kMaxVecs > 0: each thread keeps up to kMaxVecs vectors of its row in registers.
// kMaxVecs == 0: two passes over the row.
// kFullSmem (both kernels): the same code as a kernel of its own, which runs at the largest
// shared-memory split (QuantizeParams::next_kernel_full_smem).
template <class T, int kVec, int kThreadsPerRow, int kMaxVecs, bool kFullSmem>
__global__ void __launch_bounds__(block_threads<kThreadsPerRow>())
    quantize_per_token_kernel(const T* __restrict__ x, int64_t ldx, int8_t* __restrict__ q,
                              float* __restrict__ scale_out, int64_t rows, int64_t k) {
  wait_for_prior_grids();  // x and the buffers written below may belong to the kernel before
  allow_dependent_launch();
  constexpr int kRowsPerBlock = block_threads<kThreadsPerRow>() / kThreadsPerRow;
  const int lane = threadIdx.x % kThreadsPerRow;
  int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  // The last block may hold rows past the end: those threads read row 0 and store
  // nothing (they must still reach the block-wide reduction).
  const bool row_ok = row < rows;
  if (!row_ok) row = 0;
  const T* xr = x + row * ldx;
  int8_t* qr = q + row * k;
  const int64_t vecs = k / kVec;

  if constexpr (kMaxVecs > 0) {
    // All loads first, unconditionally (past-the-end slots re-read the row's last vector,
    // which cannot change the max, and store nothing): with a bound check around each load
    // the compiler waited for every load before issuing the next (sm_90 SASS), leaving one
    // 16-byte load in flight.
    Raw<T, kVec> raw[kMaxVecs];
#pragma unroll
    for (int j = 0; j < kMaxVecs; ++j) {
      const int64_t idx = lane + int64_t(j) * kThreadsPerRow;
      raw[j] = load_raw<T, kVec>(xr + (idx < vecs ? idx : vecs - 1) * kVec);
    }
    quantize_held_row<T, kVec, kThreadsPerRow, kMaxVecs>(raw, row, row_ok, lane, vecs, qr, scale_out);
  } else {
    float amax;
    bool bad;
    RowMax<T> row_max;
    for (int64_t idx = lane; idx < vecs; idx += kThreadsPerRow) {
      row_max.template add<kVec>(load_raw<T, kVec>(xr + idx * kVec));
    }
    row_max.finish(amax, bad);
    reduce_row<kThreadsPerRow>(amax, bad);
    const RowScale rs(amax, bad);
    if (!row_ok) return;  // after the last block-wide reduction
    if (lane == 0) scale_out[row] = rs.stored;
    for (int64_t idx = lane; idx < vecs; idx += kThreadsPerRow) {
      float v[kVec];
      load<T, kVec>(xr + idx * kVec, v);
      store(qr + idx * kVec, quantize_per_token_codes<T, kVec>(v, rs));
    }
  }
}

// 16 bytes copied global -> shared without passing through registers (cp.async, cached in L2
// only), committed in groups and waited for by the count of groups still pending.
// bytes < 16: the rest of the 16 zero-filled (0: nothing read).
__device__ __forceinline__ void copy_async_16(void* smem, const void* global, unsigned bytes) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(global), "r"(bytes) : "memory");
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// Dynamic shared memory of the ring kernel: kStages groups of the block's rows.
template <int kThreadsPerRow, int kMaxVecs, int kStages>
constexpr int ring_bytes() {
  return kStages * kMaxVecs * block_threads<kThreadsPerRow>() * 16;
}

// The ring kernel: rows held as in quantize_per_token_kernel, but a persistent grid (at most one
// block per row group, a group being the block's rows) whose blocks take every gridDim.x-th
// group, with the group kStages - 1 ahead in flight while they quantize the current one: each
// thread copies its vectors of that group into a ring of kStages groups of shared memory
// (cp.async), so the block's loads do not wait for its stores, and the bytes in flight are set by
// the ring, not by how many row-held blocks fit an SM. A thread reads back only the slots it
// copied (no barrier for the data; its reads of a stage land before it refills that stage, since
// the codes it stores first depend on them). Slots past the row's end are zero-filled without a
// read: copies of the row's last vector there made the kernel 5-27% slower than the register
// kernel on rows that leave slots empty (bf16 K = 20480, 24576). 16-byte vectors only.
template <class T, int kVec, int kThreadsPerRow, int kMaxVecs, int kStages, bool kFullSmem>
__global__ void __launch_bounds__(block_threads<kThreadsPerRow>())
    quantize_per_token_ring_kernel(const T* __restrict__ x, int64_t ldx, int8_t* __restrict__ q,
                                   float* __restrict__ scale_out, int64_t rows, int64_t k) {
  static_assert(kVec * sizeof(T) == 16 && kStages >= 2, "the ring copies 16-byte vectors, one group ahead at least");
  extern __shared__ uint4 ring[];  // [kStages][kMaxVecs][block threads]: a warp's slots contiguous
  constexpr int kBlock = block_threads<kThreadsPerRow>();
  constexpr int kRowsPerBlock = kBlock / kThreadsPerRow;
  wait_for_prior_grids();  // x and the buffers written below may belong to the kernel before
  allow_dependent_launch();
  const int64_t groups = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const int64_t vecs = k / kVec;
  const int lane = threadIdx.x % kThreadsPerRow;
  const int sub = threadIdx.x / kThreadsPerRow;
  // Copies this thread's vectors of `group` into `stage` (past the last group: none) and commits
  // them as one group of copies, so that every stage counts one.
  auto fill = [&](int64_t group, int stage) {
    if (group < groups) {
      int64_t row = group * kRowsPerBlock + sub;
      if (row >= rows) row = 0;  // past the end: row 0 read, nothing stored
      const T* xr = x + row * ldx;
#pragma unroll
      for (int j = 0; j < kMaxVecs; ++j) {
        const int64_t idx = lane + int64_t(j) * kThreadsPerRow;
        const bool in_row = idx < vecs;  // past the row's end: zeros (no read), which leave the max as it is
        copy_async_16(&ring[(stage * kMaxVecs + j) * kBlock + threadIdx.x], xr + (in_row ? idx : 0) * kVec,
                      in_row ? 16u : 0u);
      }
    }
    commit_copies();
  };
  int64_t group = blockIdx.x;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) fill(group + int64_t(s) * gridDim.x, s);
  for (int stage = 0; group < groups; group += gridDim.x, stage = stage == kStages - 1 ? 0 : stage + 1) {
    fill(group + int64_t(kStages - 1) * gridDim.x, stage == 0 ? kStages - 1 : stage - 1);
    wait_copies<kStages - 1>();  // this thread's copies of `group` have landed
    Raw<T, kVec> raw[kMaxVecs];
#pragma unroll
    for (int j = 0; j < kMaxVecs; ++j) raw[j] = ring[(stage * kMaxVecs + j) * kBlock + threadIdx.x];
    const int64_t row = group * kRowsPerBlock + sub;
    const bool row_ok = row < rows;
    quantize_held_row<T, kVec, kThreadsPerRow, kMaxVecs>(raw, row_ok ? row : 0, row_ok, lane, vecs,
                                                         q + (row_ok ? row : 0) * k, scale_out);
    // reduce_row's shared slots are written again for the next group
    if constexpr (kThreadsPerRow > 32) __syncthreads();
  }
  wait_copies<0>();  // (only empty groups can be pending here)
}

}  // namespace
}  // namespace w8a8
