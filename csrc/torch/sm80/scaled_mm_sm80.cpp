// Torch binding of the sm80 GEMM table: the extension w8a8._C_sm80, built apart
// from w8a8._C because its sources compile for other archs (setup.py's
// SM80_ARCHS instead of sm_90a). The kernels sit behind the torch-free
// interface of sm80/scaled_mm_sm80.h.
//
// Kernel ops (namespace w8a8; the public op w8a8::scaled_mm routes to them):
//   scaled_mm_sm80(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, Tensor? bias,
//                  ScalarType out_dtype, str config="") -> Tensor
//       the math and argument rules of scaled_mm_sm90, on mma.sync kernels; runs on
//       compute capability 8.x, and on 9.0 when named. config "" = the M ladder;
//       otherwise the name of a table entry. No split_k / scheduler arguments: the
//       split-K entry splits K by its own rule.
//   scaled_mm_sm80_plan(int m, int n, int k) -> str
//       the entry config "" runs for that shape on the current device.
//   sm80_config_names() -> str[]       the table, in id order
//   sm80_archs() -> int[]              the archs this library holds kernels for (setup.py's SM80_ARCHS)
#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "sm80/scaled_mm_sm80.h"
#include "torch/checks.h"
#include "torch/op_namespace.h"
#include "torch/device_info.h"
#include "torch/messages.h"
#include "torch/ops.h"

#ifndef W8A8_SM80_ARCHS
#error "W8A8_SM80_ARCHS (the archs of the sm80 kernels, from setup.py's SM80_ARCHS) is not defined"
#endif

namespace w8a8 {
namespace {

constexpr const char* kOp = "scaled_mm";
constexpr const char* kPlanOp = "scaled_mm_sm80_plan";

// -1 for "" (the ladder), else the id of the named entry.
int config_id(c10::string_view config) {
  if (config.empty()) return -1;
  for (int i = 0; i < scaled_mm_sm80_num_configs(); ++i) {
    if (config == scaled_mm_sm80_config_name(i)) return i;
  }
  std::string list;
  for (int i = 0; i < scaled_mm_sm80_num_configs(); ++i) {
    list += (i ? ", " : "") + std::string(scaled_mm_sm80_config_name(i));
  }
  W8A8_CHECK_VALUE(kOp, false, "config must be '' (the heuristic) or an entry of the sm80 table (", list, "), got '",
                   std::string(config), "'");
  return -1;
}

// sm_80 SASS runs on every 8.x device; sm_90 SASS of the same kernels serves
// the H100 when the path is named.
bool runs_on(const DeviceInfo& info) { return info.major == 8 || (info.major == 9 && info.minor == 0); }

at::Tensor scaled_mm_sm80_op(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
                             const at::Tensor& b_scale, const c10::optional<at::Tensor>& bias, at::ScalarType out_dtype,
                             c10::string_view config) {
  checks::scaled_mm(a, b, a_scale, b_scale, bias, out_dtype);
  ScaledMmSm80Params params;
  params.m = a.size(0);
  params.k = a.size(1);
  params.n = b.size(0);
  params.config_id = config_id(config);

  const at::Device device = a.device();
  const c10::cuda::CUDAGuard device_guard(device);
  if (params.m == 0 || params.n == 0) return at::empty({params.m, params.n}, a.options().dtype(out_dtype));
  if (params.k == 0) return scaled_mm_empty_k(a_scale, b_scale, bias, params.m, params.n, out_dtype);

  const DeviceInfo& info = device_info(device.index());
  checks::gemm_kernels(kOp, checks::kSm80Kernels, out_dtype, "out_dtype", params.m, params.n, params.k, "a", &a, "b",
                       b);
  checks::capability(kOp, "the sm80 kernels", runs_on(info), "8.x or 9.0", info.major, info.minor, device);

  at::Tensor out = bind_problem(params, a, b, a_scale, b_scale, bias, out_dtype);
  params.sm_count = info.sm_count;
  params.shared_memory_per_sm = info.shared_memory_per_sm;
  const ScaledMmSm80Plan plan = call_kernel_library(kOp, [&] { return scaled_mm_sm80_plan(params); }, &params);
  const size_t workspace_bytes =
      call_kernel_library(kOp, [&] { return scaled_mm_sm80_workspace_size(params, plan); }, &params);
  // From the caching allocator on the current stream (graph-capturable).
  at::Tensor workspace;
  if (workspace_bytes > 0) workspace = at::empty({static_cast<int64_t>(workspace_bytes)}, a.options().dtype(at::kByte));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  call_kernel_library(
      kOp, [&] { scaled_mm_sm80(params, plan, workspace_bytes > 0 ? workspace.data_ptr() : nullptr, stream); },
      &params);
  return out;
}

std::string scaled_mm_sm80_plan_op(int64_t m, int64_t n, int64_t k) {
  const int64_t int_max = 2147483647;
  W8A8_CHECK_VALUE(kPlanOp, m > 0 && n > 0 && k > 0 && m <= int_max && n <= int_max && k <= int_max,
                   "M, N, K must be in [1, 2^31), got M = ", m, ", N = ", n, ", K = ", k);
  W8A8_CHECK_VALUE(kPlanOp, k % 16 == 0 && n % 8 == 0, "the sm80 kernels need K % 16 == 0 and N % 8 == 0, got N = ",
                   n, ", K = ", k);
  ScaledMmSm80Params params;
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
  const DeviceInfo& info = device_info(c10::cuda::current_device());
  params.sm_count = info.sm_count;
  params.shared_memory_per_sm = info.shared_memory_per_sm;
  return call_kernel_library(kPlanOp, [&] { return scaled_mm_sm80_plan(params); }, &params).config_name;
}

std::vector<std::string> sm80_config_names() {
  std::vector<std::string> names;
  for (int i = 0; i < scaled_mm_sm80_num_configs(); ++i) names.emplace_back(scaled_mm_sm80_config_name(i));
  return names;
}

std::vector<int64_t> sm80_archs() { return {W8A8_SM80_ARCHS}; }

}  // namespace
}  // namespace w8a8

TORCH_LIBRARY_FRAGMENT(W8A8_OPS, m) {
  m.def(
      "scaled_mm_sm80(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, Tensor? bias, ScalarType out_dtype, "
      "str config=\"\") -> Tensor");
  m.def("scaled_mm_sm80_plan(int m, int n, int k) -> str");
  m.def("sm80_config_names() -> str[]");
  m.def("sm80_archs() -> int[]");
}

TORCH_LIBRARY_IMPL(W8A8_OPS, CUDA, m) { m.impl("scaled_mm_sm80", &w8a8::scaled_mm_sm80_op); }

// No tensor arguments: a CompositeExplicitAutograd kernel also serves the
// empty dispatch key set.
TORCH_LIBRARY_IMPL(W8A8_OPS, CompositeExplicitAutograd, m) {
  m.impl("scaled_mm_sm80_plan", &w8a8::scaled_mm_sm80_plan_op);
  m.impl("sm80_config_names", &w8a8::sm80_config_names);
  m.impl("sm80_archs", &w8a8::sm80_archs);
}

// `import w8a8._C_sm80` loads this shared library (running the registrations
// above); the module has no attributes.
PyMODINIT_FUNC PyInit__C_sm80(void) {
  static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C_sm80", nullptr, -1, nullptr,
                                      nullptr, nullptr, nullptr, nullptr};
  return PyModule_Create(&module);
}
