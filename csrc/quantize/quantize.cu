// CUDA activation quantizers, bit-identical to w8a8/reference.py (see quantize.h).
//
// Exactness: divisions are __fdiv_rn (IEEE round to nearest, whatever the
// compiler flags), rounding is half to even (rintf in the static kernel, the
// magic-number sum in the per-token one: kRintMagic); the per-token kernel's
// row max keeps Inf and tests NaN apart (RowMax), and a row holding either
// takes the reference's special rules, whatever its max.
//
// Launch shapes of the per-token kernel (Launch below picks one per call):
//   * 32..512 threads per row, the row held in registers, 2 to 8 vectors per thread at
//     most (bf16/fp16: K <= 32768): x is read from HBM once; up to 384 or 512 rows
//     (Launch::serving_rows) one row per block with more threads (latency), above that the
//     throughput shapes;
//   * 256 threads per row, two passes - longer rows: amax, then quantize (the second
//     read mostly hits L2).
// A "vector" is 16 bytes of x when x's rows are 16-byte aligned and K is a
// multiple of the vector width; otherwise one element (same code, kVec = 1).
#include <cfloat>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/programmatic_launch.cuh"
#include "quantize/quantize.h"

namespace w8a8 {
namespace {

constexpr int kBlockThreads = 256;
constexpr const char* kPerTokenOp = "quantize_per_token_sm90";
constexpr const char* kStaticOp = "quantize_static_sm90";
constexpr float kQMin = -128.0f;
constexpr float kQMax = 127.0f;
constexpr float kSymmetricQMax = 127.0f;
// Where the reference sends +-Inf before adding zero_point (nan_to_num(posinf=4*QMAX, neginf=4*QMIN)).
constexpr float kPosInfCode = 508.0f;
constexpr float kNegInfCode = -512.0f;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// kVec consecutive elements of T as loaded: one 16-byte vector when kVec * sizeof(T) == 16,
// else one element. Rows are held in this raw form (half the registers of floats for
// 16-bit inputs) and widened where they are used.
template <class T, int kVec>
using Raw = std::conditional_t<kVec * sizeof(T) == 16, uint4, T>;

template <class T, int kVec>
__device__ __forceinline__ Raw<T, kVec> load_raw(const T* p) {
  static_assert(kVec * sizeof(T) == 16 || kVec == 1, "quantize: a vector is 16 bytes or one element");
  if constexpr (kVec * sizeof(T) == 16) {
    return __ldg(reinterpret_cast<const uint4*>(p));
  } else {
    return p[0];
  }
}

template <class T, int kVec>
__device__ __forceinline__ void widen(const Raw<T, kVec>& raw, float (&out)[kVec]) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVec; ++i) out[i] = to_float(e[i]);
}

template <class T, int kVec>
__device__ __forceinline__ void load(const T* p, float (&out)[kVec]) {
  widen<T, kVec>(load_raw<T, kVec>(p), out);
}

// kVec int8 codes in one store (kVec bytes; q rows are kVec-aligned, see Launch).
template <int kVec>
struct alignas(kVec) Codes {
  int8_t v[kVec];
};

// The same bytes as whole words, where kVec is a multiple of 4 (the per-token kernel packs them so).
template <int kVec>
struct alignas(kVec) CodeWords {
  uint32_t w[kVec / 4];
};

template <int kVec>
using PackedCodes = std::conditional_t<kVec % 4 == 0, CodeWords<kVec>, Codes<kVec>>;

template <int kVec, template <int> class C>
__device__ __forceinline__ void store(int8_t* p, const C<kVec>& codes) {
  *reinterpret_cast<C<kVec>*>(p) = codes;
}

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

