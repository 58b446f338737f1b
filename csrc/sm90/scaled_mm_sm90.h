// Torch-free interface of the sm90 (Hopper) int8 scaled matmul: the math,
// layouts and the 16-byte rule are those of scaled_mm_problem.h (TMA needs
// them). This header compiles without CUDA or torch headers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "scaled_mm_problem.h"

typedef struct CUstream_st* cudaStream_t;

namespace w8a8 {

// How the K loop is spread over the CTAs (split_k / scheduler of the op).
//   kAuto:       the heuristic of scaled_mm_sm90_configs.cuh picks the config,
//                and whether (and how many ways) to split K, from M, N, K.
//   kPersistent: data-parallel: one CTA owns each output tile's whole K loop.
//   kStreamK:    CUTLASS's stream-K decomposition (K iterations balanced over
//                the SMs; a tile may be shared by two CTAs).
// split_k > 1 asks for a plain split-K decomposition with that many splits
// (with kAuto only). Partial sums are int32 and reduced in a fixed order.
enum class ScaledMmScheduler : int { kAuto = 0, kPersistent = 1, kStreamK = 2 };

struct ScaledMmSm90Params : ScaledMmProblem {
  // -1: pick by the M ladder (scaled_mm_sm90_configs.cuh); otherwise an index
  // into the config table (0 <= config_id < scaled_mm_sm90_num_configs()).
  int config_id = -1;
  // 0: the heuristic decides (scheduler kAuto) or no split (otherwise);
  // 1: no split; n > 1: split K n ways (at most the number of 128-wide K tiles).
  int split_k = 0;
  ScaledMmScheduler scheduler = ScaledMmScheduler::kAuto;
  int device_id = 0;
  int sm_count = 0;  // multiprocessor count of device_id; must be > 0
};

// Bytes of device workspace scaled_mm_sm90 needs for these params (0 for
// data-parallel configs; stream-K / split-K configs need a reduction buffer).
// Throws std::runtime_error with a message on invalid params.
size_t scaled_mm_sm90_workspace_size(const ScaledMmSm90Params& params);

// Enqueues the GEMM on `stream`. `workspace` holds at least
// scaled_mm_sm90_workspace_size(params) bytes (may be null when that is 0).
// Throws std::runtime_error with a message when CUTLASS refuses the problem
// (can_implement / initialize) or the launch fails. Never synchronises.
void scaled_mm_sm90(const ScaledMmSm90Params& params, void* workspace, cudaStream_t stream);

// The config table, for benchmarking and error messages.
int scaled_mm_sm90_num_configs();
const char* scaled_mm_sm90_config_name(int config_id);
// The config the heuristic picks for this M (what config_id = -1 runs).
int scaled_mm_sm90_heuristic_config(int64_t m, int64_t n);

// What a call with these params runs: the config table entry, the K
// decomposition ("data_parallel", "split_k", "stream_k" or "heuristic" for
// CUTLASS's own stream-K choice) and the split count. Throws like
// scaled_mm_sm90 on invalid params (including split_k / scheduler values the
// chosen config cannot honour).
struct ScaledMmSm90Plan {
  int config_id = 0;
  const char* decomposition = "";
  int splits = 1;
};
ScaledMmSm90Plan scaled_mm_sm90_plan(const ScaledMmSm90Params& params);

}  // namespace w8a8
