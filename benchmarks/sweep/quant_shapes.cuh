// The shapes of quant_shapes.h: the product's kernel template at each (threads per row, vectors
// per thread). quant_shapes_plain.cu and quant_shapes_full.cu each instantiate the list at one
// shared-memory split, so that the two tables compile in parallel.
#pragma once

#include <cuda_bf16.h>

#include "common/programmatic_launch.cuh"
#include "quantize/quantize_per_token.cuh"
#include "quant_shapes.h"

// Every row mapping from one warp to 1024 threads per row, 1..8, 12 and 16 vectors each, and the
// two-pass kernel at 256, 512 and 1024 threads.
#define W8A8_QSWEEP_SHAPES(S)                                                                         \
  S(32, 1) S(32, 2) S(32, 3) S(32, 4) S(32, 5) S(32, 6) S(32, 7) S(32, 8) S(32, 12) S(32, 16)           \
  S(64, 1) S(64, 2) S(64, 3) S(64, 4) S(64, 5) S(64, 6) S(64, 7) S(64, 8) S(64, 12) S(64, 16)           \
  S(128, 1) S(128, 2) S(128, 3) S(128, 4) S(128, 5) S(128, 6) S(128, 7) S(128, 8) S(128, 12) S(128, 16) \
  S(256, 1) S(256, 2) S(256, 3) S(256, 4) S(256, 5) S(256, 6) S(256, 7) S(256, 8) S(256, 12) S(256, 16) \
  S(512, 1) S(512, 2) S(512, 3) S(512, 4) S(512, 5) S(512, 6) S(512, 7) S(512, 8) S(512, 12) S(512, 16) \
  S(1024, 1) S(1024, 2) S(1024, 3) S(1024, 4) S(1024, 5) S(1024, 6) S(1024, 7) S(1024, 8)               \
  S(256, 0) S(512, 0) S(1024, 0)

namespace w8a8::qsweep {
namespace {

template <int kThreads, int kVecs, bool kFull>
void run(const void* x, int64_t ldx, int8_t* q, float* scale, int64_t rows, int64_t k, cudaStream_t stream) {
  constexpr int kBlock = block_threads<kThreads>();
  constexpr int kRowsPerBlock = kBlock / kThreads;
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  constexpr auto kKernel = quantize_per_token_kernel<__nv_bfloat16, 8, kThreads, kVecs, kFull>;
  launch_programmatic("quantize_per_token sweep", with_carveout<kFull, kKernel>("quantize_per_token sweep"),
                      dim3(static_cast<unsigned>(blocks)), dim3(kBlock), stream,
                      static_cast<const __nv_bfloat16*>(x), ldx, q, scale, rows, k);
}

}  // namespace
}  // namespace w8a8::qsweep
