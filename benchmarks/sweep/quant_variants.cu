// Variants of the per-token kernel's arithmetic (the lab, not the product), at the product's
// launch shapes: the product's kernel body (quantize_per_token.cuh, rows held in registers)
// with one piece replaced, to split its time between the row reduction and the per-value work.
// The product's own kernel at the same shapes is in the sweep's shape table (its control).
//   1 fma check:        the same codes from fewer instructions per value: sum = fma(v, inv,
//                       kRintMagic) rounds the exact product v * inv to an integer once, and the
//                       tie check reads the exact remainder fma(v, inv, -rint) (one FMUL and one
//                       FADD fewer than the product's y = v * inv, y + magic, (sum - magic) - y);
//                       bf16 widened by a shift or a mask per value;
//   2 no tie check:     sum = fma(v, inv, kRintMagic) only (timing only: codes may differ);
//   3 no row reduction: each thread scales by its own share's max (timing only: codes differ);
//   4 corrected quotient: no tie check and no branch: p = RN(v * inv), the exact remainder
//                       r = fma(-p, d, v) and Q = fma(r, inv, p), one correction step of the
//                       quotient (Markstein), then Q + kRintMagic; rows whose divisor is under
//                       2^-100 (the remainder would leave the normal range) divide every value;
//   5 one check per thread: variant 1's arithmetic over all of a thread's vectors, codes held in
//                       registers, one branch before the stores instead of one per vector.
// Why variant 1 gives the reference's codes: with p = v * inv exactly, q = v / d, Q = RN(q) the
// reference's quotient and n = rint(p): |p - q| <= |q| 2^-24 <= 2^-17 (inv = RN(1 / d)) and
// |Q - q| <= 2^-18 (|q| < 128), so where |p - n| < 0.5 - kTieMargin (2^-14), |Q - n| < 0.5 and
// rint(Q) = n; other vectors take the IEEE division, as in the product.
#include "quant_shapes.cuh"

namespace w8a8::qsweep {
namespace {

using Bf16 = __nv_bfloat16;
constexpr int kV = 8;  // bf16 values in a 16-byte vector

// bf16 to float by bits: the low half shifted up, the high half masked (one instruction each).
__device__ __forceinline__ void widen_bits(const Raw<Bf16, kV>& raw, float (&v)[kV]) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&raw);
#pragma unroll
  for (int i = 0; i < kV / 2; ++i) {
    v[2 * i] = __uint_as_float(w[i] << 16);
    v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ PackedCodes<kV> pack(const float (&sum)[kV], bool quantizable) {
  PackedCodes<kV> codes;
#pragma unroll
  for (int i = 0; i < kV / 4; ++i) {
    const uint32_t lo = __byte_perm(__float_as_uint(sum[4 * i]), __float_as_uint(sum[4 * i + 1]), 0x0040);
    const uint32_t hi = __byte_perm(__float_as_uint(sum[4 * i + 2]), __float_as_uint(sum[4 * i + 3]), 0x0040);
    codes.w[i] = quantizable ? __byte_perm(lo, hi, 0x5410) : 0u;
  }
  return codes;
}

__device__ __forceinline__ void divided(const float (&v)[kV], const RowScale& rs, float (&sum)[kV]) {
#pragma unroll
  for (int i = 0; i < kV; ++i) sum[i] = __fadd_rn(fminf(fmaxf(__fdiv_rn(v[i], rs.divisor), kQMin), kQMax), kRintMagic);
}

// Variant 4: the corrected quotient, every value, no branch (the row's exact case is uniform).
__device__ __forceinline__ PackedCodes<kV> corrected_codes(const float (&v)[kV], const RowScale& rs) {
  float sum[kV];
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    const float p = __fmul_rn(v[i], rs.inv);
    const float r = __fmaf_rn(-p, rs.divisor, v[i]);
    sum[i] = __fadd_rn(__fmaf_rn(r, rs.inv, p), kRintMagic);
  }
  return pack(sum, rs.quantizable);
}

// Variant 1's fast path: the sums and whether any value sits next to a half-integer.
__device__ __forceinline__ bool fma_sums(const float (&v)[kV], const RowScale& rs, float (&sum)[kV]) {
  bool near = false;
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    sum[i] = __fmaf_rn(v[i], rs.inv, kRintMagic);
    near = near || fabsf(__fmaf_rn(v[i], rs.inv, -__fsub_rn(sum[i], kRintMagic))) >= 0.5f - kTieMargin;
  }
  return near;
}

template <int kVariant>
__device__ __forceinline__ PackedCodes<kV> codes_of(const float (&v)[kV], const RowScale& rs) {
  if constexpr (kVariant == 3) {
    return quantize_per_token_codes<kV>(v, rs);
  } else if constexpr (kVariant == 4) {
    return corrected_codes(v, rs);
  } else {
    float sum[kV];
    bool exact = rs.exact_row;
    if constexpr (kVariant == 1) {
      exact = fma_sums(v, rs, sum) || exact;
    } else {
#pragma unroll
      for (int i = 0; i < kV; ++i) sum[i] = __fmaf_rn(v[i], rs.inv, kRintMagic);
    }
    if (exact) divided(v, rs, sum);
    return pack(sum, rs.quantizable);
  }
}

