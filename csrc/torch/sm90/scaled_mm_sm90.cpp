// Torch binding of the sm90 GEMM table (w8a8._C): schemas, checks, output and
// workspace allocation, stream and device plumbing. The kernels sit behind the
// torch-free interface of sm90/scaled_mm_sm90.h.
//
// Kernel ops (namespace w8a8; the public op w8a8::scaled_mm routes to them):
//   scaled_mm_sm90(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, Tensor? bias,
//                  ScalarType out_dtype, str config="", int? split_k=None,
//                  str scheduler="auto") -> Tensor
//       out[m, n] = a_scale[m] * (b_scale[n] * float(a @ b^T)[m, n]) + bias[n] (fp32,
//       one rounding to out_dtype). config "" = the heuristic; otherwise the name of a
//       table entry (the error for an unknown name lists them). split_k: None = the
//       heuristic, 1 = no split, n = split K n ways; scheduler: "auto", "persistent"
//       (data-parallel) or "stream_k" (see ScaledMmScheduler).
//   scaled_mm_sm90_plan(int m, int n, int k, str config="", int? split_k=None,
//                       str scheduler="auto") -> (str, str, int)
//       What scaled_mm_sm90 (and linear_sm90's GEMM) runs for that shape on the current
//       device: (entry name, K decomposition, splits). Raises as the op would.
//   sm90_config_names() -> str[]       the table, in id order (ids depend on the build)
//   sm90_archs() -> int[]              the archs this library holds kernels for (setup.py's SM90_ARCHS)
//
// Importing w8a8._C loads this library; the static initialisers below (and those
// of quantize.cpp and linear.cpp) register the ops, so the module itself is empty.
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "common/padded_rows.h"
#include "sm90/scaled_mm_sm90.h"
#include "torch/checks.h"
#include "torch/op_namespace.h"
#include "torch/device_info.h"
#include "torch/messages.h"
#include "torch/ops.h"
#include "torch/views.h"

#ifndef W8A8_SM90_ARCHS
#error "W8A8_SM90_ARCHS (the archs of the sm90 kernels, from setup.py's SM90_ARCHS) is not defined"
#endif

