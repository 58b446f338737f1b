// What the bindings share after their checks: tensors -> ScaledMmProblem, the
// K == 0 result, the translation of kernel-library exceptions, and the bodies
// of the sm90 GEMM and the CUDA quantizers on checked operands (linear.cpp
// composes them without checking again; they are defined in scaled_mm_sm90.cpp
// and quantize.cpp).
#pragma once

#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <tuple>

#include <ATen/ATen.h>
#include <c10/util/Optional.h>

#include "common/scaled_mm_problem.h"
#include "sm90/scaled_mm_sm90.h"
#include "torch/checks.h"
#include "torch/device_info.h"
#include "torch/messages.h"

namespace w8a8 {

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

// Points p at the tensors (p.m, p.n, p.k already set, the operands checked) and at out
// [M, N] in out_dtype: `out` where given (contiguous), else allocated here.
inline at::Tensor bind_problem(ScaledMmProblem& p, const at::Tensor& a, const at::Tensor& b,
                               const at::Tensor& a_scale, const at::Tensor& b_scale,
                               const c10::optional<at::Tensor>& bias, at::ScalarType out_dtype,
                               at::Tensor out = {}) {
  if (!out.defined()) out = at::empty({p.m, p.n}, a.options().dtype(out_dtype));
  p.a = a.data_ptr<int8_t>();
  p.b = b.data_ptr<int8_t>();
  p.out = out.data_ptr();
  p.a_scale = a_scale.data_ptr<float>();
  p.b_scale = b_scale.data_ptr<float>();
  p.a_scale_per_token = a_scale.numel() != 1;
  p.b_scale_per_channel = b_scale.numel() != 1;
  p.bias = bias.has_value() ? bias->data_ptr() : nullptr;
  p.bias_kind = !bias.has_value()                      ? ScaledMmBias::kNone
                : bias->scalar_type() == at::kFloat    ? ScaledMmBias::kFloat32
                                                       : ScaledMmBias::kOutDtype;
  p.out_dtype = out_dtype == at::kBFloat16 ? ScaledMmOutDtype::kBFloat16 : ScaledMmOutDtype::kFloat16;
  p.lda = checks::row_pitch(a);
  p.ldb = checks::row_pitch(b);
  p.ldd = out.stride(0);
  return out;
}

// Runs `fn` (a call into a kernel library) and rethrows what it throws with the
// op's name: std::invalid_argument (params the library refuses) as ValueError,
// anything else (CUTLASS, launch) as RuntimeError. A failing GEMM's message ends with
// its problem shape (`shape`; the string is built only then).
template <class Fn>
auto call_kernel_library(const char* op, Fn&& fn, const ScaledMmProblem* shape = nullptr) -> decltype(fn()) {
  try {
    return fn();
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    const std::string context =
        shape == nullptr ? std::string()
                         : msg::join(" (M = ", shape->m, ", N = ", shape->n, ", K = ", shape->k, ")");
    if (dynamic_cast<const std::invalid_argument*>(&e) != nullptr) W8A8_CHECK_VALUE(op, false, e.what(), context);
    W8A8_CHECK_RUNTIME(op, false, e.what(), context);
  }
  throw std::logic_error("unreachable");
}

// The sm90 GEMM on checked operands (M, N, K > 0, the kernels' limits and the
// capability checked): plan, workspace, run. `params` holds M, N, K and the config /
// split_k / scheduler request; out [M, N] in out_dtype is written on the current
// stream. `op` names the public op in messages. (scaled_mm_sm90.cpp)
at::Tensor scaled_mm_sm90_checked(const char* op, const ScaledMmSm90Params& params, const at::Tensor& a,
                                  const at::Tensor& b, const at::Tensor& a_scale, const at::Tensor& b_scale,
                                  const c10::optional<at::Tensor>& bias, at::ScalarType out_dtype,
                                  const DeviceInfo& info);

// The sm90 GEMM on operands that passed checks::scaled_mm (what the kernel op
// w8a8::scaled_mm_sm90 runs after its checks): the kernels' limits, K == 0 and empty
// problems, the codes' padded rows (common/padded_rows.h), plan and run. `config`,
// `split_k`, `scheduler` as the kernel op takes them. (scaled_mm_sm90.cpp)
at::Tensor scaled_mm_sm90_after_checks(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
                                       const at::Tensor& b_scale, const c10::optional<at::Tensor>& bias,
                                       at::ScalarType out_dtype, c10::string_view config = "",
                                       c10::optional<int64_t> split_k = c10::nullopt,
                                       c10::string_view scheduler = "auto");

// `t` (2-D [M, C]) seen with `rows` rows, same strides, where its storage holds them;
// an undefined tensor where it does not. (scaled_mm_sm90.cpp)
at::Tensor widened(const at::Tensor& t, int64_t rows);

// The CUDA per-token quantizer (w8a8::quantize_per_token_sm90 after its checks): q and scale
// in storage of `rows` rows (0: x's own), views of the first M. (quantize.cpp)
std::tuple<at::Tensor, at::Tensor> quantize_per_token_sm90_after_checks(const at::Tensor& x, int64_t rows);

// W8A8Linear's forward as one call (w8a8::linear_sm90 after checks::linear): the CUDA
// quantizer, then the sm90 GEMM, codes in storage of `rows` rows (0: x's own). (linear.cpp)
at::Tensor linear_sm90_after_checks(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_scale,
                                    const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& input_scale,
                                    const c10::optional<at::Tensor>& input_zero_point, int64_t rows,
                                    c10::string_view config = "");

// The sm90 table entry a `config` argument names: -1 for "" (the heuristic), else its id;
// any other name is a ValueError that lists the table, worded for `op`.
int sm90_config_id(const char* op, c10::string_view config);

// The same in two steps, for a caller that launches a kernel of its own between them
// and needs to know what the GEMM runs (w8a8::linear's quantizer): the plan binds the
// operands (read only when run) and allocates the output (or takes `out`, [M, N] contiguous
// in out_dtype, where given).
struct Sm90Call {
  ScaledMmSm90Params params;
  ScaledMmSm90Plan plan;
  at::Tensor out;
};
Sm90Call plan_scaled_mm_sm90_checked(const char* op, ScaledMmSm90Params params, const at::Tensor& a,
                                      const at::Tensor& b, const at::Tensor& a_scale, const at::Tensor& b_scale,
                                      const c10::optional<at::Tensor>& bias, at::ScalarType out_dtype,
                                      const DeviceInfo& info, at::Tensor out = {});
at::Tensor run_scaled_mm_sm90_checked(const char* op, const Sm90Call& call);

// The per-token codes and scales of x [..., K] (int8 of x's shape, fp32 of x's shape with a last
// size of 1), views of the first rows of storage holding `padded` rows (common/padded_rows.h):
// the CUDA quantizer's outputs and the fused producers'. (quantize.cpp)
std::pair<at::Tensor, at::Tensor> per_token_outputs(const at::Tensor& x, int64_t padded);

// x as [rows, K] with unit stride along K and a row pitch the quantizers take (a view
// where the strides allow it). (quantize.cpp)
at::Tensor quantizer_rows(const at::Tensor& x, int64_t k);

// The CUDA quantizers on checked operands: `rows` from quantizer_rows, non-empty, on a
// device they run on; q [rows, K] int8 and (per token) scale [rows, 1] fp32 are written
// on the current stream. `op` names the public op in messages. (quantize.cpp)
// next_kernel_full_smem: a CUTLASS GEMM is launched right after (QuantizeParams).
void quantize_per_token_checked(const char* op, const at::Tensor& rows, at::Tensor& q, at::Tensor& scale,
                                bool next_kernel_full_smem = false);
void quantize_static_checked(const char* op, const at::Tensor& rows, at::Tensor& q, const at::Tensor& scale,
                             const c10::optional<at::Tensor>& zero_point, bool next_kernel_full_smem = false);

}  // namespace w8a8
