// Pieces shared by the two plain-CUDA decode kernels of the sm90 table (the
// dp4a GEMV, scaled_mm_gemv.cu, and the mma.sync skinny GEMM,
// scaled_mm_skinny.cu): their kernel arguments and the host code that builds
// them, the streamed weight load, the epilogue of one output element and the
// programmatic-dependent launch. Both kernels compute the ScaledMmProblem of
// common/scaled_mm_problem.h with exact int32 sums, so one epilogue serves
// both. Arch-neutral CUDA (mma.sync and dp4a; sm_80 and later).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/programmatic_launch.cuh"
#include "common/scaled_mm_dequant.cuh"
#include "common/scaled_mm_problem.h"

namespace w8a8::decode {

// 16 bytes of weights, read once: the non-coherent path without L1 allocation.
__device__ __forceinline__ int4 load_streamed(const int4* p) {
  int4 v;
  asm("ld.global.nc.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

template <class Out>
__device__ __forceinline__ float widen(Out v);
template <>
__device__ __forceinline__ float widen<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
__device__ __forceinline__ float widen<__half>(__half v) { return __half2float(v); }

template <class Out>
__device__ __forceinline__ Out narrow(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half narrow<__half>(float v) { return __float2half_rn(v); }

// What the epilogue of an output element reads, besides its int32 sum.
struct EpilogueArgs {
  void* out;
  const float* a_scale;
  const float* b_scale;
  const void* bias;
  int64_t ldd;
  bool a_per_token, b_per_channel;
  ScaledMmBias bias_kind;
};

// A decode kernel's argument: the operands, the epilogue inputs and the work split.
struct DecodeArgs {
  const int8_t* a;
  const int8_t* b;
  EpilogueArgs epilogue;
  int m, n;
  int k_chunks;  // K / 16
  int64_t lda, ldb;
  int k_split;      // warps sharing one weight row (GEMV) or 16-row group (skinny GEMM)
  int token_tiles;  // ceil(M / tokens per CTA)
};

// The arguments of a call. `p` keeps the problem contract (checked once per
// call by the caller, scaled_mm_sm90_plan); k_split must be 1, 2, 4 or 8,
// otherwise std::runtime_error with the message prefixed by `who`.
inline DecodeArgs make_decode_args(const ScaledMmProblem& p, int k_split, int64_t tokens_per_cta, const char* who) {
  if (!(k_split == 1 || k_split == 2 || k_split == 4 || k_split == 8)) {
    throw std::runtime_error(std::string(who) + ": expected k_split 1, 2, 4 or 8, got " + std::to_string(k_split));
  }
  const EpilogueArgs epilogue{p.out, p.a_scale, p.b_scale, p.bias, p.ldd,
                              p.a_scale_per_token, p.b_scale_per_channel, p.bias_kind};
  return DecodeArgs{p.a, p.b, epilogue, static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k / 16),
                    p.lda, p.ldb, k_split, static_cast<int>((p.m + tokens_per_cta - 1) / tokens_per_cta)};
}

// out[m, row] = the GEMM epilogues' math (dequantize_rn) applied to the exact sum.
template <class Out>
__device__ __forceinline__ void store_output(const EpilogueArgs& e, int m, int row, int32_t sum) {
  const float a_scale = e.a_scale[e.a_per_token ? m : 0];
  const float b_scale = e.b_scale[e.b_per_channel ? row : 0];
  // The absent bias reads as -0 (x + -0 == x bit for bit), as in the GEMM epilogues.
  float bias_f32 = -0.0f, bias_out = -0.0f;
  if (e.bias_kind == ScaledMmBias::kFloat32) bias_f32 = static_cast<const float*>(e.bias)[row];
  if (e.bias_kind == ScaledMmBias::kOutDtype) bias_out = widen(static_cast<const Out*>(e.bias)[row]);
  const float value = dequantize_rn(__int2float_rn(sum), b_scale, a_scale, bias_f32, bias_out);
  static_cast<Out*>(e.out)[int64_t(m) * e.ldd + row] = narrow<Out>(value);
}

using DecodeKernel = void (*)(DecodeArgs);

// Launches the bf16 or the fp16 instantiation of a decode kernel, by
// out_dtype, as a programmatic dependent (common/programmatic_launch.cuh): the
// kernel calls wait_for_prior_grids before its first load.
inline void launch_programmatic(DecodeKernel bf16_kernel, DecodeKernel fp16_kernel, ScaledMmOutDtype out_dtype,
                                int64_t ctas, unsigned threads, cudaStream_t stream, const DecodeArgs& args,
                                const char* who) {
  if (ctas > 2147483647) {
    throw std::runtime_error(std::string(who) + ": expected fewer than 2^31 CTAs, got " + std::to_string(ctas));
  }
  const DecodeKernel kernel = out_dtype == ScaledMmOutDtype::kBFloat16 ? bf16_kernel : fp16_kernel;
  w8a8::launch_programmatic(who, kernel, dim3(static_cast<unsigned>(ctas)), dim3(threads), stream, args);
}

}  // namespace w8a8::decode
