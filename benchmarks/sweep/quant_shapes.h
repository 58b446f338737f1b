// Sweep-only launch shapes of the per-token quantizer (the lab, not the product): host-side
// declarations shared by the kernel files (quant_shapes_*.cu) and the ops (quant_shapes_ops.cpp).
// python -m benchmarks.sweep.quant builds and times them.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace w8a8::qsweep {

// One launch of the product's per-token kernel (csrc/quantize/quantize_per_token.cuh) on bf16
// rows with 16-byte vectors: kThreadsPerRow threads per row, each holding up to kRowVecs vectors
// (0: two passes over the row), blocks of max(256, threads) threads, launched as the product
// launches it (programmatic).
using Run = void (*)(const void* x, int64_t ldx, int8_t* q, float* scale, int64_t rows, int64_t k,
                     cudaStream_t stream);

struct Shape {
  int threads;  // per row
  int vecs;     // per thread (0: two passes)
  Run run;
};

// The table, once at the default shared-memory split and once at the largest (as the product
// runs the quantizer before a CUTLASS GEMM): the same shapes in the same order.
extern const Shape kPlain[];
extern const Shape kFullSmem[];
extern const int kNumShapes;

// The persistent-grid kernel with a shared-memory ring (quant_pipelined.cu): `blocks` blocks (at
// most the row groups), each looping over its groups of rows with stages - 1 groups in flight.
using RunPipelined = void (*)(const void* x, int64_t ldx, int8_t* q, float* scale, int64_t rows, int64_t k,
                              int64_t blocks, cudaStream_t stream);

struct PipelinedShape {
  int threads;  // per row (blocks of max(256, threads) threads)
  int vecs;     // per thread and group
  int stages;   // groups in the ring
  RunPipelined plain, full_smem;
};

extern const PipelinedShape kPipelined[];
extern const int kNumPipelined;

// The bounds (quant_bounds.cu): a grid of `blocks` empty blocks, and the quantizer's bytes moved
// without its arithmetic (n_vecs 16-byte bf16 vectors in, 8 bytes out each; vecs per thread 1, 2,
// 4 or 8, else false and nothing launched). Both launched as the product's quantizer.
void launch_empty(int64_t blocks, cudaStream_t stream);
bool launch_copy(const void* x, int8_t* q, int64_t n_vecs, int vecs, cudaStream_t stream);

}  // namespace w8a8::qsweep