// rint(v / scale) without an IEEE division per element: y = v * (1 / scale), two roundings
// (the reciprocal's and the product's), is within 2^-23 |y| of the quotient, under 2^-16 for
// |y| <= 127.0001 (the quantizable rows: every |v| <= amax and scale = RN(amax / 127)). It can
// round to another integer than the quotient only where the two straddle a half-integer, so
// values whose y lies within kTieMargin (2^-14, four times that bound) of one, and rows whose
// reciprocal is not a normal number (exact_row), take __fdiv_rn. Bit-identical to the
// reference either way; no clamp on the fast path (|y| < 127.5 rounds into [-127, 127]).
// Why: about 9 instructions per value instead of a division. [evidence quant.reciprocal-product]
constexpr float kTieMargin = 1.0f / 16384.0f;  // 2^-14

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
__device__ __forceinline__ PackedCodes<kVec> quantize_per_token_codes(const float (&v)[kVec], const RowScale& rs) {
  float sum[kVec];  // y + kRintMagic: rint(y) in the low byte
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
  if (exact) {
#pragma unroll
    for (int i = 0; i < kVec; ++i) sum[i] = __fadd_rn(fminf(fmaxf(__fdiv_rn(v[i], rs.divisor), kQMin), kQMax), kRintMagic);
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

  float amax;
  bool bad;
  RowMax<T> row_max;
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
#pragma unroll
    for (int j = 0; j < kMaxVecs; ++j) row_max.template add<kVec>(raw[j]);
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
        store(qr + idx * kVec, quantize_per_token_codes<kVec>(v, rs));
      }
    }
  } else {
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
      store(qr + idx * kVec, quantize_per_token_codes<kVec>(v, rs));
    }
  }
}

template <class T, int kVec, int kThreadsPerRow, bool kFullSmem>
__global__ void __launch_bounds__(kBlockThreads)
    quantize_static_kernel(const T* __restrict__ x, int64_t ldx, int8_t* __restrict__ q, int64_t rows,
                           int64_t k, const float* __restrict__ scale_ptr, const void* zero_point,
                           bool zero_point_is_int32) {
  wait_for_prior_grids();
  allow_dependent_launch();
  constexpr int kRowsPerBlock = kBlockThreads / kThreadsPerRow;
  const int lane = threadIdx.x % kThreadsPerRow;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  if (row >= rows) return;
  const float scale = *scale_ptr;
  float zp = 0.0f;
  if (zero_point != nullptr) {
    zp = zero_point_is_int32 ? float(*static_cast<const int32_t*>(zero_point))
                             : float(*static_cast<const int8_t*>(zero_point));
  }
  const T* xr = x + row * ldx;
  int8_t* qr = q + row * k;
  const int64_t vecs = k / kVec;
  for (int64_t idx = lane; idx < vecs; idx += kThreadsPerRow) {
    float v[kVec];
    load<T, kVec>(xr + idx * kVec, v);
    Codes<kVec> codes;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float y = __fdiv_rn(v[i], scale);
      float r = isnan(y) ? 0.0f : isinf(y) ? (y > 0.0f ? kPosInfCode : kNegInfCode) : rintf(y);
      r = fminf(fmaxf(r + zp, kQMin), kQMax);
      codes.v[i] = static_cast<int8_t>(r);
    }
    store<kVec>(qr + idx * kVec, codes);
  }
}

// Every launch (launch_programmatic below) is a programmatic dependent of the kernel before
// it (common/programmatic_launch.cuh): its blocks start as that kernel's CTAs leave, and each
// waits for it before any access, then lets the kernel after launch. In that order, because
// w8a8::linear's GEMM loads weights before its own wait: once it may launch, the kernels
// before the quantizer (which may have written the weights) have finished. [evidence sm90.pdl]
// The quantizer prefetches nothing for the GEMM after it: its blocks would last until the
// prefetches land. [evidence quant.no-l2-prefetch] Grids fit: rows < 2^31 (check_params).

// Per-call launch choice: vector width, then the row mapping by the row's vector count.
// kFullSmem: the kernels that run at the largest shared-memory split.
template <class T, bool kFullSmem>
struct Launch {
  static constexpr int kVec16 = 16 / sizeof(T);
  // Static quantization: a warp per row while a lane has at most this many vectors.
  static constexpr int kWarpRowVecs = 4;

  static bool vectorizable(const QuantizeParams& p) {
    const bool aligned = reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(p.q) % kVec16 == 0;
    return aligned && p.k % kVec16 == 0 && (p.rows == 1 || p.ldx % kVec16 == 0);
  }

