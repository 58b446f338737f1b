// The skinny GEMM kernel and its launcher (see scaled_mm_skinny.h for the
// work split and the K permutation). Weights are streamed (read once, no L1
// allocation); the few token rows are re-read by every warp through L1.
#include "common/programmatic_launch.cuh"
#include "decode/decode_kernel_common.cuh"
#include "decode/scaled_mm_skinny.h"

namespace w8a8 {
namespace {

constexpr int kThreads = kSkinnyWarps * 32;
constexpr int kGroupRows = 16;  // weight rows per warp: the mma's M
constexpr int kStepChunks = 4;  // 16-byte chunks per 64-byte K step: one per lane of a quad
// K steps whose loads a lane issues before its first mma: 4 x (2 weight + up to
// 2 token) 16-byte loads, 4 KiB of weights in flight per warp.
constexpr int kUnroll = 4;

// d += A x B on one m16n8k32 tile (A 16 x 32 row-major, B 32 x 8 column-major,
// int8 in, int32 accumulate). Lane (g = lane / 4, t = lane % 4) supplies A rows
// g (a0, a2) and g + 8 (a1, a3), B column g (b0, b1); a0, a1, b0 hold the
// tile's k = 4t..4t+3, a2, a3, b1 its k = 16+4t..16+4t+3.
__device__ __forceinline__ void mma_16x8x32(int (&d)[4], int a0, int a1, int a2, int a3, int b0, int b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One 64-byte K step of a lane: `lo` and `hi` are the 16 bytes of weight rows
// g and g + 8 at the lane's chunk of the step (bytes 16t..16t+15), `x` the same
// bytes of a token. The first mma takes bytes 16t..16t+7 as its k = 4t.. and
// 16+4t.., the second bytes 16t+8..16t+15: over the quad every byte of the step
// enters exactly once, paired with the same byte of the other operand.
__device__ __forceinline__ void mma_step(int (&d)[4], int4 lo, int4 hi, int4 x) {
  mma_16x8x32(d, lo.x, hi.x, lo.y, hi.y, x.x, x.y);
  mma_16x8x32(d, lo.z, hi.z, lo.w, hi.w, x.z, x.w);
}

// kHalves: token halves of 8 per CTA (1 for M <= 8, else 2).
template <int kHalves, class Out>
__global__ void __launch_bounds__(kThreads, 2) scaled_mm_skinny_kernel(const decode::DecodeArgs args) {
  constexpr int kTokens = 8 * kHalves;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int groups_per_cta = kSkinnyWarps / args.k_split;
  const int token_tile = blockIdx.x % args.token_tiles;  // token tiles of one row block are neighbours
  const int first_group = (blockIdx.x / args.token_tiles) * groups_per_cta;
  const int slice = warp % args.k_split;
  const int row0 = (first_group + warp / args.k_split) * kGroupRows;
  const int m0 = token_tile * kTokens;

  int acc[kHalves][4];
#pragma unroll
  for (int h = 0; h < kHalves; ++h) acc[h][0] = acc[h][1] = acc[h][2] = acc[h][3] = 0;

  // Programmatic dependent launch: nothing below may be read before the
  // quantizer launched before this kernel has finished.
  wait_for_prior_grids();

  if (row0 < args.n) {  // uniform per warp
    // Rows past N and tokens past M re-read the last one; their sums are dropped.
    const int4* lo_row = reinterpret_cast<const int4*>(args.b + int64_t(min(row0 + g, args.n - 1)) * args.ldb);
    const int4* hi_row = reinterpret_cast<const int4*>(args.b + int64_t(min(row0 + g + 8, args.n - 1)) * args.ldb);
    const int4* tokens[kHalves];
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      tokens[h] = reinterpret_cast<const int4*>(args.a + int64_t(min(m0 + 8 * h + g, args.m - 1)) * args.lda);
    }
    const int full_steps = args.k_chunks / kStepChunks;
    const int steps = (args.k_chunks + kStepChunks - 1) / kStepChunks;
    int s = slice;
    // Whole unrolled steps: every load of them is issued before the first mma.
    for (; s + (kUnroll - 1) * args.k_split < full_steps; s += kUnroll * args.k_split) {
      int4 lo[kUnroll], hi[kUnroll], x[kUnroll][kHalves];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = (s + u * args.k_split) * kStepChunks + t;
        lo[u] = decode::load_streamed(lo_row + c);
        hi[u] = decode::load_streamed(hi_row + c);
#pragma unroll
        for (int h = 0; h < kHalves; ++h) x[u][h] = __ldg(tokens[h] + c);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int h = 0; h < kHalves; ++h) mma_step(acc[h], lo[u], hi[u], x[u][h]);
      }
    }
    // The remaining steps, the last one possibly short of chunks (K % 64 != 0):
    // missing chunks are zeros on both sides. Every lane reaches the mma.
    for (; s < steps; s += args.k_split) {
      const int c = s * kStepChunks + t;
      const bool in_k = c < args.k_chunks;
      const int4 zero = make_int4(0, 0, 0, 0);
      const int4 lo = in_k ? decode::load_streamed(lo_row + c) : zero;
      const int4 hi = in_k ? decode::load_streamed(hi_row + c) : zero;
#pragma unroll
      for (int h = 0; h < kHalves; ++h) mma_step(acc[h], lo, hi, in_k ? __ldg(tokens[h] + c) : zero);
    }
  }

