// Torch binding of W8A8Linear's forward on sm90 as one op (w8a8._C): the CUDA
// quantizer and the sm90 GEMM in one Python-to-C++ crossing, for the few-token
// calls where host time dominates.
//
// Kernel op (namespace w8a8; the public op w8a8::linear routes to it):
//   linear_sm90(Tensor x, Tensor weight, Tensor weight_scale, Tensor? bias,
//               Tensor? input_scale, Tensor? input_zero_point, int rows=0, str config="") -> Tensor
//     x [..., K] bf16/fp16 (any strides) -> out [..., N] in x's dtype:
//       input_scale None: q, s = quantize_per_token(x)                          (dynamic)
//       else:             q = quantize_static(x, input_scale, input_zero_point), s = input_scale
//       out = scaled_mm(q, weight, s, weight_scale, bias, x.dtype)  (the sm90 heuristic)
//     The bias is used as given: with a zero point it is the folded one. rows: the
//     rows q and s are allocated with (0: M), as w8a8/rows.py pads them; the GEMM runs
//     on those rows and the first M rows of its output are returned (w8a8/rows.py
//     says why). config: "" (the heuristic) or an entry of the sm90 table, as
//     scaled_mm_sm90 takes it (benchmarks time a tile end to end with it).
//     The GEMM launches as the quantizer's programmatic dependent and loads its first
//     weight tiles while the quantizer runs (ScaledMmSm90Params::weights_ready); before a
//     CUTLASS GEMM the quantizer runs at the largest shared-memory split, so that the
//     GEMM's CTAs can start beside its blocks (QuantizeParams::next_kernel_full_smem).
// It checks the rules of validate.linear once, then the kernels' limits, and
// runs the quantizer and the GEMM on the checked operands.
#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "sm90/scaled_mm_sm90.h"
#include "torch/checks.h"
#include "torch/op_namespace.h"
#include "torch/device_info.h"
#include "torch/messages.h"
#include "torch/ops.h"
#include "torch/views.h"

namespace w8a8 {
namespace {

constexpr const char* kOp = "linear";
// Up to this many tokens the output shares the codes' allocation (host time); above, the codes
// are freed once the GEMM has read them instead of living as long as the output.
constexpr int64_t kOneBufferMaxTokens = 256;

at::Tensor linear_sm90_op(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_scale,
                          const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& input_scale,
                          const c10::optional<at::Tensor>& input_zero_point, int64_t rows, c10::string_view config) {
  checks::linear(x, weight, weight_scale, bias, input_scale, input_zero_point);
  return linear_sm90_after_checks(x, weight, weight_scale, bias, input_scale, input_zero_point, rows, config);
}

}  // namespace

at::Tensor linear_sm90_after_checks(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_scale,
                                    const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& input_scale,
                                    const c10::optional<at::Tensor>& input_zero_point, int64_t rows_allocated,
                                    c10::string_view config) {
  const int64_t n = weight.size(0), k = weight.size(1);
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = n;
  int64_t m = 1;
  for (size_t d = 0; d + 1 < out_shape.size(); ++d) m *= out_shape[d];
  const int64_t padded = checks::allocated_rows(kOp, rows_allocated, m, "tokens");
  const int config_id = sm90_config_id(kOp, config);  // checked before any early return
  // The composed definition quantizes x per token first, which refuses K = 0 with its
  // own message: the same error here.
  if (!input_scale.has_value() && k == 0) {
    const std::vector<int64_t> rows_shape{m, k};
    checks::quantize_per_token(at::empty(rows_shape, x.options().device(at::kMeta)));
  }

  const at::Device device = x.device();
  const c10::cuda::CUDAGuard device_guard(device);
  if (m == 0 || n == 0) return at::empty(out_shape, x.options());
  if (k == 0) return scaled_mm_empty_k(*input_scale, weight_scale, bias, m, n, x.scalar_type()).view(out_shape);

  const DeviceInfo& info = device_info(device.index());
  checks::gemm_kernels(kOp, checks::kSm90Kernels, x.scalar_type(), "output dtype", m, n, k, "x", nullptr, "weight",
                       weight);
  // The GEMM kernels and the quantizers are sm_90a cubins.
  checks::capability(kOp, "the sm90 kernels", info.major == 9 && info.minor == 0, "9.0", info.major, info.minor,
                     device);

  const at::Tensor rows = quantizer_rows(x, k);
  // The codes and (dynamic) the per-token scales in one allocation: [padded, K] int8, then
  // [padded] fp32 at a 16-byte aligned offset. The quantizer writes the first m rows; the pad
  // rows reach only output rows dropped below. Up to kOneBufferMaxTokens tokens the output
  // ([padded, N] in x's dtype) comes first in the same allocation: one allocation fewer on the
  // calls whose host time matters, and the output's storage holds those codes while it lives.
  const bool one_buffer = m <= kOneBufferMaxTokens;
  const int64_t out_size = one_buffer ? padded * n * static_cast<int64_t>(x.element_size()) : 0;
  const int64_t out_bytes = (out_size + 15) / 16 * 16;  // the codes start 16-byte aligned
  const int64_t scale_offset = out_bytes + (padded * k + 15) / 16 * 16;
  const at::Tensor buffer = at::empty({input_scale.has_value() ? out_bytes + padded * k : scale_offset + 4 * padded},
                                      x.options().dtype(at::kByte));
  at::Tensor out_padded;
  if (one_buffer) out_padded = carve(buffer, x.scalar_type(), {padded, n}, 0);
  const at::Tensor q_padded = carve(buffer, at::kChar, {padded, k}, out_bytes);
  at::Tensor q = carve(buffer, at::kChar, {m, k}, out_bytes);
  const at::Tensor a_scale_padded =
      input_scale.has_value() ? *input_scale : carve(buffer, at::kFloat, {padded, 1}, scale_offset);
  ScaledMmSm90Params params;  // no split request
  params.m = padded;
  params.n = n;
  params.k = k;
  params.config_id = config_id;
  params.weights_ready = true;  // the kernel before the GEMM is the quantizer below
  // Planned before the quantizer runs (nothing is read yet), which then knows what follows it.
  const Sm90Call gemm = plan_scaled_mm_sm90_checked(kOp, params, q_padded, weight, a_scale_padded, weight_scale, bias,
                                                    x.scalar_type(), info, std::move(out_padded));
  if (input_scale.has_value()) {
    quantize_static_checked(kOp, rows, q, *input_scale, input_zero_point, gemm.plan.cutlass);
  } else {
    at::Tensor a_scale = carve(buffer, at::kFloat, {m, 1}, scale_offset);
    quantize_per_token_checked(kOp, rows, q, a_scale, gemm.plan.cutlass);
  }
  const at::Tensor out = run_scaled_mm_sm90_checked(kOp, gemm);
  return leading(out, out_shape);
}

}  // namespace w8a8

TORCH_LIBRARY_FRAGMENT(W8A8_OPS, m) {
  m.def(
      "linear_sm90(Tensor x, Tensor weight, Tensor weight_scale, Tensor? bias, Tensor? input_scale, "
      "Tensor? input_zero_point, int rows=0, str config=\"\") -> Tensor");
}

TORCH_LIBRARY_IMPL(W8A8_OPS, CUDA, m) { m.impl("linear_sm90", &w8a8::linear_sm90_op); }
