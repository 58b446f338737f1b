// Torch-free interface of the sm80 (Ampere / Ada) int8 scaled matmul:
// CUTLASS 2.x mma.sync kernels with the epilogue contract of the sm90 ones.
// The math, layouts and the 16-byte rule are those of scaled_mm_problem.h
// (cp.async moves 16-byte rows). Built for sm_80, sm_86, sm_89 and, so that
// an H100 can test and time this path, sm_90. No CUDA or torch headers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "scaled_mm_problem.h"

typedef struct CUstream_st* cudaStream_t;

namespace w8a8 {

struct ScaledMmSm80Params : ScaledMmProblem {
  // -1: pick by the M ladder (scaled_mm_sm80_configs.cuh); otherwise an index
  // into the config table (0 <= config_id < scaled_mm_sm80_num_configs()).
  int config_id = -1;
  int sm_count = 0;  // multiprocessor count of the current device; must be > 0
  // Shared memory of one multiprocessor in bytes (cudaDevAttrMaxSharedMemoryPerMultiprocessor):
  // how many CTAs of the split-K config can be resident at once. 0 reads as none: K is not split.
  int shared_memory_per_sm = 0;
};

// Bytes of device workspace the call needs: the int32 partial sums of the
// split-K config, 0 for the data-parallel ones. Throws std::runtime_error
// with a message on invalid params.
size_t scaled_mm_sm80_workspace_size(const ScaledMmSm80Params& params);

// Enqueues the GEMM on `stream` (on the current device). `workspace` holds at
// least scaled_mm_sm80_workspace_size(params) bytes (null when that is 0).
// Throws std::runtime_error when CUTLASS refuses the problem or the launch
// fails. Never synchronises.
void scaled_mm_sm80(const ScaledMmSm80Params& params, void* workspace, cudaStream_t stream);

int scaled_mm_sm80_num_configs();
const char* scaled_mm_sm80_config_name(int config_id);
// The config that config_id = -1 runs for this shape.
int scaled_mm_sm80_heuristic_config(int64_t m, int64_t n, int64_t k, int sm_count, int shared_memory_per_sm);

}  // namespace w8a8
