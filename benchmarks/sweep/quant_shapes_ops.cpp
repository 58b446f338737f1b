// Ops of the quantizer shape sweep (namespace w8a8_qsweep; python -m benchmarks.sweep.quant):
//   shapes() -> int[]   the table's (threads per row, vectors per thread) pairs, flattened
//   per_token(Tensor x, int threads, int vecs, bool full_smem) -> (Tensor q, Tensor scale)
//       x [M, K] bf16 on an sm_90 GPU, unit stride along K, K a multiple of 8 and 16-byte
//       aligned rows; the shape must be in the table and hold a row (threads x vecs x 8 >= K,
//       or vecs 0). Same outputs as w8a8::quantize_per_token_sm90 (the sweep checks the bits).
//   pipelined_shapes() -> int[]   the ring kernel's (threads per row, vectors, stages), flattened
//   pipelined(Tensor x, int threads, int vecs, int stages, int blocks, bool full_smem) -> (Tensor q, Tensor scale)
//       that kernel on min(blocks, row groups) blocks; x contiguous, else as per_token's
//   empty(Tensor x, int blocks) -> ()          the launch floor: `blocks` blocks that only wait
//   copy(Tensor x, int vecs) -> Tensor          x's bytes read, one byte per value written
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "quant_shapes.h"

