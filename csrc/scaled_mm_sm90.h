// Torch-free interface of the sm90 (Hopper) int8 scaled matmul.
//
//   acc[m, n] = sum_k a[m, k] * b[n, k]                        (exact, int32)
//   out[m, n] = a_scale[m] * (b_scale[n] * float(acc[m, n])) + bias[n]
//
// in fp32, each product and the sum rounded to nearest, then one rounding to
// the output type (bf16 or fp16). a_scale may be one scalar (a_scale[0] for
// every m), b_scale one scalar (b_scale[0] for every n); bias may be absent.
//
// Layouts: a is [M, K] with row pitch lda, b is [N, K] with row pitch ldb
// (nn.Linear weight layout), out is [M, N] with row pitch ldd; the K (for a,
// b) and N (for out) elements are contiguous. TMA rule: a, b and out start on
// 16-byte boundaries, K % 16 == 0, lda % 16 == 0, ldb % 16 == 0,
// N % 8 == 0 and ldd % 8 == 0. K must be > 0 (the caller handles K == 0).
//
// This header is plain C++: it compiles without CUDA or torch headers.
#pragma once

#include <cstddef>
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace w8a8 {

enum class ScaledMmOutDtype : int { kBFloat16 = 0, kFloat16 = 1 };

// How the K loop is spread over the CTAs (split_k / scheduler of the op).
//   kAuto:       the heuristic of scaled_mm_sm90_configs.cuh picks the config,
//                and whether (and how many ways) to split K, from M, N, K.
//   kPersistent: data-parallel: one CTA owns each output tile's whole K loop.
//   kStreamK:    CUTLASS's stream-K decomposition (K iterations balanced over
//                the SMs; a tile may be shared by two CTAs).
// split_k > 1 asks for a plain split-K decomposition with that many splits
// (with kAuto only). Partial sums are int32 and reduced in a fixed order.
enum class ScaledMmScheduler : int { kAuto = 0, kPersistent = 1, kStreamK = 2 };

enum class ScaledMmBias : int {
  kNone = 0,     // no bias: adds 0
  kFloat32 = 1,  // bias is const float*  [N]
  kOutDtype = 2  // bias is [N] in the output dtype (bf16 / fp16), widened exactly to fp32
};

struct ScaledMmSm90Params {
  const int8_t* a = nullptr;        // [M, K], row pitch lda (elements)
  const int8_t* b = nullptr;        // [N, K], row pitch ldb (elements)
  void* out = nullptr;              // [M, N], row pitch ldd (elements), out_dtype
  const float* a_scale = nullptr;   // [M] if a_scale_per_token, else [1]
  const float* b_scale = nullptr;   // [N] if b_scale_per_channel, else [1]
  const void* bias = nullptr;       // [N] in the dtype bias_kind names; null iff kNone
  ScaledMmBias bias_kind = ScaledMmBias::kNone;
  bool a_scale_per_token = true;
  bool b_scale_per_channel = true;
  ScaledMmOutDtype out_dtype = ScaledMmOutDtype::kBFloat16;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
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
