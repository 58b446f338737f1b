// The tensor checks of the scaled_mm ops, written once for the sm90 binding
// (torch_bindings.cpp) and the sm80 one (scaled_mm_sm80_bindings.cpp). Every
// message starts with the op's name and gives the expected and actual value.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>
#include <c10/util/Optional.h>

#include "scaled_mm_problem.h"
#include "torch_messages.h"

namespace w8a8 {

inline void check_scale_vector(const char* op, const at::Tensor& t, const char* name, int64_t length,
                               const char* length_name, const at::Device& device) {
  W8A8_OP_CHECK(op, t.scalar_type() == at::kFloat, name, " must be float32, got ", t.scalar_type());
  W8A8_OP_CHECK(op, t.device() == device, name, " must be on ", device, " (where a is), got ", t.device());
  W8A8_OP_CHECK(op, t.numel() == 1 || t.numel() == length, name, " must hold 1 or ", length_name, " = ", length,
                " values, got ", t.numel(), " (shape ", t.sizes(), ")");
  W8A8_OP_CHECK(op, t.numel() == 1 || t.is_contiguous(), name, " must be contiguous, got strides ", t.strides(),
                " for shape ", t.sizes());
}

// dtypes, devices and shapes of (a, b, a_scale, b_scale, bias, out_dtype):
// fills p.m, p.n, p.k and p.bias_kind.
inline void check_scaled_mm_tensors(const char* op, ScaledMmProblem& p, const at::Tensor& a, const at::Tensor& b,
                                    const at::Tensor& a_scale, const at::Tensor& b_scale,
                                    const c10::optional<at::Tensor>& bias, at::ScalarType out_dtype) {
  W8A8_OP_CHECK(op, a.scalar_type() == at::kChar, "a must be int8, got ", a.scalar_type());
  W8A8_OP_CHECK(op, b.scalar_type() == at::kChar, "b must be int8, got ", b.scalar_type());
  W8A8_OP_CHECK(op, out_dtype == at::kBFloat16 || out_dtype == at::kHalf,
                "out_dtype must be bfloat16 or float16, got ", out_dtype);
  W8A8_OP_CHECK(op, a.is_cuda(), "a must be a CUDA tensor, got device ", a.device());
  const at::Device device = a.device();
  W8A8_OP_CHECK(op, b.device() == device, "b must be on ", device, " (where a is), got ", b.device());
  W8A8_OP_CHECK(op, a.dim() == 2, "a must be 2-D [M, K], got shape ", a.sizes());
  W8A8_OP_CHECK(op, b.dim() == 2, "b must be 2-D [N, K], got shape ", b.sizes());
  p.m = a.size(0);
  p.k = a.size(1);
  p.n = b.size(0);
  W8A8_OP_CHECK(op, b.size(1) == p.k, "b must be [N, K] with K = ", p.k, " (a's K), got shape ", b.sizes());
  check_scale_vector(op, a_scale, "a_scale", p.m, "M", device);
  check_scale_vector(op, b_scale, "b_scale", p.n, "N", device);
  p.bias_kind = ScaledMmBias::kNone;
  if (bias.has_value()) {
    const at::Tensor& t = *bias;
    W8A8_OP_CHECK(op, t.scalar_type() == at::kFloat || t.scalar_type() == out_dtype,
                  "bias must be float32 or out_dtype (", out_dtype, "), got ", t.scalar_type());
    W8A8_OP_CHECK(op, t.device() == device, "bias must be on ", device, " (where a is), got ", t.device());
    W8A8_OP_CHECK(op, t.dim() == 1 && t.size(0) == p.n, "bias must be 1-D [N] with N = ", p.n, ", got shape ",
                  t.sizes());
    W8A8_OP_CHECK(op, t.stride(0) == 1 || p.n == 1, "bias must be contiguous, got stride ", t.stride(0));
    p.bias_kind = t.scalar_type() == at::kFloat ? ScaledMmBias::kFloat32 : ScaledMmBias::kOutDtype;
  }
}

// out = a_scale * (b_scale * 0) + bias for K == 0 (an empty sum), as the
// reference computes it: no kernel has a zero-length K loop.
inline at::Tensor scaled_mm_empty_k(const at::Tensor& a_scale, const at::Tensor& b_scale,
                                    const c10::optional<at::Tensor>& bias, int64_t m, int64_t n,
                                    at::ScalarType out_dtype) {
  at::Tensor acc = at::zeros({m, n}, a_scale.options().dtype(at::kFloat));
  at::Tensor out = a_scale.reshape({-1, 1}) * (b_scale.reshape({1, -1}) * acc);
  if (bias.has_value()) out = out + bias->to(at::kFloat).reshape({1, n});
  return out.to(out_dtype);
}

// Row pitch of a 2-D operand. A single-row tensor's outer stride is never used
// to step (PyTorch may report any value for a size-1 dim), so it is read as
// the packed pitch, rounded up to the 16-byte rule.
inline int64_t row_pitch(const at::Tensor& t) {
  if (t.size(0) == 1) return (t.size(1) + 15) / 16 * 16;
  return t.stride(0);
}

// The 16-byte rule of scaled_mm_problem.h (TMA on sm90, cp.async on sm80):
// fills p.lda and p.ldb. `why` names the hardware in the messages.
inline void check_16byte_rows(const char* op, ScaledMmProblem& p, const at::Tensor& a, const at::Tensor& b,
                              const char* why) {
  auto aligned16 = [](const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; };
  W8A8_OP_CHECK(op, p.k % 16 == 0, "K must be a multiple of 16 (16-byte int8 rows for ", why, "), got K = ", p.k);
  W8A8_OP_CHECK(op, p.n % 8 == 0, "N must be a multiple of 8 (16-byte output rows for ", why, "), got N = ", p.n);
  W8A8_OP_CHECK(op, a.stride(1) == 1, "a must have unit stride along K, got strides ", a.strides());
  W8A8_OP_CHECK(op, b.stride(1) == 1, "b must have unit stride along K, got strides ", b.strides());
  W8A8_OP_CHECK(op, aligned16(a), "a's data pointer must be 16-byte aligned (", why, "), got ", a.data_ptr(),
                " (storage offset ", a.storage_offset(), ")");
  W8A8_OP_CHECK(op, aligned16(b), "b's data pointer must be 16-byte aligned (", why, "), got ", b.data_ptr(),
                " (storage offset ", b.storage_offset(), ")");
  p.lda = row_pitch(a);
  p.ldb = row_pitch(b);
  W8A8_OP_CHECK(op, p.lda >= p.k && p.lda % 16 == 0,
                "a's row stride must be >= K and a multiple of 16 (16-byte aligned rows for ", why,
                "), got strides ", a.strides(), " for shape ", a.sizes());
  W8A8_OP_CHECK(op, p.ldb >= p.k && p.ldb % 16 == 0,
                "b's row stride must be >= K and a multiple of 16 (16-byte aligned rows for ", why,
                "), got strides ", b.strides(), " for shape ", b.sizes());
  const int64_t int_max = 2147483647;
  W8A8_OP_CHECK(op, p.m <= int_max && p.n <= int_max && p.k <= int_max, "M, N, K must be < 2^31, got M = ", p.m,
                ", N = ", p.n, ", K = ", p.k);
}

// Allocates out [M, N] and points p at the tensors (after the checks above).
inline at::Tensor bind_problem(ScaledMmProblem& p, const at::Tensor& a, const at::Tensor& b,
                               const at::Tensor& a_scale, const at::Tensor& b_scale,
                               const c10::optional<at::Tensor>& bias, at::ScalarType out_dtype) {
  at::Tensor out = at::empty({p.m, p.n}, a.options().dtype(out_dtype));
  p.a = a.data_ptr<int8_t>();
  p.b = b.data_ptr<int8_t>();
  p.out = out.data_ptr();
  p.a_scale = a_scale.data_ptr<float>();
  p.b_scale = b_scale.data_ptr<float>();
  p.a_scale_per_token = a_scale.numel() != 1;
  p.b_scale_per_channel = b_scale.numel() != 1;
  p.bias = bias.has_value() ? bias->data_ptr() : nullptr;
  p.out_dtype = out_dtype == at::kBFloat16 ? ScaledMmOutDtype::kBFloat16 : ScaledMmOutDtype::kFloat16;
  p.ldd = out.stride(0);
  return out;
}

}  // namespace w8a8
