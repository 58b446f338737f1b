// The CUDA implementations of the public ops w8a8::scaled_mm, linear, quantize_per_token and
// quantize_static: which kernel runs a public op on a CUDA device is decided here and nowhere
// else wherever this library is built (docs/ARCHITECTURE.md). A compiled graph or an eager
// call reaches the kernel from here without Python; only the Triton kernels, called through
// the dispatcher, run Python.
//
// The rules, by device (default_backend states them once; `python -m w8a8 info` prints them):
//   * compute capability 9.0: the sm90 kernels (this library): the CUTLASS / decode GEMMs and
//     the CUDA per-token quantizer;
//   * 8.x: the sm80 GEMMs (w8a8._C_sm80, when loaded); the quantizers are Triton's;
//   * elsewhere, and static quantization everywhere: the Triton kernels (w8a8::*_triton).
// Operands the CUTLASS kernels cannot take (cutlass_reason) run the Triton GEMM, warned once
// with the reason. linear runs the single op (quantizer + GEMM in one call, codes row-padded)
// up to kLinearSingleOpMaxTokens tokens on sm90, quantize then scaled_mm otherwise.
// The fused producer ops (rms_norm_quant, add_rms_norm_quant, silu_mul_quant) have Triton as their
// only GPU kernel: launched from here where Python launched it before for arguments of the same
// signature (torch/triton_launch.h), else through w8a8::<op>_triton.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_set>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "common/padded_rows.h"
#include "torch/checks.h"
#include "torch/device_info.h"
#include "torch/messages.h"
#include "torch/op_namespace.h"
#include "torch/ops.h"
#include "torch/triton_launch.h"
#include "torch/views.h"

namespace w8a8 {
namespace {

// Up to this many tokens linear runs the single op on sm90: the GEMM launches as the
// quantizer's programmatic dependent and loads its first weights while the quantizer runs;
// one call instead of two. [evidence linear.single-op-max-tokens]
constexpr int64_t kLinearSingleOpMaxTokens = 256;

bool is_sm90(const DeviceInfo& info) { return info.major == 9 && info.minor == 0; }

using ScaledMmSig = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                               const c10::optional<at::Tensor>&, at::ScalarType);
using Sm80Sig = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                           const c10::optional<at::Tensor>&, at::ScalarType, c10::string_view);
using QuantizePerTokenSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&);
using QuantizeStaticSig = at::Tensor(const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&);

const c10::TypedOperatorHandle<ScaledMmSig>& triton_scaled_mm() {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("w8a8::scaled_mm_triton", "").typed<ScaledMmSig>();
  return op;
}

const c10::TypedOperatorHandle<QuantizePerTokenSig>& triton_quantize_per_token() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("w8a8::quantize_per_token_triton", "")
                             .typed<QuantizePerTokenSig>();
  return op;
}

const c10::TypedOperatorHandle<QuantizeStaticSig>& triton_quantize_static() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("w8a8::quantize_static_triton", "")
                             .typed<QuantizeStaticSig>();
  return op;
}

// w8a8::scaled_mm_sm80, once w8a8._C_sm80 is loaded (w8a8/ops.py loads it with this library);
// looked up until found, then kept.
c10::optional<c10::TypedOperatorHandle<Sm80Sig>> sm80_scaled_mm() {
  static std::mutex lock;
  static c10::optional<c10::TypedOperatorHandle<Sm80Sig>> op;
  const std::lock_guard<std::mutex> guard(lock);
  if (!op.has_value()) {
    const auto handle = c10::Dispatcher::singleton().findOp({"w8a8::scaled_mm_sm80", ""});
    if (handle.has_value() && handle->hasSchema()) op = handle->typed<Sm80Sig>();
  }
  return op;
}

// Whether the sm80 library's kernels run on this device (built for every 8.x).
bool runs_sm80(const DeviceInfo& info) { return info.major == 8 && sm80_scaled_mm().has_value(); }

// Why the CUTLASS kernels cannot take these (checked) scaled_mm operands, which Triton can;
// empty where they can. Empty problems run anywhere (no kernel runs).
std::string cutlass_reason(const at::Tensor& a, const at::Tensor& b, at::ScalarType out_dtype) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  if (out_dtype != at::kBFloat16 && out_dtype != at::kHalf) {
    return msg::join("out_dtype ", out_dtype, " (they write torch.bfloat16 / torch.float16)");
  }
  if (k % 16) return msg::join("K = ", k, ", not a multiple of 16");
  if (n % 8) return msg::join("N = ", n, ", not a multiple of 8");
  if (m == 0 || n == 0 || k == 0) return "";
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"a", &a}, {"b", &b}}) {
    if (reinterpret_cast<uintptr_t>(t->data_ptr()) % 16) {
      return msg::join(name, "'s data pointer off the 16-byte grid (storage offset ", t->storage_offset(), ")");
    }
    const int64_t pitch = t->stride(0);
    if (t->size(0) != 1 && (pitch < k || pitch % 16)) {
      return msg::join(name, "'s row stride ", pitch, " (16-byte rows need a multiple of 16 that is >= K = ", k, ")");
    }
  }
  return "";
}

