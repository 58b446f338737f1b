// Lab: the product's ring kernel (quantize_per_token_ring_kernel, quantize_per_token.cuh) at
// every ring depth, shape and grid size of the table below (python -m benchmarks.sweep.quant
// --pipelined), where the product launches one of them (512 x 7, three stages, a block per SM).
// bf16 rows.
#include <cstdint>

#include <cuda_bf16.h>

#include "common/programmatic_launch.cuh"
#include "quantize/quantize_per_token.cuh"
#include "quant_shapes.h"

namespace w8a8::qsweep {
namespace {

using T = __nv_bfloat16;
constexpr int kVec = 8;
constexpr const char* kWho = "quantize_per_token pipelined (sweep)";

template <int kThreads, int kVecs, int kStages, bool kFull>
void run_pipelined(const void* x, int64_t ldx, int8_t* q, float* scale, int64_t rows, int64_t k, int64_t blocks,
                   cudaStream_t stream) {
  constexpr auto kKernel = quantize_per_token_ring_kernel<T, kVec, kThreads, kVecs, kStages, kFull>;
  constexpr int kBytes = ring_bytes<kThreads, kVecs, kStages>();
  static_assert(kBytes <= 227 * 1024, "the ring must fit one SM's shared memory");
  with_carveout<kFull, kKernel>(kWho);
  launch_programmatic_smem(kWho, with_dynamic_smem<kKernel, kBytes>(kWho), dim3(static_cast<unsigned>(blocks)),
                           dim3(block_threads<kThreads>()), kBytes, stream, static_cast<const T*>(x), ldx, q, scale,
                           rows, k);
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
