// w8a8::linear_cutlass: W8A8Linear's forward on sm90 as one op (one Python-to-C++
// crossing per layer instead of two, and no Python validation on the hot path:
// both halves check their inputs in C++ with the op's wording).
//
//   linear_cutlass(Tensor x, Tensor weight, Tensor weight_scale, Tensor? bias,
//                  Tensor? input_scale, int? split_k=None, str scheduler="auto") -> Tensor
//     x [..., K] bf16/fp16 -> out [..., N] in x's dtype:
//       input_scale None: q, s = quantize_per_token(x)       (dynamic, per token)
//       input_scale [1]:  q = quantize_static(x, input_scale), s = input_scale
//       out = scaled_mm(q, weight, s, weight_scale, bias, x.dtype)   (CUTLASS sm90)
// Asymmetric static activations (a zero point) stay on the composed Python path.
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
#include <torch/library.h>

#include "torch_messages.h"
#include "torch_ops.h"

namespace w8a8 {
namespace {

at::Tensor linear_cutlass(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_scale,
                          const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& input_scale,
                          c10::optional<int64_t> split_k, c10::string_view scheduler) {
  constexpr const char* op = "w8a8.linear_cutlass";
  W8A8_OP_CHECK(op, x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf,
                "x must be bfloat16 or float16 (the output dtype), got ", x.scalar_type());
  W8A8_OP_CHECK(op, x.dim() >= 1 && weight.dim() == 2 && x.size(-1) == weight.size(1),
                "x must be [..., K] with K = weight.size(1), got x ", x.sizes(), " and weight ",
                weight.sizes());
  const at::Tensor x2 = x.reshape({-1, x.size(-1)});
  at::Tensor q, a_scale;
  if (input_scale.has_value()) {
    q = quantize_static(x2, *input_scale, c10::nullopt);
    a_scale = *input_scale;
  } else {
    std::tie(q, a_scale) = quantize_per_token(x2);
  }
  at::Tensor out = scaled_mm_cutlass(q, weight, a_scale, weight_scale, bias, x.scalar_type(), -1, split_k,
                                     scheduler);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = weight.size(0);
  return out.view(shape);
}

}  // namespace
}  // namespace w8a8

TORCH_LIBRARY_FRAGMENT(w8a8, m) {
  m.def(
      "linear_cutlass(Tensor x, Tensor weight, Tensor weight_scale, Tensor? bias, Tensor? input_scale, "
      "int? split_k=None, str scheduler=\"auto\") -> Tensor");
}

TORCH_LIBRARY_IMPL(w8a8, CUDA, m) { m.impl("linear_cutlass", &w8a8::linear_cutlass); }
