// Torch binding of the CUDA activation quantizers (csrc/quantize.cu): schemas,
// tensor checks, output allocation, the current stream.
//
// Ops (namespace w8a8), the "cuda" backend of w8a8.quantize_per_token / quantize_static:
//   quantize_per_token_cuda(Tensor x) -> (Tensor q, Tensor scale)
//       x [..., K] fp32/fp16/bf16, last dim contiguous -> q [..., K] int8, scale [..., 1] fp32
//   quantize_static_cuda(Tensor x, Tensor scale, Tensor? zero_point) -> Tensor q
//       scale: one fp32 value on x's device; zero_point: one int8/int32 value or None
// The math is w8a8/reference.py (quantize.h states it); the fakes are registered in w8a8/ops.py.
#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "quantize.h"
#include "torch_device_info.h"
#include "torch_messages.h"
#include "torch_ops.h"

namespace w8a8 {
namespace {

QuantInDtype in_dtype(const at::Tensor& x, const char* op) {
  switch (x.scalar_type()) {
    case at::kFloat: return QuantInDtype::kFloat32;
    case at::kHalf: return QuantInDtype::kFloat16;
    case at::kBFloat16: return QuantInDtype::kBFloat16;
    default: break;
  }
  W8A8_OP_CHECK(op, false, "x must be float32, float16 or bfloat16, got ", x.scalar_type());
  return QuantInDtype::kFloat32;
}

// x as [rows, K] with unit column stride (a view when the leading dims merge), plus
// the checks every quantizer shares.
at::Tensor rows_of(const at::Tensor& x, const char* op) {
  W8A8_OP_CHECK(op, x.is_cuda(), "x must be a CUDA tensor, got device ", x.device());
  W8A8_OP_CHECK(op, x.dim() >= 1, "x must have at least 1 dimension [..., K], got shape ", x.sizes());
  const int64_t k = x.size(-1);
  W8A8_OP_CHECK(op, k >= 1 || x.numel() == 0, "K (x's last dim) must be >= 1, got shape ", x.sizes());
  W8A8_OP_CHECK(op, k <= 1 || x.stride(-1) == 1, "x's last dim must be contiguous, got strides ",
                x.strides(), " for shape ", x.sizes());
  const DeviceInfo& info = device_info(x.device().index());
  W8A8_OP_CHECK(op, info.major == 9 && info.minor == 0,
                "the CUDA quantization kernels are built for sm_90a (compute capability 9.0), got ",
                info.major, ".", info.minor, " on ", x.device());
  return x.reshape({-1, std::max<int64_t>(k, 1)});
}

QuantizeParams params_of(const at::Tensor& rows, at::Tensor& q, QuantInDtype dtype) {
  QuantizeParams p;
  p.x = rows.data_ptr();
  p.q = q.data_ptr<int8_t>();
  p.in_dtype = dtype;
  p.rows = rows.size(0);
  p.k = rows.size(1);
  p.ldx = rows.size(0) == 1 ? rows.size(1) : rows.stride(0);
  return p;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> quantize_per_token(const at::Tensor& x) {
  constexpr const char* op = "w8a8.quantize_per_token(backend='cuda')";
  const QuantInDtype dtype = in_dtype(x, op);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor rows = rows_of(x, op);
  at::Tensor q = at::empty(x.sizes(), x.options().dtype(at::kChar));
  std::vector<int64_t> scale_shape(x.sizes().begin(), x.sizes().end());
  scale_shape.back() = 1;
  at::Tensor scale = at::empty(scale_shape, x.options().dtype(at::kFloat));
  if (x.numel() == 0) return {q, scale};
  try {
    quantize_per_token_cuda(params_of(rows, q, dtype), scale.data_ptr<float>(),
                            c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
  } catch (const std::exception& e) {
    W8A8_OP_CHECK(op, false, e.what());
  }
  return {q, scale};
}

at::Tensor quantize_static(const at::Tensor& x, const at::Tensor& scale,
                           const c10::optional<at::Tensor>& zero_point) {
  constexpr const char* op = "w8a8.quantize_static(backend='cuda')";
  const QuantInDtype dtype = in_dtype(x, op);
  W8A8_OP_CHECK(op, scale.scalar_type() == at::kFloat && scale.numel() == 1,
                "scale must hold one float32 value, got ", scale.scalar_type(), " of shape ", scale.sizes());
  W8A8_OP_CHECK(op, scale.device() == x.device(), "scale must be on ", x.device(), " like x, got ",
                scale.device());
  bool zp_int32 = false;
  if (zero_point.has_value()) {
    const at::Tensor& zp = *zero_point;
    W8A8_OP_CHECK(op, (zp.scalar_type() == at::kChar || zp.scalar_type() == at::kInt) && zp.numel() == 1,
                  "zero_point must hold one int8 or int32 value, got ", zp.scalar_type(), " of shape ",
                  zp.sizes());
    W8A8_OP_CHECK(op, zp.device() == x.device(), "zero_point must be on ", x.device(), " like x, got ",
                  zp.device());
    zp_int32 = zp.scalar_type() == at::kInt;
  }
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor rows = rows_of(x, op);
  at::Tensor q = at::empty(x.sizes(), x.options().dtype(at::kChar));
  if (x.numel() == 0) return q;
  try {
    quantize_static_cuda(params_of(rows, q, dtype), scale.data_ptr<float>(),
                         zero_point.has_value() ? zero_point->data_ptr() : nullptr, zp_int32,
                         c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
  } catch (const std::exception& e) {
    W8A8_OP_CHECK(op, false, e.what());
  }
  return q;
}

}  // namespace w8a8

TORCH_LIBRARY_FRAGMENT(w8a8, m) {
  m.def("quantize_per_token_cuda(Tensor x) -> (Tensor, Tensor)");
  m.def("quantize_static_cuda(Tensor x, Tensor scale, Tensor? zero_point) -> Tensor");
}

TORCH_LIBRARY_IMPL(w8a8, CUDA, m) {
  m.impl("quantize_per_token_cuda", &w8a8::quantize_per_token);
  m.impl("quantize_static_cuda", &w8a8::quantize_static);
}
