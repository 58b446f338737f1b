// The decode GEMV kernel and its launcher (see scaled_mm_gemv.h for the work
// split). The weights are read once, 16 bytes per lane per load, through the
// non-coherent path without L1 allocation (they are streamed); the activation
// rows are small and re-read by every warp, so they go through L1.
#include "common/programmatic_launch.cuh"
#include "decode/decode_kernel_common.cuh"
#include "decode/scaled_mm_gemv.h"

namespace w8a8 {
namespace {

constexpr int kThreads = kGemvWarps * 32;
// 16-byte weight loads each lane issues before it consumes them: 2 KiB in
// flight per warp, enough with a few warps per SM to cover HBM latency.
constexpr int kUnroll = 4;

__device__ __forceinline__ int dot16(int4 w, int4 x, int acc) {
  acc = __dp4a(w.x, x.x, acc);
  acc = __dp4a(w.y, x.y, acc);
  acc = __dp4a(w.z, x.z, acc);
  return __dp4a(w.w, x.w, acc);
}

// CTAs per SM the register budget must allow. Without a minimum ptxas keeps
// registers low by waiting for each weight load before issuing the next (two
// in flight per lane); with it every load of a step is issued first: 4 CTAs
// (32 warps x 2 KiB in flight per SM) up to 2 tokens, 2 CTAs at 4 tokens,
// whose activation chunks take four times the registers.
template <int kTokens>
constexpr int kMinCtasPerSm = kTokens <= 2 ? 4 : 2;

template <int kTokens, class Out>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm<kTokens>) scaled_mm_gemv_kernel(const decode::DecodeArgs args) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int rows_per_cta = kGemvWarps / args.k_split;
  const int token_tile = blockIdx.x % args.token_tiles;  // token tiles of one row group are neighbours
  const int row = (blockIdx.x / args.token_tiles) * rows_per_cta + warp / args.k_split;
  const int slice = warp % args.k_split;
  const int m0 = token_tile * kTokens;

  int acc[kTokens];
#pragma unroll
  for (int t = 0; t < kTokens; ++t) acc[t] = 0;

  // Programmatic dependent launch (programmatic_launch.cuh): the CTAs may be
  // resident while the quantizer before them still runs; nothing below may be
  // read before it has finished. No L2 prefetch of the first weights before
  // this wait: it made the decode step slower. [evidence decode.gemv-no-l2-prefetch]
  wait_for_prior_grids();

  if (row < args.n) {  // uniform per warp
    const int4* weights = reinterpret_cast<const int4*>(args.b + int64_t(row) * args.ldb);
    const int4* tokens[kTokens];
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {  // tokens past M re-read the last row; their sums are dropped
      tokens[t] = reinterpret_cast<const int4*>(args.a + int64_t(min(m0 + t, args.m - 1)) * args.lda);
    }
    const int stride = 32 * args.k_split;  // chunks between a lane's consecutive loads
    int c = slice * 32 + lane;
    // Whole steps: every load of the step is issued before the first dp4a.
    for (; c + (kUnroll - 1) * stride < args.k_chunks; c += kUnroll * stride) {
      int4 w[kUnroll];
      int4 x[kUnroll][kTokens];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        w[u] = decode::load_streamed(weights + c + u * stride);
#pragma unroll
        for (int t = 0; t < kTokens; ++t) x[u][t] = __ldg(tokens[t] + c + u * stride);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int t = 0; t < kTokens; ++t) acc[t] = dot16(w[u], x[u][t], acc[t]);
      }
    }
    for (; c < args.k_chunks; c += stride) {  // the last partial step
      const int4 w = decode::load_streamed(weights + c);
#pragma unroll
      for (int t = 0; t < kTokens; ++t) acc[t] = dot16(w, __ldg(tokens[t] + c), acc[t]);
    }
  }

  // Integer sums are exact, so neither the butterfly nor the slice order
  // below can change a bit.
#pragma unroll
  for (int t = 0; t < kTokens; ++t) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], offset);
  }
  if (args.k_split > 1) {
    __shared__ int partial[kGemvWarps][kTokens];
    if (lane == 0) {
#pragma unroll
      for (int t = 0; t < kTokens; ++t) partial[warp][t] = acc[t];
    }
    __syncthreads();
    if (slice == 0) {
#pragma unroll
      for (int t = 0; t < kTokens; ++t) {
        int sum = 0;
        for (int s = 0; s < args.k_split; ++s) sum += partial[warp + s][t];
        acc[t] = sum;
      }
    }
  }

  if (slice != 0 || lane >= kTokens || row >= args.n) return;
  const int m = m0 + lane;
  if (m >= args.m) return;
  int total = acc[0];
#pragma unroll
  for (int t = 1; t < kTokens; ++t) total = lane == t ? acc[t] : total;  // no local-memory indexing
  decode::store_output<Out>(args.epilogue, m, row, total);
}

template <int kTokens>
void launch(const decode::DecodeArgs& args, ScaledMmOutDtype out_dtype, int64_t ctas, cudaStream_t stream) {
  decode::launch_programmatic(scaled_mm_gemv_kernel<kTokens, __nv_bfloat16>, scaled_mm_gemv_kernel<kTokens, __half>,
                              out_dtype, ctas, kThreads, stream, args, "scaled_mm_gemv");
}

}  // namespace

void scaled_mm_gemv(const ScaledMmProblem& p, int k_split, cudaStream_t stream) {
  // The token tile: the smallest of 1, 2, kGemvTokens that holds M, else kGemvTokens.
  const int tokens = p.m == 1 ? 1 : p.m == 2 ? 2 : kGemvTokens;
  const decode::DecodeArgs args = decode::make_decode_args(p, k_split, tokens, "scaled_mm_gemv");
  const int rows_per_cta = kGemvWarps / k_split;
  const int64_t ctas = (p.n + rows_per_cta - 1) / rows_per_cta * args.token_tiles;
  if (tokens == 1) {
    launch<1>(args, p.out_dtype, ctas, stream);
  } else if (tokens == 2) {
    launch<2>(args, p.out_dtype, ctas, stream);
  } else {
    launch<kGemvTokens>(args, p.out_dtype, ctas, stream);
  }
}

}  // namespace w8a8
