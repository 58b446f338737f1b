// Torch-free interface of the sm80 (Ampere / Ada) int8 scaled matmul:
// CUTLASS 2.x mma.sync kernels with the epilogue contract of the sm90 ones.
// The math, layouts and the 16-byte rule are those of
// common/scaled_mm_problem.h (cp.async moves 16-byte rows). Built for the
// archs of SM80_ARCHS in setup.py (8.x, and 9.0 so that an H100 can test and
// time this path). No CUDA or torch headers.
//
// A call is planned once, then run:
//   plan = scaled_mm_sm80_plan(params);                     checks params, picks the table entry
//   bytes = scaled_mm_sm80_workspace_size(params, plan);
//   scaled_mm_sm80(params, plan, workspace, stream);
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/scaled_mm_problem.h"

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

// What a call runs.
struct ScaledMmSm80Plan {
  int config_id = 0;
  const char* config_name = "";  // the table entry's name
  int k_slices = 1;              // K ranges of a split-K entry (split_k_slices); 1 otherwise
};

// Checks `params` (the problem contract of scaled_mm_problem.h, config_id,
// sm_count) and picks the table entry. Throws std::invalid_argument with a
// message when the params break a rule. The only check of a call: the two
// functions below trust a plan made for the same params.
ScaledMmSm80Plan scaled_mm_sm80_plan(const ScaledMmSm80Params& params);

// Bytes of device workspace the planned call needs: the int32 partial sums of
// a split-K entry, 0 for the data-parallel ones.
size_t scaled_mm_sm80_workspace_size(const ScaledMmSm80Params& params, const ScaledMmSm80Plan& plan);

// Enqueues the planned GEMM on `stream` (on the current device). `workspace`
// holds at least scaled_mm_sm80_workspace_size(params, plan) bytes (null when
// that is 0). Throws std::runtime_error when CUTLASS refuses the problem or
// the launch fails. Never synchronises.
void scaled_mm_sm80(const ScaledMmSm80Params& params, const ScaledMmSm80Plan& plan, void* workspace,
                    cudaStream_t stream);

// The config table: entry names address configs (benchmarks, tests, the op's `config`).
int scaled_mm_sm80_num_configs();
const char* scaled_mm_sm80_config_name(int config_id);  // null when out of range

}  // namespace w8a8
