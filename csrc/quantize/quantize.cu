// CUDA activation quantizers, bit-identical to w8a8/reference.py (see quantize.h).
//
// Exactness: divisions are __fdiv_rn (IEEE round to nearest, whatever the
// compiler flags), rounding is half to even (rintf in the static kernel, the
// magic-number sum in the per-token one: kRintMagic); the per-token kernel's
// row max keeps Inf and tests NaN apart (RowMax), and a row holding either
// takes the reference's special rules, whatever its max.
//
// Launch shapes of the per-token kernel (Launch below picks one per call):
//   * bf16/fp16 rows of 2049..3584 vectors from 320 rows: 512 threads per row, 7 vectors each,
//     a persistent grid with the next two rows copied into shared memory while one is quantized
//     (the ring kernel);
//   * 32..512 threads per row, the row held in registers, 2 to 8 vectors per thread at
//     most (bf16/fp16: K <= 32768): x is read from HBM once; up to 384 or 2048 rows
//     (Launch::serving_rows) one row per block with more threads (latency), above that the
//     throughput shapes;
//   * 256 threads per row, two passes - longer rows: amax, then quantize (the second
//     read mostly hits L2).
// A "vector" is 16 bytes of x when x's rows are 16-byte aligned and K is a
// multiple of the vector width; otherwise one element (same code, kVec = 1).
//
// Here: the static kernel, the launch choice and the entry points; the per-token kernel is in
// quantize_per_token.cuh, the pieces both kernels use in quantize_common.cuh.
#include <cstdint>
#include <stdexcept>
#include <string>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/programmatic_launch.cuh"
#include "quantize/quantize.h"
#include "quantize/quantize_common.cuh"
#include "quantize/quantize_per_token.cuh"

namespace w8a8 {
namespace {

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
  // kernel's optimum at K = 4096); longer rows by 256 or 512 threads with the fewest of 4, 7
  // or 8 vectors each that hold the row (bf16: 256 x 4 at K = 8192, 256 x 7 at 14336, 512 x 7
  // at 28672; a slot past the row's end is a load and registers for nothing); rows beyond that
  // take two passes. [evidence quant.cuda-throughput-shapes]
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
  // serial work is what lasts. 384 rows, where the longer rows run the throughput shapes
  // faster; 2048 on rows of up to 512 vectors (bf16: K <= 4096), where 256 x 2 stays ahead in
  // the layer up to there. [evidence quant.cuda-serving-shapes]
  static int64_t serving_rows(int64_t vecs) { return vecs <= 256 * 2 ? 2048 : 384; }

  // Serving rows: one row per block, 256 or 512 threads with 2 to 8 vectors each: 256 x 2 at
  // K = 4096, 512 x 2 at 8192, 512 x 4 at 14336, 512 x 7 at 28672 (bf16); the fastest of every
  // 256 / 512 / 1024-thread shape and of a row over a cluster. [evidence quant.cuda-serving-shapes]
  template <int kVec>
  static void per_token_serving(const QuantizeParams& p, float* scale, cudaStream_t stream) {
    const int64_t vecs = p.k / kVec;
    if (vecs <= 256 * 2) launch_per_token<kVec, 256, 2>(p, scale, stream);
    else if (vecs <= 512 * 2) launch_per_token<kVec, 512, 2>(p, scale, stream);
    else if (vecs <= 512 * 4) launch_per_token<kVec, 512, 4>(p, scale, stream);
    else if (vecs <= 512 * 7) launch_per_token<kVec, 512, 7>(p, scale, stream);
    else if (vecs <= 512 * 8) launch_per_token<kVec, 512, 8>(p, scale, stream);
    else launch_two_pass<kVec>(p, scale, stream);
  }

  // 16-bit rows of 2049..3584 vectors (bf16: K = 16392..28672, where the shapes below hold a row
  // as 512 x 7) from 320 rows: the ring kernel, 512 x 7 with three groups (rows) in the ring, one
  // block per SM looping over the rows; at 256 rows the register shape was ahead in the layer.
  // [evidence quant.cuda-ring]
  template <int kVec>
  static bool per_token_ring(const QuantizeParams& p, float* scale, cudaStream_t stream) {
    if constexpr (sizeof(T) == 2 && kVec * sizeof(T) == 16) {
      constexpr int64_t kRingMinRows = 320;
      const int64_t vecs = p.k / kVec;
      if (p.rows < kRingMinRows || vecs <= 256 * 8 || vecs > 512 * 7) return false;
      constexpr int kBytes = ring_bytes<512, 7, 3>();
      constexpr auto kKernel = quantize_per_token_ring_kernel<T, kVec, 512, 7, 3, kFullSmem>;
      with_carveout<kFullSmem, kKernel>(kPerTokenOp);
      const int64_t blocks = p.rows < p.sm_count ? p.rows : p.sm_count;
      launch_programmatic_smem(kPerTokenOp, with_dynamic_smem<kKernel, kBytes>(kPerTokenOp),
                               dim3(static_cast<unsigned>(blocks)), dim3(512), kBytes, stream,
                               static_cast<const T*>(p.x), p.ldx, p.q, scale, p.rows, p.k);
      return true;
    }
    return false;
  }

  template <int kVec>
  static void per_token(const QuantizeParams& p, float* scale, cudaStream_t stream) {
    const int64_t vecs = p.k / kVec;
    if (per_token_ring<kVec>(p, scale, stream)) return;
    // Rows of up to 256 vectors (bf16: K <= 2048) keep the shapes below (not measured).
    if (p.rows <= serving_rows(vecs) && vecs > 64 * 4) return per_token_serving<kVec>(p, scale, stream);
    if (vecs <= 32 * 4) launch_per_token<kVec, 32, 4>(p, scale, stream);
    else if (vecs <= 64 * 4) launch_per_token<kVec, 64, 4>(p, scale, stream);
    else if (vecs <= 128 * 4) launch_per_token<kVec, 128, 4>(p, scale, stream);
    else if (vecs <= 256 * 4) launch_per_token<kVec, 256, 4>(p, scale, stream);
    else if (vecs <= 256 * 7) launch_per_token<kVec, 256, 7>(p, scale, stream);
    else if (vecs <= 256 * 8) launch_per_token<kVec, 256, 8>(p, scale, stream);
    else if (vecs <= 512 * 7) launch_per_token<kVec, 512, 7>(p, scale, stream);
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
      p.rows > 2147483647 || p.sm_count < 1) {
    throw std::runtime_error(std::string(op) + ": expected rows in [0, 2^31), k >= 1, ldx >= k, non-null x and q, "
                             "sm_count >= 1; got rows=" + std::to_string(p.rows) + " k=" + std::to_string(p.k) +
                             " ldx=" + std::to_string(p.ldx) + " sm_count=" + std::to_string(p.sm_count));
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
