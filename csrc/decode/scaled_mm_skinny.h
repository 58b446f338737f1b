// Torch-free interface of the skinny GEMM: the ScaledMmProblem of
// common/scaled_mm_problem.h for a handful of tokens (M about 5..16), where the GEMM
// still streams its weights and little else but the dp4a GEMV
// (scaled_mm_gemv.h) runs out of integer issue slots. Plain CUDA on mma.sync
// (m16n8k32, int8 in, int32 out: sm_80 and later), no shared-memory staging.
//
// Work split: a warp owns 16 weight rows (the mma's M side) and up to 16
// tokens (two n8 halves); a CTA of kSkinnyWarps warps holds
// kSkinnyWarps / k_split such row groups, each read by k_split warps that
// take interleaved 64-byte K steps. Every lane loads 16 bytes of two weight
// rows and of one or two tokens per step, straight from global memory into
// the mma's fragment registers: the mma contracts over K, so any permutation
// of K applied alike to both operands leaves the int32 sums unchanged, and
// the one used here makes each lane's fragment bytes contiguous in memory.
// The k_split partial sums are added in shared memory in a fixed order
// (exact), then one thread per output element applies the epilogue. K is not
// split over the CTAs of a cluster, and past 16 tokens the CUTLASS tiles'
// shared-memory staging serves better. [evidence decode.cluster-k-split]
#pragma once

#include <cstdint>

#include "common/scaled_mm_problem.h"

typedef struct CUstream_st* cudaStream_t;

namespace w8a8 {

constexpr int kSkinnyWarps = 8;    // 256 threads per CTA
constexpr int kSkinnyTokens = 16;  // tokens per CTA (two mma n8 halves); more M means more CTAs

// Enqueues the skinny GEMM on `stream`. `p` keeps the problem contract (the
// caller has checked it: scaled_mm_sm90_plan does); k_split is 1, 2, 4 or 8
// (warps per row group). Throws std::runtime_error when k_split is not one of
// those or the launch fails. Never synchronises.
void scaled_mm_skinny(const ScaledMmProblem& p, int k_split, cudaStream_t stream);

}  // namespace w8a8