template <int kThreads, int kVecs, bool kFull, int kVariant>
__global__ void __launch_bounds__(block_threads<kThreads>())
    variant_kernel(const Bf16* __restrict__ x, int64_t ldx, int8_t* __restrict__ q, float* __restrict__ scale_out,
                   int64_t rows, int64_t k) {
  wait_for_prior_grids();
  allow_dependent_launch();
  constexpr int kRows = block_threads<kThreads>() / kThreads;
  const int lane = threadIdx.x % kThreads;
  int64_t row = int64_t(blockIdx.x) * kRows + threadIdx.x / kThreads;
  const bool row_ok = row < rows;
  if (!row_ok) row = 0;  // past the end: read row 0, store nothing (the block still reduces)
  const Bf16* xr = x + row * ldx;
  int8_t* qr = q + row * k;
  const int64_t vecs = k / kV;
  Raw<Bf16, kV> raw[kVecs];
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int64_t idx = lane + int64_t(j) * kThreads;
    raw[j] = load_raw<Bf16, kV>(xr + (idx < vecs ? idx : vecs - 1) * kV);
  }
  RowMax<Bf16> row_max;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) row_max.template add<kV>(raw[j]);
  float amax;
  bool bad;
  row_max.finish(amax, bad);
  if constexpr (kVariant != 3) reduce_row<kThreads>(amax, bad);
  const RowScale rs(amax, bad);
  if (row_ok && lane == 0) scale_out[row] = rs.stored;
  if constexpr (kVariant == 4) {
    if (rs.exact_row || rs.divisor < 0x1p-100f) {  // uniform per row: every value divided
#pragma unroll
      for (int j = 0; j < kVecs; ++j) {
        const int64_t idx = lane + int64_t(j) * kThreads;
        if (row_ok && idx < vecs) {
          float v[kV], sum[kV];
          widen_bits(raw[j], v);
          divided(v, rs, sum);
          store(qr + idx * kV, pack(sum, rs.quantizable));
        }
      }
      return;
    }
  }
  if constexpr (kVariant == 5) {
    PackedCodes<kV> codes[kVecs];
    unsigned near = rs.exact_row ? ~0u : 0u;  // bit j: vector j takes the division
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      float v[kV], sum[kV];
      widen_bits(raw[j], v);
      if (fma_sums(v, rs, sum)) near |= 1u << j;
      codes[j] = pack(sum, rs.quantizable);
    }
    if (near) {
#pragma unroll
      for (int j = 0; j < kVecs; ++j) {
        if (near >> j & 1u) {
          float v[kV], sum[kV];
          widen_bits(raw[j], v);
          divided(v, rs, sum);
          codes[j] = pack(sum, rs.quantizable);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int64_t idx = lane + int64_t(j) * kThreads;
      if (row_ok && idx < vecs) store(qr + idx * kV, codes[j]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int64_t idx = lane + int64_t(j) * kThreads;
      if (row_ok && idx < vecs) {
        float v[kV];
        if constexpr (kVariant == 3) {
          widen<Bf16, kV>(raw[j], v);
        } else {
          widen_bits(raw[j], v);
        }
        store(qr + idx * kV, codes_of<kVariant>(v, rs));
      }
    }
  }
}

template <int kThreads, int kVecs, bool kFull, int kVariant>
void run_variant(const void* x, int64_t ldx, int8_t* q, float* scale, int64_t rows, int64_t k, cudaStream_t stream) {
  constexpr int kBlock = block_threads<kThreads>();
  constexpr auto kKernel = variant_kernel<kThreads, kVecs, kFull, kVariant>;
  const int64_t blocks = (rows + kBlock / kThreads - 1) / (kBlock / kThreads);
  launch_programmatic("quantize_per_token variant", with_carveout<kFull, kKernel>("quantize_per_token variant"),
                      dim3(static_cast<unsigned>(blocks)), dim3(kBlock), stream, static_cast<const Bf16*>(x), ldx,
                      q, scale, rows, k);
}

// The product's register shapes for bf16 (quantize.cu, Launch): serving and throughput.
#define W8A8_QSWEEP_VARIANT_SHAPES(S, v) \
  S(256, 2, v) S(128, 4, v) S(512, 2, v) S(256, 4, v) S(512, 4, v) S(256, 7, v) S(512, 7, v)
#define W8A8_QSWEEP_VARIANTS(S)                                                                  \
  W8A8_QSWEEP_VARIANT_SHAPES(S, 1) W8A8_QSWEEP_VARIANT_SHAPES(S, 2) W8A8_QSWEEP_VARIANT_SHAPES(S, 3) \
  W8A8_QSWEEP_VARIANT_SHAPES(S, 4) W8A8_QSWEEP_VARIANT_SHAPES(S, 5)

}  // namespace

#define W8A8_QSWEEP_ENTRY(t, n, v) VariantShape{v, Shape{t, n, &run_variant<t, n, false, v>}},
const VariantShape kVariants[] = {W8A8_QSWEEP_VARIANTS(W8A8_QSWEEP_ENTRY)};
#undef W8A8_QSWEEP_ENTRY
#define W8A8_QSWEEP_ENTRY(t, n, v) VariantShape{v, Shape{t, n, &run_variant<t, n, true, v>}},
const VariantShape kVariantsFull[] = {W8A8_QSWEEP_VARIANTS(W8A8_QSWEEP_ENTRY)};
#undef W8A8_QSWEEP_ENTRY
const int kNumVariants = sizeof(kVariants) / sizeof(kVariants[0]);

}  // namespace w8a8::qsweep