// The fallback warnings said so far (each message once per process).
std::mutex warned_lock;
std::unordered_set<std::string> warned;

// Said through w8a8::_warn (w8a8/ops.py: Python's warnings.warn) where it is registered: a
// torch.ops call does not turn a TORCH_WARN into a Python warning (torch 2.11 prints it to
// stderr, where no filter or catch_warnings sees it). A warning filtered into an error raises
// from here, through the op, as it would from Python.
void warn_once(const std::string& message) {
  {
    const std::lock_guard<std::mutex> guard(warned_lock);
    if (!warned.insert(message).second) return;
  }
  const auto python_warn = c10::Dispatcher::singleton().findSchema({"w8a8::_warn", ""});
  if (!python_warn.has_value()) {
    TORCH_WARN(message);
    return;
  }
  torch::jit::Stack stack{c10::IValue(message)};
  python_warn->callBoxed(&stack);
}

// Tests: every fallback warns again.
void forget_warnings() {
  const std::lock_guard<std::mutex> guard(warned_lock);
  warned.clear();
}

at::Tensor scaled_mm_route(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
                           const at::Tensor& b_scale, const c10::optional<at::Tensor>& bias, at::ScalarType out_dtype) {
  checks::scaled_mm(a, b, a_scale, b_scale, bias, out_dtype);
  const DeviceInfo& info = device_info(a.device().index());
  const bool sm90 = is_sm90(info), sm80 = !sm90 && runs_sm80(info);
  if (sm90 || sm80) {
    const std::string why = cutlass_reason(a, b, out_dtype);
    if (why.empty()) {
      if (sm90) return scaled_mm_sm90_after_checks(a, b, a_scale, b_scale, bias, out_dtype);
      return sm80_scaled_mm()->call(a, b, a_scale, b_scale, bias, out_dtype, "");
    }
    warn_once(msg::join("w8a8.scaled_mm: the CUTLASS kernels cannot take ", why, "; using the 'triton' kernel"));
  }
  return triton_scaled_mm().call(a, b, a_scale, b_scale, bias, out_dtype);
}

std::tuple<at::Tensor, at::Tensor> quantize_per_token_route(const at::Tensor& x) {
  checks::quantize_per_token(x);
  if (is_sm90(device_info(x.device().index()))) {
    return quantize_per_token_sm90_after_checks(x, padded_rows(x.numel() / x.size(-1)));
  }
  return triton_quantize_per_token().call(x);
}

// Static quantization runs Triton's kernel on every GPU (the CUDA static quantizer runs inside the
// single op).
at::Tensor quantize_static_route(const at::Tensor& x, const at::Tensor& scale,
                                 const c10::optional<at::Tensor>& zero_point) {
  return triton_quantize_static().call(x, scale, zero_point);
}

// Whether the single op serves this (checked) linear call: sm90, few tokens, and a problem
// the CUTLASS kernels take (16-bit x, K % 16, N % 8, 16-byte weight rows).
bool single_op_serves(const at::Tensor& x, const at::Tensor& weight, const DeviceInfo& info) {
  const int64_t n = weight.size(0), k = weight.size(1);
  if (!is_sm90(info) || x.numel() > kLinearSingleOpMaxTokens * std::max<int64_t>(k, 1)) return false;
  if (x.scalar_type() != at::kBFloat16 && x.scalar_type() != at::kHalf) return false;
  if (k % 16 || n % 8 || reinterpret_cast<uintptr_t>(weight.data_ptr()) % 16) return false;
  return weight.size(0) == 1 || (weight.stride(0) >= k && weight.stride(0) % 16 == 0);
}

at::Tensor linear_route(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_scale,
                        const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& input_scale,
                        const c10::optional<at::Tensor>& input_zero_point) {
  checks::linear(x, weight, weight_scale, bias, input_scale, input_zero_point);
  const int64_t n = weight.size(0), k = weight.size(1);
  const DeviceInfo& info = device_info(x.device().index());
  if (single_op_serves(x, weight, info)) {
    int64_t m = 1;
    for (int64_t d = 0; d + 1 < x.dim(); ++d) m *= x.size(d);
    return linear_sm90_after_checks(x, weight, weight_scale, bias, input_scale, input_zero_point, padded_rows(m));
  }
  // The definition: quantize x's rows, then scaled_mm, shaped [..., N].
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = n;
  at::Tensor rows = as_rows(x, k);
  if (k > 1 && rows.stride(-1) != 1) rows = rows.contiguous();
  at::Tensor out;
  if (!input_scale.has_value()) {
    const auto [q, scale] = quantize_per_token_route(rows);
    out = scaled_mm_route(q, weight, scale, weight_scale, bias, x.scalar_type());
  } else {
    const at::Tensor q = quantize_static_route(rows, *input_scale, input_zero_point);
    out = scaled_mm_route(q, weight, *input_scale, weight_scale, bias, x.scalar_type());
  }
  return reshaped(out, out_shape);
}

