// The quantizer's bounds (the lab): two kernels launched as the product launches its quantizer
// (programmatic, waiting for the kernel before, then allowing the next), so that the per-token
// kernel's time can be split into what any launch of its kind costs and what moving its bytes costs.
//   empty: a grid of `blocks` blocks of 256 threads that only wait and allow (the launch floor);
//   copy:  x's bf16 read once and one byte per value written (the quantizer's bytes, less the
//          scales), 256 threads per block, kVecs 16-byte vectors per thread, no row reduction.
#include <cstdint>

#include <cuda_bf16.h>

#include "common/programmatic_launch.cuh"
#include "quant_shapes.h"

namespace w8a8::qsweep {
namespace {

__global__ void __launch_bounds__(256) empty_kernel() {
  wait_for_prior_grids();
  allow_dependent_launch();
}

// Vector i of the block's span goes to thread i % 256 (a warp's loads and stores contiguous);
// each output byte is its value's high byte (bits moved, not a quantization).
template <int kVecs>
__global__ void __launch_bounds__(256) copy_kernel(const uint4* __restrict__ x, uint2* __restrict__ q, int64_t n_vecs) {
  wait_for_prior_grids();
  allow_dependent_launch();
  const int64_t first = int64_t(blockIdx.x) * 256 * kVecs + threadIdx.x;
  uint4 raw[kVecs];
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    const int64_t i = first + int64_t(v) * 256;
    raw[v] = x[i < n_vecs ? i : n_vecs - 1];
  }
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    const int64_t i = first + int64_t(v) * 256;
    if (i < n_vecs) {
      q[i] = make_uint2(__byte_perm(raw[v].x, raw[v].y, 0x7531), __byte_perm(raw[v].z, raw[v].w, 0x7531));
    }
  }
}

template <int kVecs>
void run_copy(const void* x, int8_t* q, int64_t n_vecs, cudaStream_t stream) {
  const int64_t blocks = (n_vecs + 256 * kVecs - 1) / (256 * kVecs);
  launch_programmatic("quant bounds copy", copy_kernel<kVecs>, dim3(static_cast<unsigned>(blocks)), dim3(256), stream,
                      static_cast<const uint4*>(x), reinterpret_cast<uint2*>(q), n_vecs);
}

}  // namespace

void launch_empty(int64_t blocks, cudaStream_t stream) {
  launch_programmatic("quant bounds empty", empty_kernel, dim3(static_cast<unsigned>(blocks)), dim3(256), stream);
}

bool launch_copy(const void* x, int8_t* q, int64_t n_vecs, int vecs, cudaStream_t stream) {
  switch (vecs) {
    case 1: run_copy<1>(x, q, n_vecs, stream); return true;
    case 2: run_copy<2>(x, q, n_vecs, stream); return true;
    case 4: run_copy<4>(x, q, n_vecs, stream); return true;
    case 8: run_copy<8>(x, q, n_vecs, stream); return true;
    default: return false;
  }
}

}  // namespace w8a8::qsweep
