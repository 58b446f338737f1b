// Lab: the per-token kernel over a persistent grid (python -m benchmarks.sweep.quant --streamed).
// Each block takes every gridDim.x-th group of rows and loads its next group while it reduces and
// stores this one, so a block's loads stay in flight through its stores, and the bytes in flight
// (blocks x rows per block x row bytes) are set by the grid, not by how many blocks fit. The
// product's pieces (quantize_per_token.cuh) at the product's vector width; bf16 rows.
#include <cstdint>

#include <cuda_bf16.h>

#include "common/programmatic_launch.cuh"
#include "quantize/quantize_per_token.cuh"
#include "quant_shapes.h"

namespace w8a8::qsweep {
namespace {

using T = __nv_bfloat16;
constexpr int kVec = 8;

template <int kThreadsPerRow, int kMaxVecs>
__device__ __forceinline__ void load_group(const T* __restrict__ x, int64_t ldx, int64_t rows, int64_t vecs,
                                           int64_t group, Raw<T, kVec> (&buf)[kMaxVecs]) {
  constexpr int kRowsPerBlock = block_threads<kThreadsPerRow>() / kThreadsPerRow;
  const int lane = threadIdx.x % kThreadsPerRow;
  int64_t row = group * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  if (row >= rows) row = 0;  // past the end: row 0 read, nothing stored
  const T* xr = x + row * ldx;
#pragma unroll
  for (int j = 0; j < kMaxVecs; ++j) {
    const int64_t idx = lane + int64_t(j) * kThreadsPerRow;
    buf[j] = load_raw<T, kVec>(xr + (idx < vecs ? idx : vecs - 1) * kVec);
  }
}

template <int kThreadsPerRow, int kMaxVecs, bool kFullSmem>
__global__ void __launch_bounds__(block_threads<kThreadsPerRow>())
    streamed_kernel(const T* __restrict__ x, int64_t ldx, int8_t* __restrict__ q, float* __restrict__ scale_out,
                    int64_t rows, int64_t k) {
  wait_for_prior_grids();
  allow_dependent_launch();
  constexpr int kRowsPerBlock = block_threads<kThreadsPerRow>() / kThreadsPerRow;
  const int64_t groups = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const int64_t vecs = k / kVec;
  const int lane = threadIdx.x % kThreadsPerRow;
  int64_t group = blockIdx.x;  // the grid has at most `groups` blocks
  Raw<T, kVec> cur[kMaxVecs], next[kMaxVecs];
  load_group<kThreadsPerRow, kMaxVecs>(x, ldx, rows, vecs, group, cur);
  for (; group < groups; group += gridDim.x) {
    if (group + gridDim.x < groups) load_group<kThreadsPerRow, kMaxVecs>(x, ldx, rows, vecs, group + gridDim.x, next);
    const int64_t row = group * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
    const bool row_ok = row < rows;
    RowMax<T> row_max;
#pragma unroll
    for (int j = 0; j < kMaxVecs; ++j) row_max.template add<kVec>(cur[j]);
    float amax;
    bool bad;
    row_max.finish(amax, bad);
    reduce_row<kThreadsPerRow>(amax, bad);
    if constexpr (kThreadsPerRow > 32) __syncthreads();  // reduce_row's shared slots are written again next group
    const RowScale rs(amax, bad);
    if (row_ok && lane == 0) scale_out[row] = rs.stored;
    int8_t* qr = q + row * k;
#pragma unroll
    for (int j = 0; j < kMaxVecs; ++j) {
      const int64_t idx = lane + int64_t(j) * kThreadsPerRow;
      if (row_ok && idx < vecs) {
        float v[kVec];
        widen<T, kVec>(cur[j], v);
        store(qr + idx * kVec, quantize_per_token_codes<T, kVec>(v, rs));
      }
    }
#pragma unroll
    for (int j = 0; j < kMaxVecs; ++j) cur[j] = next[j];
  }
}

template <int kThreads, int kVecs, bool kFull>
void run_streamed(const void* x, int64_t ldx, int8_t* q, float* scale, int64_t rows, int64_t k, int64_t blocks,
                  cudaStream_t stream) {
  constexpr auto kKernel = streamed_kernel<kThreads, kVecs, kFull>;
  launch_programmatic("quantize_per_token streamed", with_carveout<kFull, kKernel>("quantize_per_token streamed"),
                      dim3(static_cast<unsigned>(blocks)), dim3(block_threads<kThreads>()), stream,
                      static_cast<const T*>(x), ldx, q, scale, rows, k);
}

}  // namespace

#define W8A8_QSWEEP_STREAMED(S) S(64, 8) S(128, 4) S(256, 2) S(128, 8) S(256, 4) S(512, 2) S(256, 7) S(512, 4) \
  S(512, 7) S(1024, 4)
#define W8A8_QSWEEP_ENTRY(t, v) StreamedShape{t, v, &run_streamed<t, v, false>, &run_streamed<t, v, true>},
const StreamedShape kStreamed[] = {W8A8_QSWEEP_STREAMED(W8A8_QSWEEP_ENTRY)};
#undef W8A8_QSWEEP_ENTRY
const int kNumStreamed = sizeof(kStreamed) / sizeof(kStreamed[0]);

}  // namespace w8a8::qsweep
