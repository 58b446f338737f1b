// Torch binding of the CUDA activation quantizers (quantize/quantize.cu), part of
// w8a8._C: schemas, checks, output allocation, the current stream.
//
// Kernel ops (namespace w8a8; the public ops w8a8::quantize_per_token /
// quantize_static route to them):
//   quantize_per_token_sm90(Tensor x, int rows=0) -> (Tensor, Tensor)
//       x [..., K] fp32/fp16/bf16, K >= 1, unit stride along K -> q [..., K] int8,
//       scale [..., 1] fp32; rows: the rows their storage is allocated with (0: those of
//       x), as w8a8/rows.py pads them for the sm90 GEMM (the pad rows are never written)
//   quantize_static_sm90(Tensor x, Tensor scale, Tensor? zero_point) -> Tensor
//       scale: one fp32 value on x's device; zero_point: one int8/int32 value or None
// The math is w8a8/reference.py (quantize.h states it); the fakes are registered in Python.
#include <cstdint>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "quantize/quantize.h"
#include "torch/checks.h"
#include "torch/op_namespace.h"
#include "torch/device_info.h"
#include "torch/messages.h"
#include "torch/ops.h"
#include "torch/views.h"

namespace w8a8 {
namespace {

QuantInDtype in_dtype(const at::Tensor& x) {
  switch (x.scalar_type()) {
    case at::kFloat: return QuantInDtype::kFloat32;
    case at::kHalf: return QuantInDtype::kFloat16;
    default: return QuantInDtype::kBFloat16;  // the op's checks admit these three only
  }
}

QuantizeParams params_of(const at::Tensor& rows, at::Tensor& q, bool next_kernel_full_smem) {
  QuantizeParams p;
  p.next_kernel_full_smem = next_kernel_full_smem;
  p.x = rows.data_ptr();
  p.q = q.data_ptr<int8_t>();
  p.in_dtype = in_dtype(rows);
  p.rows = rows.size(0);
  p.k = rows.size(1);
  p.ldx = rows.size(0) == 1 ? rows.size(1) : rows.stride(0);
  p.sm_count = device_info(rows.device().index()).sm_count;
  return p;
}

// What the quantizer kernels can take, after the op's rules (x non-empty).
void check_kernels(const char* op, const at::Tensor& x, int64_t k) {
  const int64_t rows = x.numel() / k;
  W8A8_CHECK_VALUE(op, rows <= 2147483647, "the CUDA quantizers need fewer than 2^31 rows, got ", rows,
                   " rows of K = ", k);
  const DeviceInfo& info = device_info(x.device().index());
  // The quantizers are built into the sm_90a library.
  checks::capability(op, "the CUDA quantizers", info.major == 9 && info.minor == 0, "9.0", info.major, info.minor,
                     x.device());
}

std::tuple<at::Tensor, at::Tensor> quantize_per_token_op(const at::Tensor& x, int64_t rows_allocated) {
  checks::quantize_per_token(x);
  return quantize_per_token_sm90_after_checks(x, rows_allocated);
}

at::Tensor quantize_static_op(const at::Tensor& x, const at::Tensor& scale,
                              const c10::optional<at::Tensor>& zero_point) {
  constexpr const char* op = "quantize_static";
  checks::quantize_static(x, scale, zero_point);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor q = at::empty(x.sizes(), x.options().dtype(at::kChar));
  if (x.numel() == 0) return q;  // also K == 0
  const int64_t k = x.size(-1);
  check_kernels(op, x, k);
  at::Tensor q_rows = leading(q, {x.numel() / k, k});
  quantize_static_checked(op, quantizer_rows(x, k), q_rows, scale, zero_point);
  return q;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> quantize_per_token_sm90_after_checks(const at::Tensor& x, int64_t rows_allocated) {
  constexpr const char* op = "quantize_per_token";
  const int64_t k = x.size(-1);  // >= 1 (checked)
  const int64_t m = x.numel() / k;
  // q and scale: views of the first m rows of storage with `padded` rows (common/padded_rows.h).
  const int64_t padded = checks::allocated_rows(op, rows_allocated, m, "rows");
  const c10::cuda::CUDAGuard guard(x.device());
  auto [q, scale] = per_token_outputs(x, padded);
  if (x.numel() == 0) return {q, scale};
  check_kernels(op, x, k);
  at::Tensor q_rows = leading(q, {m, k});
  at::Tensor scale_rows = leading(scale, {m, 1});
  quantize_per_token_checked(op, quantizer_rows(x, k), q_rows, scale_rows);
  return {q, scale};
}

std::pair<at::Tensor, at::Tensor> per_token_outputs(const at::Tensor& x, int64_t padded) {
  std::vector<int64_t> scale_shape(x.sizes().begin(), x.sizes().end());
  scale_shape.back() = 1;
  return {leading(at::empty({padded * x.size(-1)}, x.options().dtype(at::kChar)), x.sizes()),
          leading(at::empty({padded}, x.options().dtype(at::kFloat)), scale_shape)};
}

at::Tensor quantizer_rows(const at::Tensor& x, int64_t k) {
  at::Tensor rows = as_rows(x, k);
  // The kernels step rows by a pitch >= K (a broadcast x, stride 0, is copied) and read
  // K with unit stride (a single element per row has no K stride to speak of).
  if ((rows.size(0) > 1 && rows.stride(0) < k) || (k > 1 && rows.stride(1) != 1)) rows = rows.contiguous();
  return rows;
}

void quantize_per_token_checked(const char* op, const at::Tensor& rows, at::Tensor& q, at::Tensor& scale,
                                bool next_kernel_full_smem) {
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(rows.device().index()).stream();
  call_kernel_library(op, [&] {
    quantize_per_token_sm90(params_of(rows, q, next_kernel_full_smem), scale.data_ptr<float>(), stream);
  });
}

void quantize_static_checked(const char* op, const at::Tensor& rows, at::Tensor& q, const at::Tensor& scale,
                             const c10::optional<at::Tensor>& zero_point, bool next_kernel_full_smem) {
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(rows.device().index()).stream();
  const bool zp_int32 = zero_point.has_value() && zero_point->scalar_type() == at::kInt;
  call_kernel_library(op, [&] {
    quantize_static_sm90(params_of(rows, q, next_kernel_full_smem), scale.data_ptr<float>(),
                         zero_point.has_value() ? zero_point->data_ptr() : nullptr, zp_int32, stream);
  });
}

}  // namespace w8a8

TORCH_LIBRARY_FRAGMENT(W8A8_OPS, m) {
  m.def("quantize_per_token_sm90(Tensor x, int rows=0) -> (Tensor, Tensor)");
  m.def("quantize_static_sm90(Tensor x, Tensor scale, Tensor? zero_point) -> Tensor");
}

TORCH_LIBRARY_IMPL(W8A8_OPS, CUDA, m) {
  m.impl("quantize_per_token_sm90", &w8a8::quantize_per_token_op);
  m.impl("quantize_static_sm90", &w8a8::quantize_static_op);
}
