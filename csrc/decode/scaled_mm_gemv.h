// Torch-free interface of the decode GEMV: the ScaledMmProblem of
// common/scaled_mm_problem.h (same math, layouts and 16-byte rule) computed without
// tensor cores, for the few-token calls where the GEMM is a pure weight
// stream. Plain CUDA (dp4a, sm_61 and later); this header compiles without
// CUDA or torch headers.
//
// Work split: a CTA of kGemvWarps warps owns kGemvWarps / k_split weight rows
// and up to kGemvTokens tokens; each row is read by k_split warps, each taking
// an interleaved share of its 16-byte K chunks. Every warp streams its weight
// chunks once, multiplies them with dp4a against every token of the tile
// (int32, exact), and the k_split partial sums of a row are added in shared
// memory before one thread per output element applies the epilogue. Token
// tiles of the same rows run in neighbouring CTAs, so for M > kGemvTokens the
// repeated weight reads hit L2.
#pragma once

#include <cstdint>

#include "common/scaled_mm_problem.h"

typedef struct CUstream_st* cudaStream_t;

namespace w8a8 {

constexpr int kGemvWarps = 8;   // 256 threads per CTA
constexpr int kGemvTokens = 4;  // tokens per CTA (the largest token tile); more M means more CTAs

// Enqueues the GEMV on `stream`. `p` keeps the problem contract (the caller
// has checked it: scaled_mm_sm90_plan does); k_split is 1, 2, 4 or 8 (warps
// per weight row). Throws std::runtime_error when k_split is not one of those
// or the launch fails. Never synchronises.
void scaled_mm_gemv(const ScaledMmProblem& p, int k_split, cudaStream_t stream);

}  // namespace w8a8
