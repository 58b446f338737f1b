// Second kernel of a split-K scaled matmul (the sm80 split-K configs,
// sm80/scaled_mm_sm80_split_k.cuh) whose GEMM writes int32 partial sums, one
// [M, N] slab per K range (pitch N, slab stride M * N): sums the
// slabs (exact int32, as one K loop would) and applies the dequantization of
// scaled_mm_dequant.cuh, so the output has the bits of the data-parallel
// kernels and of w8a8/reference.py.
//
// One thread per 8 output columns of a row: two 16-byte loads per slab, one
// 16-byte store (N % 8 == 0, out 16-byte aligned, ldd % 8 == 0: the rules of
// scaled_mm_problem.h). Scales and bias are read one element at a time, so
// they need only their natural alignment, as in the GEMM epilogues.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>
#include <cutlass/array.h>
#include <cutlass/numeric_conversion.h>

#include "common/scaled_mm_dequant.cuh"
#include "common/scaled_mm_problem.h"

namespace w8a8 {

constexpr int kSplitKDequantColumns = 8;    // output columns per thread: one 16-byte store of bf16 / fp16
constexpr int kSplitKDequantThreads = 256;  // per block

template <class ElementOut>
__global__ void __launch_bounds__(kSplitKDequantThreads)
    split_k_dequant_kernel(ScaledMmProblem p, const int32_t* __restrict__ partials, int slabs) {
  constexpr int kCols = kSplitKDequantColumns;
  const int64_t vectors_per_row = p.n / kCols;
  const int64_t vector = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vector >= p.m * vectors_per_row) return;
  const int64_t row = vector / vectors_per_row;
  const int64_t col = (vector % vectors_per_row) * kCols;
  const int64_t slab_stride = p.m * p.n;

  int32_t acc[kCols] = {};
  const int32_t* slab = partials + row * p.n + col;
  for (int s = 0; s < slabs; ++s, slab += slab_stride) {
    const int4 low = __ldcs(reinterpret_cast<const int4*>(slab));  // read once: evict first
    const int4 high = __ldcs(reinterpret_cast<const int4*>(slab) + 1);
    acc[0] += low.x, acc[1] += low.y, acc[2] += low.z, acc[3] += low.w;
    acc[4] += high.x, acc[5] += high.y, acc[6] += high.z, acc[7] += high.w;
  }

  const float a_scale = p.a_scale[p.a_scale_per_token ? row : 0];
  const float* bias_f32 = p.bias_kind == ScaledMmBias::kFloat32 ? static_cast<const float*>(p.bias) : nullptr;
  const ElementOut* bias_out =
      p.bias_kind == ScaledMmBias::kOutDtype ? static_cast<const ElementOut*>(p.bias) : nullptr;
  cutlass::NumericConverter<ElementOut, float, cutlass::FloatRoundStyle::round_to_nearest> to_out;
  cutlass::Array<ElementOut, kCols> out;
#pragma unroll
  for (int i = 0; i < kCols; ++i) {
    const int64_t c = col + i;
    // As in the epilogues: int32 -> fp32 rounded to nearest; an absent bias reads as -0.
    out[i] = to_out(dequantize_rn(__int2float_rn(acc[i]), p.b_scale[p.b_scale_per_channel ? c : 0], a_scale,
                                  bias_f32 ? bias_f32[c] : -0.0f, bias_out ? float(bias_out[c]) : -0.0f));
  }
  *reinterpret_cast<cutlass::Array<ElementOut, kCols>*>(static_cast<ElementOut*>(p.out) + row * p.ldd + col) = out;
}

// Enqueues the kernel on `stream`; returns the launch error (cudaSuccess when queued).
template <class ElementOut>
cudaError_t split_k_dequant(const ScaledMmProblem& p, const int32_t* partials, int slabs, cudaStream_t stream) {
  const int64_t vectors = p.m * (p.n / kSplitKDequantColumns);
  const int64_t blocks = (vectors + kSplitKDequantThreads - 1) / kSplitKDequantThreads;
  split_k_dequant_kernel<ElementOut><<<static_cast<unsigned>(blocks), kSplitKDequantThreads, 0, stream>>>(
      p, partials, slabs);
  return cudaGetLastError();
}

}  // namespace w8a8