  // Outside the serving shapes, rows held in registers: up to 512 vectors (bf16: K <= 4096)
  // by the fewest of 32..128 threads with at most 4 vectors each (32 values, the Triton
  // kernel's optimum at K = 4096); longer rows by 256 or 512 threads with up to 8 vectors
  // each; rows beyond that take two passes. [evidence quant.cuda-throughput-shapes]
  template <int kVec, int kThreadsPerRow, int kRowVecs>
  static void launch_per_token(const QuantizeParams& p, float* scale, cudaStream_t stream) {
    constexpr int kThreads = block_threads<kThreadsPerRow>();
    constexpr int kRowsPerBlock = kThreads / kThreadsPerRow;
    const int64_t blocks = (p.rows + kRowsPerBlock - 1) / kRowsPerBlock;
    launch_programmatic(kPerTokenOp,
                        with_carveout<kFullSmem, quantize_per_token_kernel<T, kVec, kThreadsPerRow, kRowVecs, kFullSmem>>(
                            kPerTokenOp),
                        dim3(static_cast<unsigned>(blocks)), dim3(kThreads), stream, static_cast<const T*>(p.x), p.ldx,
                        p.q, scale, p.rows, p.k);
  }

  // Rows longer than the register shapes hold: two passes through 256 threads.
  template <int kVec>
  static void launch_two_pass(const QuantizeParams& p, float* scale, cudaStream_t stream) {
    launch_programmatic(kPerTokenOp,
                        with_carveout<kFullSmem, quantize_per_token_kernel<T, kVec, 256, 0, kFullSmem>>(kPerTokenOp),
                        dim3(static_cast<unsigned>(p.rows)), dim3(256), stream, static_cast<const T*>(p.x), p.ldx, p.q,
                        scale, p.rows, p.k);
  }

  // Up to this many rows the kernel is latency-bound: a block per row, and each thread's
  // serial work is what lasts. 384 rows, 512 on rows of up to 512 vectors (bf16: K <= 4096),
  // where the longer rows run the throughput shapes faster. [evidence quant.cuda-serving-shapes]
  static int64_t serving_rows(int64_t vecs) { return vecs <= 256 * 2 ? 512 : 384; }

  // Serving rows: one row per block, 256 or 512 threads with 2 to 8 vectors each: 256 x 2 at
  // K = 4096, 512 x 2 at 8192, 512 x 4 at 14336, 512 x 8 at 28672 (bf16); the fastest of every
  // 256 / 512 / 1024-thread shape and of a row over a cluster. [evidence quant.cuda-serving-shapes]
  template <int kVec>
  static void per_token_serving(const QuantizeParams& p, float* scale, cudaStream_t stream) {
    const int64_t vecs = p.k / kVec;
    if (vecs <= 256 * 2) launch_per_token<kVec, 256, 2>(p, scale, stream);
    else if (vecs <= 512 * 2) launch_per_token<kVec, 512, 2>(p, scale, stream);
    else if (vecs <= 512 * 4) launch_per_token<kVec, 512, 4>(p, scale, stream);
    else if (vecs <= 512 * 8) launch_per_token<kVec, 512, 8>(p, scale, stream);
    else launch_two_pass<kVec>(p, scale, stream);
  }

  template <int kVec>
  static void per_token(const QuantizeParams& p, float* scale, cudaStream_t stream) {
    const int64_t vecs = p.k / kVec;
    // Rows of up to 256 vectors (bf16: K <= 2048) keep the shapes below (not measured).
    if (p.rows <= serving_rows(vecs) && vecs > 64 * 4) return per_token_serving<kVec>(p, scale, stream);
    if (vecs <= 32 * 4) launch_per_token<kVec, 32, 4>(p, scale, stream);
    else if (vecs <= 64 * 4) launch_per_token<kVec, 64, 4>(p, scale, stream);
    else if (vecs <= 128 * 4) launch_per_token<kVec, 128, 4>(p, scale, stream);
    else if (vecs <= 256 * 8) launch_per_token<kVec, 256, 8>(p, scale, stream);
    else if (vecs <= 512 * 8) launch_per_token<kVec, 512, 8>(p, scale, stream);
    else launch_two_pass<kVec>(p, scale, stream);
  }

