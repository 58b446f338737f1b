// Lab: the per-token kernel on a persistent grid with a ring of kStages row groups in shared
// memory (python -m benchmarks.sweep.quant --pipelined). Each block takes every gridDim.x-th
// group of rows; its threads copy their vectors of the group kStages - 1 ahead into the ring
// (cp.async, 16 bytes each) while they reduce, quantize and store the current one, so a block
// keeps kStages - 1 groups in flight through its stores. A thread reads back only the slots it
// copied (no barrier for the data). The product's row code (quantize_per_token.cuh); bf16 rows.
#include <cstdint>
#include <stdexcept>
#include <string>

#include <cuda_bf16.h>

#include "common/programmatic_launch.cuh"
#include "quantize/quantize_per_token.cuh"
#include "quant_shapes.h"

namespace w8a8::qsweep {
namespace {

using T = __nv_bfloat16;
constexpr int kVec = 8;

__device__ __forceinline__ void copy_async_16(void* smem, const void* global) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(global) : "memory");
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

template <int kThreadsPerRow, int kMaxVecs, int kStages>
constexpr int ring_bytes() {
  return kStages * kMaxVecs * block_threads<kThreadsPerRow>() * 16;
}

template <int kThreadsPerRow, int kMaxVecs, int kStages, bool kFullSmem>
__global__ void __launch_bounds__(block_threads<kThreadsPerRow>())
    pipelined_kernel(const T* __restrict__ x, int64_t ldx, int8_t* __restrict__ q, float* __restrict__ scale_out,
                     int64_t rows, int64_t k) {
  extern __shared__ uint4 ring[];  // [kStages][kMaxVecs][block threads]: a thread's slots a warp apart
  constexpr int kBlock = block_threads<kThreadsPerRow>();
  constexpr int kRowsPerBlock = kBlock / kThreadsPerRow;
  wait_for_prior_grids();
  allow_dependent_launch();
  const int64_t groups = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const int64_t vecs = k / kVec;
  const int lane = threadIdx.x % kThreadsPerRow;
  const int sub = threadIdx.x / kThreadsPerRow;
  auto issue = [&](int64_t group, int stage) {
    if (group < groups) {
      int64_t row = group * kRowsPerBlock + sub;
      if (row >= rows) row = 0;  // past the end: row 0 read, nothing stored
      const T* xr = x + row * ldx;
#pragma unroll
      for (int j = 0; j < kMaxVecs; ++j) {
        const int64_t idx = lane + int64_t(j) * kThreadsPerRow;
        copy_async_16(&ring[(stage * kMaxVecs + j) * kBlock + threadIdx.x], xr + (idx < vecs ? idx : vecs - 1) * kVec);
      }
    }
    commit_copies();  // (empty past the last group: the count of groups stays one per stage)
  };
  int64_t group = blockIdx.x;  // the grid has at most `groups` blocks
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(group + int64_t(s) * gridDim.x, s);
  int stage = 0;
  for (; group < groups; group += gridDim.x) {
    issue(group + int64_t(kStages - 1) * gridDim.x, stage == 0 ? kStages - 1 : stage - 1);
    wait_copies<kStages - 1>();  // this thread's copies of `group` have landed
    Raw<T, kVec> cur[kMaxVecs];
#pragma unroll
    for (int j = 0; j < kMaxVecs; ++j) cur[j] = ring[(stage * kMaxVecs + j) * kBlock + threadIdx.x];
    const int64_t row = group * kRowsPerBlock + sub;
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
    stage = stage == kStages - 1 ? 0 : stage + 1;
  }
  wait_copies<0>();
}

template <int kThreads, int kVecs, int kStages, bool kFull>
void run_pipelined(const void* x, int64_t ldx, int8_t* q, float* scale, int64_t rows, int64_t k, int64_t blocks,
                   cudaStream_t stream) {
  constexpr auto kKernel = pipelined_kernel<kThreads, kVecs, kStages, kFull>;
  constexpr int kBytes = ring_bytes<kThreads, kVecs, kStages>();
  static_assert(kBytes <= 227 * 1024, "the ring must fit one SM's shared memory");
  static const bool set = [] {
    if (cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes) != cudaSuccess) {
      throw std::runtime_error("quantize_per_token pipelined: setting the dynamic shared memory failed");
    }
    return true;
  }();
  (void)set;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(block_threads<kThreads>());
  config.dynamicSmemBytes = kBytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  const cudaError_t error = cudaLaunchKernelEx(&config, with_carveout<kFull, kKernel>("quantize_per_token pipelined"),
                                               static_cast<const T*>(x), ldx, q, scale, rows, k);
  if (error != cudaSuccess) {
    throw std::runtime_error(std::string("quantize_per_token pipelined: launch failed: ") + cudaGetErrorString(error));
  }
}

}  // namespace

#define W8A8_QSWEEP_PIPELINED(S)                                                                               \
  S(256, 2, 3) S(256, 2, 4) S(256, 2, 6) S(256, 2, 8) S(128, 4, 3) S(128, 4, 4) S(128, 4, 6) S(256, 4, 3)      \
  S(256, 4, 4) S(256, 4, 6) S(512, 2, 3) S(512, 2, 4) S(512, 2, 6) S(256, 7, 3) S(256, 7, 4) S(256, 7, 6)      \
  S(512, 4, 3) S(512, 4, 4) S(512, 4, 6) S(512, 7, 2) S(512, 7, 3) S(1024, 4, 2) S(1024, 4, 3)
#define W8A8_QSWEEP_ENTRY(t, v, s) \
  PipelinedShape{t, v, s, &run_pipelined<t, v, s, false>, &run_pipelined<t, v, s, true>},
const PipelinedShape kPipelined[] = {W8A8_QSWEEP_PIPELINED(W8A8_QSWEEP_ENTRY)};
#undef W8A8_QSWEEP_ENTRY
const int kNumPipelined = sizeof(kPipelined) / sizeof(kPipelined[0]);

}  // namespace w8a8::qsweep
