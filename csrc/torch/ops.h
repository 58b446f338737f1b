// The torch-level op functions of w8a8._C, for the bindings that compose them
// (linear_bindings.cpp). Each is registered as an op in its own *_bindings.cpp.
#pragma once

#include <cstdint>
#include <tuple>

#include <ATen/ATen.h>
#include <c10/util/Optional.h>
#include <c10/util/string_view.h>

namespace w8a8 {

// w8a8::quantize_per_token_cuda (quantize_bindings.cpp)
std::tuple<at::Tensor, at::Tensor> quantize_per_token(const at::Tensor& x);
// w8a8::quantize_static_cuda (quantize_bindings.cpp)
at::Tensor quantize_static(const at::Tensor& x, const at::Tensor& scale,
                           const c10::optional<at::Tensor>& zero_point);
// w8a8::scaled_mm_cutlass (torch_bindings.cpp)
at::Tensor scaled_mm_cutlass(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
                             const at::Tensor& b_scale, const c10::optional<at::Tensor>& bias,
                             at::ScalarType out_dtype, int64_t config_id,
                             c10::optional<int64_t> split_k, c10::string_view scheduler);

}  // namespace w8a8