  // Accumulator fragment -> (row, token): d0 (g, 2t), d1 (g, 2t+1), d2 (g+8, 2t),
  // d3 (g+8, 2t+1) within each 8-token half. Integer sums: the slice order below
  // cannot change a bit.
  __shared__ int partial[kSkinnyWarps][kGroupRows][kTokens];
#pragma unroll
  for (int h = 0; h < kHalves; ++h) {
    partial[warp][g][8 * h + 2 * t] = acc[h][0];
    partial[warp][g][8 * h + 2 * t + 1] = acc[h][1];
    partial[warp][g + 8][8 * h + 2 * t] = acc[h][2];
    partial[warp][g + 8][8 * h + 2 * t + 1] = acc[h][3];
  }
  __syncthreads();
  // One thread per output element, consecutive threads on consecutive rows of a token.
  const int outputs = groups_per_cta * kGroupRows * kTokens;
  for (int i = threadIdx.x; i < outputs; i += kThreads) {
    const int group = i / (kGroupRows * kTokens);
    const int token = i / kGroupRows % kTokens;
    const int r = i % kGroupRows;
    const int row = (first_group + group) * kGroupRows + r;
    const int m = m0 + token;
    if (row >= args.n || m >= args.m) continue;
    int sum = 0;
    for (int sl = 0; sl < args.k_split; ++sl) sum += partial[group * args.k_split + sl][r][token];
    decode::store_output<Out>(args.epilogue, m, row, sum);
  }
}

template <int kHalves>
void launch(const decode::DecodeArgs& args, ScaledMmOutDtype out_dtype, int64_t ctas, cudaStream_t stream) {
  decode::launch_programmatic(scaled_mm_skinny_kernel<kHalves, __nv_bfloat16>, scaled_mm_skinny_kernel<kHalves, __half>,
                              out_dtype, ctas, kThreads, stream, args, "scaled_mm_skinny");
}

}  // namespace

void scaled_mm_skinny(const ScaledMmProblem& p, int k_split, cudaStream_t stream) {
  const int halves = p.m <= 8 ? 1 : 2;
  const decode::DecodeArgs args = decode::make_decode_args(p, k_split, 8 * halves, "scaled_mm_skinny");
  const int64_t rows_per_cta = int64_t(kGroupRows) * (kSkinnyWarps / k_split);
  const int64_t ctas = (p.n + rows_per_cta - 1) / rows_per_cta * args.token_tiles;
  if (halves == 1) {
    launch<1>(args, p.out_dtype, ctas, stream);
  } else {
    launch<2>(args, p.out_dtype, ctas, stream);
  }
}

}  // namespace w8a8
