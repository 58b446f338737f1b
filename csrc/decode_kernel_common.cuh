// Pieces shared by the two plain-CUDA decode kernels of the sm90 op (the dp4a
// GEMV, scaled_mm_gemv.cu, and the mma.sync skinny GEMM, scaled_mm_skinny.cu):
// the streamed weight load, the epilogue of one output element and the
// programmatic-dependent launch. Both kernels compute the ScaledMmProblem of
// scaled_mm_problem.h with exact int32 sums, so one epilogue serves both.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "scaled_mm_dequant.cuh"
#include "scaled_mm_problem.h"

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

// Launches `kernel` with programmatic stream serialization: the quantizer
// before it (which calls allow_dependent_launch) lets its CTAs become resident
// early; the kernel calls wait_for_prior_grids before its first load.
template <class Kernel, class Args>
void launch_programmatic(Kernel kernel, unsigned ctas, unsigned threads, cudaStream_t stream, const Args& args,
                         const char* who) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(ctas);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, args);
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(who) + ": launch failed: " + cudaGetErrorString(status));
  }
}

}  // namespace w8a8::decode