namespace w8a8::qsweep {
namespace {

std::vector<int64_t> shapes() {
  std::vector<int64_t> out;
  for (int i = 0; i < kNumShapes; ++i) {
    out.push_back(kPlain[i].threads);
    out.push_back(kPlain[i].vecs);
  }
  return out;
}

// The shape of `table` (count entries) with these threads and vectors; its run() on x.
std::tuple<at::Tensor, at::Tensor> quantize(const at::Tensor& x, int64_t threads, int64_t vecs, const Shape* table,
                                            int count) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kBFloat16 && x.dim() == 2 && x.stride(1) == 1,
              "w8a8_qsweep: x must be a 2-D bf16 CUDA tensor with unit stride along K, got ",
              x.scalar_type(), " ", x.sizes(), " strides ", x.strides());
  const int64_t rows = x.size(0), k = x.size(1);
  const int64_t ldx = rows == 1 ? k : x.stride(0);
  TORCH_CHECK(k % 8 == 0 && ldx % 8 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0,
              "w8a8_qsweep: 16-byte vectors need K and the row stride to be multiples of 8 and x "
              "16-byte aligned, got K = ", k, ", row stride ", ldx);
  TORCH_CHECK(vecs == 0 || threads * vecs * 8 >= k, "w8a8_qsweep: ", threads, " threads x ", vecs,
              " vectors of 8 hold ", threads * vecs * 8, " values, fewer than K = ", k);
  const Shape* shape = nullptr;
  for (int i = 0; i < count; ++i) {
    if (table[i].threads == threads && table[i].vecs == vecs) shape = &table[i];
  }
  TORCH_CHECK(shape != nullptr, "w8a8_qsweep: no shape of ", threads, " threads x ", vecs,
              " vectors in the table (shapes() lists them)");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor q = at::empty({rows, k}, x.options().dtype(at::kChar));
  at::Tensor scale = at::empty({rows, 1}, x.options().dtype(at::kFloat));
  if (rows > 0) {
    shape->run(x.data_ptr(), ldx, q.data_ptr<int8_t>(), scale.data_ptr<float>(), rows, k,
               c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
  }
  return {q, scale};
}

std::tuple<at::Tensor, at::Tensor> per_token(const at::Tensor& x, int64_t threads, int64_t vecs, bool full_smem) {
  return quantize(x, threads, vecs, full_smem ? kFullSmem : kPlain, kNumShapes);
}

std::vector<int64_t> pipelined_shapes() {
  std::vector<int64_t> out;
  for (int i = 0; i < kNumPipelined; ++i) {
    out.push_back(kPipelined[i].threads);
    out.push_back(kPipelined[i].vecs);
    out.push_back(kPipelined[i].stages);
  }
  return out;
}

std::tuple<at::Tensor, at::Tensor> pipelined(const at::Tensor& x, int64_t threads, int64_t vecs, int64_t stages,
                                             int64_t blocks, bool full_smem) {
  const PipelinedShape* shape = nullptr;
  for (int i = 0; i < kNumPipelined; ++i) {
    const PipelinedShape& s = kPipelined[i];
    if (s.threads == threads && s.vecs == vecs && s.stages == stages) shape = &s;
  }
  TORCH_CHECK(shape != nullptr && blocks > 0, "w8a8_qsweep.pipelined: no shape of ", threads, " threads x ", vecs,
              " vectors x ", stages, " stages (pipelined_shapes() lists them), or blocks ", blocks, " < 1");
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kBFloat16 && x.dim() == 2 && x.is_contiguous() &&
                  x.size(1) % 8 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 &&
                  threads * vecs * 8 >= x.size(1),
              "w8a8_qsweep.pipelined: x must be a contiguous, 16-byte aligned 2-D bf16 CUDA tensor with K a "
              "multiple of 8 that the shape holds, got ", x.scalar_type(), " ", x.sizes());
  const int64_t rows = x.size(0), k = x.size(1);
  const int64_t rows_per_block = (threads > 256 ? threads : 256) / threads;
  const int64_t groups = (rows + rows_per_block - 1) / rows_per_block;
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor q = at::empty({rows, k}, x.options().dtype(at::kChar));
  at::Tensor scale = at::empty({rows, 1}, x.options().dtype(at::kFloat));
  if (rows > 0) {
    (full_smem ? shape->full_smem : shape->plain)(x.data_ptr(), k, q.data_ptr<int8_t>(), scale.data_ptr<float>(),
                                                  rows, k, blocks < groups ? blocks : groups,
                                                  c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
  }
  return {q, scale};
}

void empty(const at::Tensor& x, int64_t blocks) {
  TORCH_CHECK(x.is_cuda() && blocks > 0, "w8a8_qsweep.empty: x must be a CUDA tensor (the device) and blocks > 0, got ",
              x.device(), ", ", blocks);
  const c10::cuda::CUDAGuard guard(x.device());
  launch_empty(blocks, c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
}

at::Tensor copy(const at::Tensor& x, int64_t vecs) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kBFloat16 && x.is_contiguous() && x.numel() % 8 == 0 &&
                  reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0,
              "w8a8_qsweep.copy: x must be a contiguous, 16-byte aligned bf16 CUDA tensor of a multiple of 8 "
              "values, got ", x.scalar_type(), " ", x.sizes());
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor q = at::empty(x.sizes(), x.options().dtype(at::kChar));
  if (x.numel() > 0) {
    TORCH_CHECK(launch_copy(x.data_ptr(), q.data_ptr<int8_t>(), x.numel() / 8, static_cast<int>(vecs),
                            c10::cuda::getCurrentCUDAStream(x.device().index()).stream()),
                "w8a8_qsweep.copy: vecs must be 1, 2, 4 or 8, got ", vecs);
  }
  return q;
}

}  // namespace
}  // namespace w8a8::qsweep

TORCH_LIBRARY(w8a8_qsweep, m) {
  m.def("shapes() -> int[]", &w8a8::qsweep::shapes);
  m.def("per_token(Tensor x, int threads, int vecs, bool full_smem) -> (Tensor, Tensor)");
  m.impl("per_token", c10::DispatchKey::CUDA, &w8a8::qsweep::per_token);
  m.def("pipelined_shapes() -> int[]", &w8a8::qsweep::pipelined_shapes);
  m.def("pipelined(Tensor x, int threads, int vecs, int stages, int blocks, bool full_smem) -> (Tensor, Tensor)");
  m.impl("pipelined", c10::DispatchKey::CUDA, &w8a8::qsweep::pipelined);
  m.def("empty(Tensor x, int blocks) -> ()");
  m.impl("empty", c10::DispatchKey::CUDA, &w8a8::qsweep::empty);
  m.def("copy(Tensor x, int vecs) -> Tensor");
  m.impl("copy", c10::DispatchKey::CUDA, &w8a8::qsweep::copy);
}