  template <int kVec>
  static void static_quant(const QuantizeParams& p, const float* scale, const void* zp, bool zp_int32,
                           cudaStream_t stream) {
    const T* x = static_cast<const T*>(p.x);
    if (p.k / kVec <= 32 * kWarpRowVecs) {
      const int64_t blocks = (p.rows + kBlockThreads / 32 - 1) / (kBlockThreads / 32);
      launch_programmatic(kStaticOp, with_carveout<kFullSmem, quantize_static_kernel<T, kVec, 32, kFullSmem>>(kStaticOp),
                          dim3(static_cast<unsigned>(blocks)),
                          dim3(kBlockThreads), stream, x, p.ldx, p.q, p.rows, p.k, scale, zp, zp_int32);
    } else {
      launch_programmatic(kStaticOp,
                          with_carveout<kFullSmem, quantize_static_kernel<T, kVec, kBlockThreads, kFullSmem>>(kStaticOp),
                          dim3(static_cast<unsigned>(p.rows)), dim3(kBlockThreads), stream, x, p.ldx, p.q, p.rows, p.k,
                          scale, zp, zp_int32);
    }
  }
};

template <template <class> class Fn, class... Args>
void by_dtype(QuantInDtype dtype, Args&&... args) {
  switch (dtype) {
    case QuantInDtype::kFloat32: return Fn<float>::run(args...);
    case QuantInDtype::kFloat16: return Fn<__half>::run(args...);
    case QuantInDtype::kBFloat16: return Fn<__nv_bfloat16>::run(args...);
  }
  throw std::runtime_error("quantize: unknown input dtype " + std::to_string(int(dtype)));
}

template <class T>
struct PerToken {
  template <bool kFullSmem>
  static void launch(const QuantizeParams& p, float* scale, cudaStream_t stream) {
    using L = Launch<T, kFullSmem>;
    if (L::vectorizable(p)) {
      L::template per_token<L::kVec16>(p, scale, stream);
    } else {
      L::template per_token<1>(p, scale, stream);
    }
  }
  static void run(const QuantizeParams& p, float* scale, cudaStream_t stream) {
    p.next_kernel_full_smem ? launch<true>(p, scale, stream) : launch<false>(p, scale, stream);
  }
};

template <class T>
struct Static {
  template <bool kFullSmem>
  static void launch(const QuantizeParams& p, const float* scale, const void* zp, bool zp_int32,
                     cudaStream_t stream) {
    using L = Launch<T, kFullSmem>;
    if (L::vectorizable(p)) {
      L::template static_quant<L::kVec16>(p, scale, zp, zp_int32, stream);
    } else {
      L::template static_quant<1>(p, scale, zp, zp_int32, stream);
    }
  }
  static void run(const QuantizeParams& p, const float* scale, const void* zp, bool zp_int32,
                  cudaStream_t stream) {
    p.next_kernel_full_smem ? launch<true>(p, scale, zp, zp_int32, stream)
                            : launch<false>(p, scale, zp, zp_int32, stream);
  }
};

void check_params(const QuantizeParams& p, const char* op) {
  if (p.rows < 0 || p.k < 1 || p.ldx < (p.rows > 1 ? p.k : 0) || p.x == nullptr || p.q == nullptr ||
      p.rows > 2147483647) {
    throw std::runtime_error(std::string(op) + ": expected rows in [0, 2^31), k >= 1, ldx >= k, non-null x and q; got rows=" +
                             std::to_string(p.rows) + " k=" + std::to_string(p.k) + " ldx=" + std::to_string(p.ldx));
  }
}

}  // namespace

void quantize_per_token_sm90(const QuantizeParams& params, float* scale, cudaStream_t stream) {
  if (params.rows == 0) return;
  check_params(params, "quantize_per_token_sm90");
  by_dtype<PerToken>(params.in_dtype, params, scale, stream);
}

void quantize_static_sm90(const QuantizeParams& params, const float* scale, const void* zero_point,
                          bool zero_point_is_int32, cudaStream_t stream) {
  if (params.rows == 0) return;
  check_params(params, "quantize_static_sm90");
  by_dtype<Static>(params.in_dtype, params, scale, zero_point, zero_point_is_int32, stream);
}

}  // namespace w8a8