// --- the fused producers -----------------------------------------------------------------------
//
// Their Triton kernel (w8a8/triton/norm_quant.py, silu_quant.py) launched from here with the
// arguments its Python wrapper passes, for the plain operands below (each term implies one of the
// op's rules, as validate.py's _plain_* expressions do), where Python launched it before for
// arguments of the same signature. Anything else, and a signature launched for the first time,
// runs w8a8::<op>_triton: it checks the operands (raising with the rules' words), launches, and
// remembers the launch for the next call.

using RmsNormQuantSig = std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, double);
using AddRmsNormQuantSig = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                                      const at::Tensor&, double);
using SiluMulQuantSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&);

template <class Sig>
c10::TypedOperatorHandle<Sig> find_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

// x [..., K] fp16 / bf16 / fp32 on a CUDA device, 1 <= K <= MAX_K, unit stride along K, not empty.
bool plain_rows(const at::Tensor& x) {
  const at::ScalarType dt = x.scalar_type();
  if (dt != at::kHalf && dt != at::kBFloat16 && dt != at::kFloat) return false;
  if (x.dim() < 1 || !x.is_cuda() || x.numel() == 0) return false;
  const int64_t k = x.size(-1);
  return k >= 1 && k <= checks::kMaxK && x.stride(-1) == 1;
}

// t of x's shape, dtype and device, unit stride along K.
bool plain_like(const at::Tensor& t, const at::Tensor& x) {
  return t.scalar_type() == x.scalar_type() && t.sizes() == x.sizes() && t.stride(-1) == 1 && t.device() == x.device();
}

// The norm's operands: x plain, weight [K] of x's dtype with unit stride on x's device, eps finite and >= 0.
bool plain_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return plain_rows(x) && weight.scalar_type() == x.scalar_type() && weight.dim() == 1 &&
         weight.size(0) == x.size(-1) && weight.stride(0) == 1 && weight.device() == x.device() && eps >= 0 &&
         eps < std::numeric_limits<double>::infinity();
}

// A producer's outputs as w8a8/padding.py's empty_outputs allocates them: codes int8 [..., K] and
// scales fp32 [..., 1] in storage of padded_rows(M) rows, then n_float contiguous [..., K] of x's dtype.
std::vector<at::Tensor> producer_outputs(const at::Tensor& x, int n_float) {
  auto [q, scale] = per_token_outputs(x, padded_rows(x.numel() / x.size(-1)));
  std::vector<at::Tensor> out;
  out.reserve(2 + n_float);
  out.push_back(std::move(q));
  out.push_back(std::move(scale));
  for (int i = 0; i < n_float; ++i) out.push_back(at::empty(x.sizes(), x.options()));
  return out;
}

// A row stride as the Python wrapper passes it, x.reshape(-1, k).stride(0): k for a single row
// (torch's view gives a one-row tensor the packed stride; the kernel never steps it).
int64_t wrapper_row_stride(const at::Tensor& rows, int64_t k) { return rows.size(0) == 1 ? k : rows.stride(0); }

