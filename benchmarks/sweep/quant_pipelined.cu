// A lab variant of the per-token kernel (not the product): the product's row arithmetic
// (quantize_per_token.cuh: RowMax, reduce_row, RowScale, quantize_per_token_codes) in blocks that
// stay resident and walk the row groups grid-stride, loading the next group's vectors into a
// second register set before quantizing the current one, so that a block's loads overlap its
// arithmetic. The grid: as many blocks as fit at once (the occupancy the driver reports), at
// most one per row group. Same codes and scales as the product (the sweep compares the bits).
#include "quant_shapes.cuh"

namespace w8a8::qsweep {
namespace {

using Bf16 = __nv_bfloat16;
constexpr int kV = 8;  // bf16 values in a 16-byte vector

template <int kThreads, int kVecs>
struct RowWalk {
  static constexpr int kRows = block_threads<kThreads>() / kThreads;
  const Bf16* x;
  int64_t ldx;
  int8_t* q;
  float* scale_out;
  int64_t rows, k, vecs;
  int lane, sub;  // this thread's place in its row, and its row within the group

  __device__ void load(int64_t group, Raw<Bf16, kV> (&raw)[kVecs]) const {
    int64_t row = group * kRows + sub;
    if (row >= rows) row = 0;  // past the end: read row 0, store nothing (see process)
    const Bf16* xr = x + row * ldx;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int64_t idx = lane + int64_t(j) * kThreads;
      raw[j] = load_raw<Bf16, kV>(xr + (idx < vecs ? idx : vecs - 1) * kV);
    }
  }

  // Every thread of the block calls it (reduce_row may synchronise the block).
  __device__ void process(int64_t group, const Raw<Bf16, kV> (&raw)[kVecs]) const {
    const int64_t row = group * kRows + sub;
    const bool row_ok = row < rows;
    RowMax<Bf16> row_max;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) row_max.template add<kV>(raw[j]);
    float amax;
    bool bad;
    row_max.finish(amax, bad);
    reduce_row<kThreads>(amax, bad);
    const RowScale rs(amax, bad);
    if (row_ok && lane == 0) scale_out[row] = rs.stored;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int64_t idx = lane + int64_t(j) * kThreads;
      if (row_ok && idx < vecs) {
        float v[kV];
        widen<Bf16, kV>(raw[j], v);
        store(q + row * k + idx * kV, quantize_per_token_codes<kV>(v, rs));
      }
    }
    __syncthreads();  // reduce_row's shared words are written again by the next group
  }
};

template <int kThreads, int kVecs, bool kFull>
__global__ void __launch_bounds__(block_threads<kThreads>())
    pipelined_kernel(const Bf16* __restrict__ x, int64_t ldx, int8_t* __restrict__ q, float* __restrict__ scale_out,
                     int64_t rows, int64_t k) {
  wait_for_prior_grids();
  allow_dependent_launch();
  using Walk = RowWalk<kThreads, kVecs>;
  const Walk walk{x, ldx, q, scale_out, rows, k, k / kV, int(threadIdx.x % kThreads), int(threadIdx.x / kThreads)};
  const int64_t groups = (rows + Walk::kRows - 1) / Walk::kRows;
  const int64_t stride = gridDim.x;
  Raw<Bf16, kV> a[kVecs], b[kVecs];
  int64_t g = blockIdx.x;  // block-uniform: every branch below is taken by the whole block
  if (g >= groups) return;
  walk.load(g, a);
  while (true) {
    if (g + stride < groups) walk.load(g + stride, b);
    walk.process(g, a);
    g += stride;
    if (g >= groups) break;
    if (g + stride < groups) walk.load(g + stride, a);
    walk.process(g, b);
    g += stride;
    if (g >= groups) break;
  }
}

