// The per-element dequantization of every w8a8 scaled-matmul epilogue (the
// sm90 EVT in sm90/scaled_mm_sm90_epilogue.cuh, the sm80 one in
// sm80/scaled_mm_sm80_epilogue.cuh, the decode kernels' store in
// decode/decode_kernel_common.cuh and split_k_dequant in
// scaled_mm_split_k_dequant.cuh call this, so the math is written once):
//
//     out = (a_scale * (b_scale * float(acc)) + bias_f32) + bias_out
//
// each * and + an IEEE fp32 operation rounded to nearest and never fused into
// an FMA, so the result is bit-identical to w8a8/reference.py.
#pragma once

#include <cutlass/array.h>
#include <cutlass/cutlass.h>

namespace w8a8 {

// One element, in device code: __f*_rn rounds to nearest and keeps nvcc from
// contracting the product and sum into an FMA (the vector functor below, the
// decode kernels and split_k_dequant call this).
CUTLASS_DEVICE float dequantize_rn(float acc, float b_scale, float a_scale, float bias_f32, float bias_out) {
  return __fadd_rn(__fadd_rn(__fmul_rn(a_scale, __fmul_rn(b_scale, acc)), bias_f32), bias_out);
}

// Inputs arrive already widened to fp32 (acc by round-to-nearest int32 ->
// fp32, bias exactly). At most one of
// the two bias inputs is present; the absent one reads as -0 and x + (-0) is
// exactly x for every x, so the sum equals the single-bias formula bit for bit.
template <class T>
struct DequantizeFn {
  CUTLASS_HOST_DEVICE T operator()(T acc, T b_scale, T a_scale, T bias_f32, T bias_out) const {
    return (a_scale * (b_scale * acc) + bias_f32) + bias_out;
  }
};

template <int N>
struct DequantizeFn<cutlass::Array<float, N>> {
  CUTLASS_DEVICE cutlass::Array<float, N> operator()(
      cutlass::Array<float, N> const& acc, cutlass::Array<float, N> const& b_scale,
      cutlass::Array<float, N> const& a_scale, cutlass::Array<float, N> const& bias_f32,
      cutlass::Array<float, N> const& bias_out) const {
    cutlass::Array<float, N> out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) {
      out[i] = dequantize_rn(acc[i], b_scale[i], a_scale[i], bias_f32[i], bias_out[i]);
    }
    return out;
  }
};

}  // namespace w8a8