// The norm kernel's launch (norm_quant.rms_norm_quant's arguments); empty where not remembered.
std::vector<at::Tensor> launch_norm_quant(const char* op, const at::Tensor& x, const at::Tensor* residual,
                                          const at::Tensor& weight, double eps) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t k = x.size(-1);
  std::vector<at::Tensor> out = producer_outputs(x, residual == nullptr ? 1 : 2);
  const at::Tensor x2 = as_rows(x, k);
  const at::Tensor r2 = residual == nullptr ? x2 : as_rows(*residual, k);
  TritonArgs args;
  args.tensor(x2).tensor(r2).tensor(weight).tensor(out[0]).tensor(out[1]).tensor(out[2]).tensor(out.back());
  args.integer(x2.size(0)).integer(k).integer(wrapper_row_stride(x2, k)).integer(wrapper_row_stride(r2, k)).real(eps);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  if (!launch_remembered_triton(op, x.device().index(), args, stream)) out.clear();
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> rms_norm_quant_route(const at::Tensor& x, const at::Tensor& weight,
                                                                    double eps) {
  if (plain_norm(x, weight, eps)) {
    const std::vector<at::Tensor> out = launch_norm_quant("rms_norm_quant", x, nullptr, weight, eps);
    if (!out.empty()) return {out[0], out[1], out[2]};
  }
  static const auto triton = find_op<RmsNormQuantSig>("w8a8::rms_norm_quant_triton");
  return triton.call(x, weight, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> add_rms_norm_quant_route(const at::Tensor& x,
                                                                                    const at::Tensor& residual,
                                                                                    const at::Tensor& weight,
                                                                                    double eps) {
  if (plain_norm(x, weight, eps) && plain_like(residual, x)) {
    const std::vector<at::Tensor> out = launch_norm_quant("add_rms_norm_quant", x, &residual, weight, eps);
    if (!out.empty()) return {out[0], out[1], out[2], out[3]};
  }
  static const auto triton = find_op<AddRmsNormQuantSig>("w8a8::add_rms_norm_quant_triton");
  return triton.call(x, residual, weight, eps);
}

std::tuple<at::Tensor, at::Tensor> silu_mul_quant_route(const at::Tensor& gate, const at::Tensor& up) {
  if (plain_rows(gate) && plain_like(up, gate)) {
    const c10::cuda::CUDAGuard guard(gate.device());
    const int64_t f = gate.size(-1);
    const std::vector<at::Tensor> out = producer_outputs(gate, 0);
    const at::Tensor g2 = as_rows(gate, f), u2 = as_rows(up, f);
    TritonArgs args;  // silu_quant.silu_mul_quant's arguments (no product stored: codes passed in its place)
    args.tensor(g2).tensor(u2).tensor(out[0]).tensor(out[1]).tensor(out[0]);
    args.integer(g2.size(0)).integer(f).integer(wrapper_row_stride(g2, f)).integer(wrapper_row_stride(u2, f));
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(gate.device().index()).stream();
    if (launch_remembered_triton("silu_mul_quant", gate.device().index(), args, stream)) return {out[0], out[1]};
  }
  static const auto triton = find_op<SiluMulQuantSig>("w8a8::silu_mul_quant_triton");
  return triton.call(gate, up);
}

// The kernel family a public op runs on `device` (operands the CUTLASS kernels cannot take
// aside): "sm90", "sm80" or "triton". The CUDA per-token quantizer where it is built (sm_90),
// Triton's elsewhere. [evidence quant.cuda-default]
std::string default_backend(c10::string_view op, int64_t device) {
  const DeviceInfo& info = device_info(static_cast<c10::DeviceIndex>(device));
  if (op == "scaled_mm" || op == "linear") return is_sm90(info) ? "sm90" : runs_sm80(info) ? "sm80" : "triton";
  if (op == "quantize_per_token") return is_sm90(info) ? "sm90" : "triton";
  if (op == "quantize_static" || op == "rms_norm_quant" || op == "add_rms_norm_quant" || op == "silu_mul_quant") {
    return "triton";
  }
  W8A8_CHECK_VALUE("default_backend", false, "unknown op '", std::string(op), "'");
  return "";
}

int64_t padded_rows_op(int64_t m) { return padded_rows(m); }

}  // namespace
}  // namespace w8a8

#ifndef W8A8_SWEEP_CONFIGS  // a sweep build (benchmarks/sweep) registers kernel ops only
TORCH_LIBRARY_FRAGMENT(W8A8_OPS, m) {
  m.def("default_backend(str op, int device) -> str");
  m.def("padded_rows(int m) -> int");
  m.def("_forget_warnings() -> ()");
}

// The public ops' schemas are defined in w8a8/ops.py, before it loads this library.
TORCH_LIBRARY_IMPL(W8A8_OPS, CUDA, m) {
  m.impl("scaled_mm", &w8a8::scaled_mm_route);
  m.impl("linear", &w8a8::linear_route);
  m.impl("quantize_per_token", &w8a8::quantize_per_token_route);
  m.impl("quantize_static", &w8a8::quantize_static_route);
  m.impl("rms_norm_quant", &w8a8::rms_norm_quant_route);
  m.impl("add_rms_norm_quant", &w8a8::add_rms_norm_quant_route);
  m.impl("silu_mul_quant", &w8a8::silu_mul_quant_route);
}

// No tensor arguments: a CompositeExplicitAutograd kernel also serves the empty dispatch key set.
TORCH_LIBRARY_IMPL(W8A8_OPS, CompositeExplicitAutograd, m) {
  m.impl("default_backend", &w8a8::default_backend);
  m.impl("padded_rows", &w8a8::padded_rows_op);
  m.impl("_forget_warnings", &w8a8::forget_warnings);
}
#endif
