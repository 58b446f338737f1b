// Torch-free interface of the sm90 (Hopper) int8 scaled matmul: the math,
// layouts and the 16-byte rule are those of common/scaled_mm_problem.h (TMA
// needs them). This header compiles without CUDA or torch headers.
//
// A call is planned once, then run:
//   plan = scaled_mm_sm90_plan(params);                     checks params, picks the table entry
//   bytes = scaled_mm_sm90_workspace_size(params, plan);
//   scaled_mm_sm90(params, plan, workspace, stream);
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/scaled_mm_problem.h"

typedef struct CUstream_st* cudaStream_t;

namespace w8a8 {

// How the K loop is spread over the CTAs (split_k / scheduler of the op).
//   kAuto:       the heuristic picks the table entry (plan_auto in
//                scaled_mm_sm90_heuristics.cuh) and runs it as the table defines it.
//   kPersistent: data-parallel: one CTA owns each output tile's whole K loop.
//   kStreamK:    CUTLASS's stream-K decomposition (K iterations balanced over
//                the SMs; a tile may be shared by two CTAs).
// split_k > 1 asks for a plain split-K decomposition with that many splits
// (with kAuto only). Partial sums are int32 and reduced in a fixed order.
enum class ScaledMmScheduler : int { kAuto = 0, kPersistent = 1, kStreamK = 2 };

namespace sm90 {

// Run-time tile-scheduler options of a table entry (CUTLASS's persistent and
// stream-K schedulers read them; the decode kernels read only `splits`).
enum class Raster : int { kHeuristic, kAlongM, kAlongN };  // CUTLASS RasterOrderOptions
enum class Decomposition : int { kHeuristic, kDataParallel, kSplitK, kStreamK };  // stream-K scheduler only

struct SchedulerOptions {
  // Upper bound on the tile-scheduler swizzle (1, 2, 4, 8). The launcher
  // lowers it when the padding it implies would waste more than 1/32 of the
  // tiles (CUTLASS pads the tile grid to a multiple of swizzle x cluster and
  // runs the padded tiles).
  int max_swizzle;
  Raster raster;
  Decomposition decomposition;  // ignored by the persistent scheduler
  int splits;                   // kSplitK (and kHeuristic when > 1); a decode kernel's K split
};

}  // namespace sm90

struct ScaledMmSm90Params : ScaledMmProblem {
  // -1: the heuristic (scheduler kAuto: plan_auto; otherwise the M ladder);
  // else an index into the config table (0 <= config_id < scaled_mm_sm90_num_configs()).
  int config_id = -1;
  // 0: the heuristic decides (scheduler kAuto) or no split (otherwise);
  // 1: no split; n > 1: split K n ways (at most the number of 128-wide K tiles).
  int split_k = 0;
  ScaledMmScheduler scheduler = ScaledMmScheduler::kAuto;
  int device_id = 0;
  int sm_count = 0;  // multiprocessor count of device_id; must be > 0
  // The caller guarantees that no kernel still running when this one is enqueued
  // writes b (the weights): w8a8::linear, whose kernel before the GEMM is its own
  // quantizer. The CUTLASS GEMM (a programmatic dependent of the kernel before it, as
  // every launch of it is) then loads its first weight tiles before waiting for that
  // kernel (scaled_mm_sm90_mainloop.cuh; how many: WeightsFirstPolicy).
  bool weights_ready = false;
};

// What a call runs: the table entry and the options its launcher receives.
struct ScaledMmSm90Plan {
  int config_id = 0;
  sm90::SchedulerOptions options{};
  const char* config_name = "";    // the table entry's name
  const char* decomposition = "";  // "data_parallel", "split_k", "stream_k", or "heuristic"
                                   // (CUTLASS's stream-K scheduler decides per problem)
  int splits = 1;                  // K splits: CUTLASS split-K, or a decode kernel's split inside the CTA
  bool cutlass = true;             // a CUTLASS kernel (nearly all of an SM's shared memory);
                                   // false for the decode kernels (the GEMV, the skinny GEMM)
  bool needs_workspace = false;    // CUTLASS's stream-K scheduler splits K: ask
                                   // scaled_mm_sm90_workspace_size (every other plan needs none)
};

// Checks `params` (the problem contract of scaled_mm_problem.h, config_id,
// sm_count, split_k / scheduler, and that the picked entry can honour them)
// and picks the table entry. Throws std::invalid_argument with a message
// when the params break a rule. The only check of a call: the two functions
// below trust a plan made for the same params.
ScaledMmSm90Plan scaled_mm_sm90_plan(const ScaledMmSm90Params& params);

// Bytes of device workspace the planned call needs (0 unless plan.needs_workspace:
// stream-K / split-K runs need a reduction buffer).
size_t scaled_mm_sm90_workspace_size(const ScaledMmSm90Params& params, const ScaledMmSm90Plan& plan);

// Enqueues the planned GEMM on `stream`. `workspace` holds at least
// scaled_mm_sm90_workspace_size(params, plan) bytes (null when that is 0).
// Throws std::runtime_error when CUTLASS refuses the problem (can_implement /
// initialize) or the launch fails. Never synchronises.
void scaled_mm_sm90(const ScaledMmSm90Params& params, const ScaledMmSm90Plan& plan, void* workspace,
                    cudaStream_t stream);

// The config table: entry names address configs (benchmarks, tests, the op's
// `config`); ids are positions (a sweep build appends its entries, benchmarks/sweep).
int scaled_mm_sm90_num_configs();
const char* scaled_mm_sm90_config_name(int config_id);  // null when out of range

}  // namespace w8a8