// The product's in-register kernel (quantize_per_token_kernel, kMaxVecs > 0) with launch bounds
// that ask for a full SM of threads (2048 / block threads blocks), so that registers do not cap the
// resident blocks: one block per row group, as the product launches it.
template <int kThreads, int kVecs, bool kFull>
__global__ void __launch_bounds__(block_threads<kThreads>(), 2048 / block_threads<kThreads>())
    bounded_kernel(const Bf16* __restrict__ x, int64_t ldx, int8_t* __restrict__ q, float* __restrict__ scale_out,
                   int64_t rows, int64_t k) {
  wait_for_prior_grids();
  allow_dependent_launch();
  using Walk = RowWalk<kThreads, kVecs>;
  const Walk walk{x, ldx, q, scale_out, rows, k, k / kV, int(threadIdx.x % kThreads), int(threadIdx.x / kThreads)};
  Raw<Bf16, kV> a[kVecs];
  walk.load(blockIdx.x, a);
  walk.process(blockIdx.x, a);
}

template <int kThreads, int kVecs, bool kFull>
void run_bounded(const void* x, int64_t ldx, int8_t* q, float* scale, int64_t rows, int64_t k, cudaStream_t stream) {
  constexpr int kBlock = block_threads<kThreads>();
  constexpr auto kKernel = bounded_kernel<kThreads, kVecs, kFull>;
  const int64_t groups = (rows + kBlock / kThreads - 1) / (kBlock / kThreads);
  launch_programmatic("quantize_per_token bounded", with_carveout<kFull, kKernel>("quantize_per_token bounded"),
                      dim3(static_cast<unsigned>(groups)), dim3(kBlock), stream, static_cast<const Bf16*>(x), ldx, q,
                      scale, rows, k);
}

template <int kThreads, int kVecs, bool kFull>
void run_pipelined(const void* x, int64_t ldx, int8_t* q, float* scale, int64_t rows, int64_t k, cudaStream_t stream) {
  constexpr int kBlock = block_threads<kThreads>();
  constexpr int kRowsPerBlock = kBlock / kThreads;
  constexpr auto kKernel = pipelined_kernel<kThreads, kVecs, kFull>;
  static const int64_t resident = [] {
    int device = 0, sms = 0, per_sm = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (kFull) prefer_max_shared_memory("quantize_per_token pipelined", kKernel);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, kBlock, 0);
    return int64_t(sms) * (per_sm > 0 ? per_sm : 1);
  }();
  const int64_t groups = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  launch_programmatic("quantize_per_token pipelined", kKernel, dim3(static_cast<unsigned>(std::min(groups, resident))),
                      dim3(kBlock), stream, static_cast<const Bf16*>(x), ldx, q, scale, rows, k);
}

// Shapes that hold a row of the grid's K values with the fewest vectors per thread.
#define W8A8_QSWEEP_PIPELINED(S)                                                        \
  S(32, 16) S(64, 8) S(128, 4) S(256, 2) S(64, 16) S(128, 8) S(256, 4) S(512, 2)         \
  S(128, 16) S(256, 7) S(512, 4) S(256, 16) S(512, 7) S(1024, 4)

}  // namespace

#define W8A8_QSWEEP_ENTRY(t, v) Shape{t, v, &run_pipelined<t, v, false>},
const Shape kPipelined[] = {W8A8_QSWEEP_PIPELINED(W8A8_QSWEEP_ENTRY)};
#undef W8A8_QSWEEP_ENTRY
#define W8A8_QSWEEP_ENTRY(t, v) Shape{t, v, &run_pipelined<t, v, true>},
const Shape kPipelinedFull[] = {W8A8_QSWEEP_PIPELINED(W8A8_QSWEEP_ENTRY)};
#undef W8A8_QSWEEP_ENTRY
const int kNumPipelined = sizeof(kPipelined) / sizeof(kPipelined[0]);
#define W8A8_QSWEEP_ENTRY(t, v) Shape{t, v, &run_bounded<t, v, false>},
const Shape kBounded[] = {W8A8_QSWEEP_PIPELINED(W8A8_QSWEEP_ENTRY)};
#undef W8A8_QSWEEP_ENTRY
#define W8A8_QSWEEP_ENTRY(t, v) Shape{t, v, &run_bounded<t, v, true>},
const Shape kBoundedFull[] = {W8A8_QSWEEP_PIPELINED(W8A8_QSWEEP_ENTRY)};
#undef W8A8_QSWEEP_ENTRY

}  // namespace w8a8::qsweep
