// Torch-free interface of the CUDA activation quantizers (the kernels of the ops
// w8a8::quantize_per_token_sm90 / quantize_static_sm90, torch/quantize.cpp).
//
// The math is w8a8/reference.py, bit for bit:
//   per token: scale[r] = amax(|x[r, :]|) / 127                 (fp32, IEEE division)
//              q[r, k]  = clamp(rint(x[r, k] / scale[r]), -128, 127)   (half to even)
//              an all-zero row: q = 0, scale = 0; a row holding Inf/NaN: q = 0, scale = NaN.
//   static:    q = clamp(rint(x / scale) + zero_point, -128, 127)
//              (+Inf -> 508 + zp, -Inf -> -512 + zp before the clamp; NaN -> zero_point)
//
// x is [rows, k] with row pitch ldx elements and unit column stride, q is
// [rows, k] packed, scale [rows]. This header compiles without CUDA or torch headers.
#pragma once

#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace w8a8 {

enum class QuantInDtype : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

struct QuantizeParams {
  const void* x = nullptr;  // [rows, k], in_dtype, row pitch ldx (elements)
  int8_t* q = nullptr;      // [rows, k], packed
  QuantInDtype in_dtype = QuantInDtype::kBFloat16;
  int64_t rows = 0, k = 0, ldx = 0;
  // The caller launches a CUTLASS GEMM (nearly all of an SM's shared memory) right after
  // this kernel: the quantizer then runs at the largest shared-memory split, so that the
  // GEMM's CTAs, launched early as its programmatic dependents, can become resident beside
  // its blocks (common/programmatic_launch.cuh). Not before the decode kernels, which run
  // slower after it. [evidence quant.full-smem-split]
  bool next_kernel_full_smem = false;
  int sm_count = 0;  // the device's SMs (the ring kernel's grid); >= 1
};

// Enqueues per-token quantization on `stream`; scale is [rows] fp32. rows >= 0, k >= 1.
void quantize_per_token_sm90(const QuantizeParams& params, float* scale, cudaStream_t stream);

// Enqueues static quantization on `stream`. scale: one fp32 value on the device;
// zero_point: null, or one int8 (zero_point_is_int32 = false) / int32 value on the device.
void quantize_static_sm90(const QuantizeParams& params, const float* scale, const void* zero_point,
                          bool zero_point_is_int32, cudaStream_t stream);

}  // namespace w8a8