namespace w8a8 {
namespace {

constexpr const char* kOp = "scaled_mm";
constexpr const char* kPlanOp = "scaled_mm_sm90_plan";

std::string config_list() {
  std::string list;
  for (int i = 0; i < scaled_mm_sm90_num_configs(); ++i) {
    list += (i ? ", " : "") + std::string(scaled_mm_sm90_config_name(i));
  }
  return list;
}

}  // namespace

// -1 for "" (the heuristic), else the id of the named entry.
int sm90_config_id(const char* op, c10::string_view config) {
  if (config.empty()) return -1;
  for (int i = 0; i < scaled_mm_sm90_num_configs(); ++i) {
    if (config == scaled_mm_sm90_config_name(i)) return i;
  }
  W8A8_CHECK_VALUE(op, false, "config must be '' (the heuristic) or an entry of the sm90 table (", config_list(),
                   "), got '", std::string(config), "'");
  return -1;
}

namespace {

ScaledMmScheduler parse_scheduler(const char* op, c10::string_view scheduler) {
  if (scheduler == "auto") return ScaledMmScheduler::kAuto;
  if (scheduler == "persistent") return ScaledMmScheduler::kPersistent;
  if (scheduler == "stream_k") return ScaledMmScheduler::kStreamK;
  W8A8_CHECK_VALUE(op, false, "scheduler must be 'auto', 'persistent' or 'stream_k', got '", std::string(scheduler),
                   "'");
  return ScaledMmScheduler::kAuto;
}

// The request arguments, checked with the op's wording once K is known (before any
// early return); the library checks the parts that depend on the entry it picks.
void set_request(const char* op, ScaledMmSm90Params& params, c10::string_view config,
                 const c10::optional<int64_t>& split_k, c10::string_view scheduler_name) {
  params.config_id = sm90_config_id(op, config);
  const ScaledMmScheduler scheduler = parse_scheduler(op, scheduler_name);
  int64_t splits = 0;
  if (split_k.has_value()) {
    splits = *split_k;
    const int64_t k_tiles = std::max<int64_t>(1, (params.k + 127) / 128);  // K = 0 still takes split_k = 1
    W8A8_CHECK_VALUE(op, splits >= 1 && splits <= k_tiles, "split_k must be None (heuristic) or in [1, ", k_tiles,
                     "] (1 = no split; at most one split per 128-wide K tile, K = ", params.k, "), got ", splits);
    W8A8_CHECK_VALUE(op, splits == 1 || scheduler == ScaledMmScheduler::kAuto, "split_k = ", splits,
                     " needs scheduler 'auto' (got '", std::string(scheduler_name),
                     "': 'persistent' never splits K, 'stream_k' balances K by itself)");
  }
  params.split_k = static_cast<int>(splits);
  params.scheduler = scheduler;
}

at::Tensor scaled_mm_sm90_op(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
                             const at::Tensor& b_scale, const c10::optional<at::Tensor>& bias, at::ScalarType out_dtype,
                             c10::string_view config, c10::optional<int64_t> split_k, c10::string_view scheduler) {
  checks::scaled_mm(a, b, a_scale, b_scale, bias, out_dtype);
  return scaled_mm_sm90_after_checks(a, b, a_scale, b_scale, bias, out_dtype, config, split_k, scheduler);
}

std::tuple<std::string, std::string, int64_t> scaled_mm_sm90_plan_op(int64_t m, int64_t n, int64_t k,
                                                                     c10::string_view config,
                                                                     c10::optional<int64_t> split_k,
                                                                     c10::string_view scheduler) {
  const int64_t int_max = 2147483647;
  W8A8_CHECK_VALUE(kPlanOp, m > 0 && n > 0 && k > 0 && m <= int_max && n <= int_max && k <= int_max,
                   "M, N, K must be in [1, 2^31), got M = ", m, ", N = ", n, ", K = ", k);
  W8A8_CHECK_VALUE(kPlanOp, k % 16 == 0 && n % 8 == 0, "the sm90 kernels need K % 16 == 0 and N % 8 == 0, got N = ",
                   n, ", K = ", k);
  ScaledMmSm90Params params;
  // Placeholder addresses: the plan reads shapes only, never the data.
  alignas(16) static const int8_t kAligned[16] = {};
  static const float kScale[1] = {1.0f};
  params.a = params.b = kAligned;
  params.out = const_cast<int8_t*>(kAligned);
  params.a_scale = params.b_scale = kScale;
  params.m = m;
  params.n = n;
  params.k = k;
  params.lda = params.ldb = k;
  params.ldd = n;
  set_request(kPlanOp, params, config, split_k, scheduler);
  const c10::DeviceIndex device = c10::cuda::current_device();
  params.device_id = device;
  params.sm_count = device_info(device).sm_count;
  const ScaledMmSm90Plan plan =
      call_kernel_library(kPlanOp, [&] { return scaled_mm_sm90_plan(params); }, &params);
  return {plan.config_name, plan.decomposition, plan.splits};
}

std::vector<std::string> sm90_config_names() {
  std::vector<std::string> names;
  for (int i = 0; i < scaled_mm_sm90_num_configs(); ++i) names.emplace_back(scaled_mm_sm90_config_name(i));
  return names;
}

std::vector<int64_t> sm90_archs() { return {W8A8_SM90_ARCHS}; }

}  // namespace

at::Tensor widened(const at::Tensor& t, int64_t rows) {
  if (t.dim() != 2 || rows <= t.size(0) || t.size(1) == 0) return {};
  const int64_t last = t.storage_offset() + (rows - 1) * t.stride(0) + (t.size(1) - 1) * t.stride(1);
  if ((last + 1) * static_cast<int64_t>(t.element_size()) > static_cast<int64_t>(t.storage().nbytes())) return {};
  return with_rows(t, rows);
}

at::Tensor scaled_mm_sm90_after_checks(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
                                       const at::Tensor& b_scale, const c10::optional<at::Tensor>& bias,
                                       at::ScalarType out_dtype, c10::string_view config,
                                       c10::optional<int64_t> split_k, c10::string_view scheduler) {
  ScaledMmSm90Params params;
  params.m = a.size(0);
  params.k = a.size(1);
  params.n = b.size(0);
  set_request(kOp, params, config, split_k, scheduler);

  const at::Device device = a.device();
  const c10::cuda::CUDAGuard device_guard(device);
  if (params.m == 0 || params.n == 0) return at::empty({params.m, params.n}, a.options().dtype(out_dtype));
  if (params.k == 0) return scaled_mm_empty_k(a_scale, b_scale, bias, params.m, params.n, out_dtype);

  const DeviceInfo& info = device_info(device.index());
  checks::gemm_kernels(kOp, checks::kSm90Kernels, out_dtype, "out_dtype", params.m, params.n, params.k, "a", &a, "b",
                       b);
  // The kernels are sm_90a cubins (wgmma, setmaxnreg).
  checks::capability(kOp, "the sm90 kernels", info.major == 9 && info.minor == 0, "9.0", info.major, info.minor,
                     device);
  // Codes and per-token scales whose storage holds padded_rows(M) rows (the producers
  // allocate them so, common/padded_rows.h) run on those rows; the first M rows are returned.
  const int64_t rows = padded_rows(params.m);
  if (rows != params.m) {
    const at::Tensor wide_a = widened(a, rows);
    const at::Tensor wide_scale = a_scale.numel() == 1 || !wide_a.defined()
                                      ? a_scale
                                      : widened(a_scale.dim() == 2 ? a_scale : a_scale.reshape({params.m, -1}), rows);
    if (wide_a.defined() && wide_scale.defined()) {
      params.m = rows;
      return leading(scaled_mm_sm90_checked(kOp, params, wide_a, b, wide_scale, b_scale, bias, out_dtype, info),
                     {a.size(0), params.n});
    }
  }
  return scaled_mm_sm90_checked(kOp, params, a, b, a_scale, b_scale, bias, out_dtype, info);
}

Sm90Call plan_scaled_mm_sm90_checked(const char* op, ScaledMmSm90Params params, const at::Tensor& a,
                                      const at::Tensor& b, const at::Tensor& a_scale, const at::Tensor& b_scale,
                                      const c10::optional<at::Tensor>& bias, at::ScalarType out_dtype,
                                      const DeviceInfo& info, at::Tensor out) {
  out = bind_problem(params, a, b, a_scale, b_scale, bias, out_dtype, std::move(out));
  params.device_id = a.device().index();
  params.sm_count = info.sm_count;
  const ScaledMmSm90Plan plan =
      call_kernel_library(op, [&] { return scaled_mm_sm90_plan(params); }, &params);
  return {params, plan, std::move(out)};
}

at::Tensor run_scaled_mm_sm90_checked(const char* op, const Sm90Call& call) {
  const size_t workspace_bytes =
      call.plan.needs_workspace
          ? call_kernel_library(op, [&] { return scaled_mm_sm90_workspace_size(call.params, call.plan); }, &call.params)
          : 0;
  // From the caching allocator on the current stream, so its memory is not
  // reused before this stream's GEMM has finished with it.
  at::Tensor workspace;
  if (workspace_bytes > 0) {
    workspace = at::empty({static_cast<int64_t>(workspace_bytes)}, call.out.options().dtype(at::kByte));
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(call.out.device().index()).stream();
  call_kernel_library(
      op, [&] { scaled_mm_sm90(call.params, call.plan, workspace_bytes > 0 ? workspace.data_ptr() : nullptr, stream); },
      &call.params);
  return call.out;
}

at::Tensor scaled_mm_sm90_checked(const char* op, const ScaledMmSm90Params& params, const at::Tensor& a,
                                  const at::Tensor& b, const at::Tensor& a_scale, const at::Tensor& b_scale,
                                  const c10::optional<at::Tensor>& bias, at::ScalarType out_dtype,
                                  const DeviceInfo& info) {
  return run_scaled_mm_sm90_checked(
      op, plan_scaled_mm_sm90_checked(op, params, a, b, a_scale, b_scale, bias, out_dtype, info));
}

}  // namespace w8a8

TORCH_LIBRARY_FRAGMENT(W8A8_OPS, m) {
  m.def(
      "scaled_mm_sm90(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, Tensor? bias, ScalarType out_dtype, "
      "str config=\"\", int? split_k=None, str scheduler=\"auto\") -> Tensor");
  m.def(
      "scaled_mm_sm90_plan(int m, int n, int k, str config=\"\", int? split_k=None, str scheduler=\"auto\") "
      "-> (str, str, int)");
  m.def("sm90_config_names() -> str[]");
  m.def("sm90_archs() -> int[]");
}

TORCH_LIBRARY_IMPL(W8A8_OPS, CUDA, m) { m.impl("scaled_mm_sm90", &w8a8::scaled_mm_sm90_op); }

// No tensor arguments: a CompositeExplicitAutograd kernel also serves the
// empty dispatch key set.
TORCH_LIBRARY_IMPL(W8A8_OPS, CompositeExplicitAutograd, m) {
  m.impl("scaled_mm_sm90_plan", &w8a8::scaled_mm_sm90_plan_op);
  m.impl("sm90_config_names", &w8a8::sm90_config_names);
  m.impl("sm90_archs", &w8a8::sm90_archs);
}

// `import w8a8._C` loads this shared library (running the registrations of
// this file, quantize.cpp and linear.cpp); the module has no attributes.
PyMODINIT_FUNC PyInit__C(void) {
  static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr,
                                      nullptr, nullptr, nullptr, nullptr};
  return PyModule_Create(&module);
}
