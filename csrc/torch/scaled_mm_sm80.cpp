// Torch binding of the sm80 CUTLASS kernels: the extension w8a8._C_sm80,
// built apart from w8a8._C because its sources compile for other archs
// (sm_80, sm_86, sm_89 and sm_90 instead of sm_90a).
//
// Ops (namespace w8a8):
//   scaled_mm_cutlass_sm80(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale,
//                          Tensor? bias, ScalarType out_dtype, int config_id=-1) -> Tensor
//       the math and argument rules of scaled_mm_cutlass (torch_bindings.cpp),
//       on mma.sync kernels; runs on compute capability 8.x, and on 9.0 when
//       asked for explicitly (backend="cutlass_sm80"). No split_k / scheduler
//       arguments: the one split-K config splits K by its own rule.
//   scaled_mm_cutlass_sm80_config(int m, int n, int k) -> int
//       the config id that config_id = -1 runs for that shape on the current device.
//   cutlass_sm80_archs() -> int[]
//       the SM architectures this library holds the sm80 kernels for.
//   cutlass_sm80_config_names() -> str[]
//       the config table: entry i is the name of config_id i.
#include <Python.h>

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "scaled_mm_sm80.h"
#include "torch_device_info.h"
#include "torch_messages.h"
#include "torch_scaled_mm_args.h"

namespace w8a8 {
namespace {

constexpr const char* kOp = "w8a8.scaled_mm(backend='cutlass_sm80')";
#define W8A8_CHECK(cond, ...) W8A8_OP_CHECK(kOp, cond, __VA_ARGS__)

std::string config_list() {
  std::string list;
  for (int i = 0; i < scaled_mm_sm80_num_configs(); ++i) {
    list += (i ? ", " : "") + std::to_string(i) + "=" + scaled_mm_sm80_config_name(i);
  }
  return list;
}

// sm_80 SASS runs on every 8.x device; sm_90 SASS of the same kernels serves
// the H100 when the path is forced.
bool runs_on(const DeviceInfo& info) { return info.major == 8 || (info.major == 9 && info.minor == 0); }

at::Tensor scaled_mm_cutlass_sm80(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
                                  const at::Tensor& b_scale, const c10::optional<at::Tensor>& bias,
                                  at::ScalarType out_dtype, int64_t config_id) {
  ScaledMmSm80Params params;
  check_scaled_mm_tensors(kOp, params, a, b, a_scale, b_scale, bias, out_dtype);
  W8A8_CHECK(config_id >= -1 && config_id < scaled_mm_sm80_num_configs(),
             "config_id must be -1 (heuristic) or one of ", config_list(), "; got ", config_id);
  const int64_t m = params.m, n = params.n, k = params.k;
  const at::Device device = a.device();
  const c10::cuda::CUDAGuard device_guard(device);
  if (m == 0 || n == 0) return at::empty({m, n}, a.options().dtype(out_dtype));
  if (k == 0) return scaled_mm_empty_k(a_scale, b_scale, bias, m, n, out_dtype);

  const DeviceInfo& info = device_info(device.index());
  W8A8_CHECK(runs_on(info), "the sm80 CUTLASS kernels need compute capability 8.x or 9.0, got ", info.major,
             ".", info.minor, " on ", device);
  check_16byte_rows(kOp, params, a, b, "cp.async");

  at::Tensor out = bind_problem(params, a, b, a_scale, b_scale, bias, out_dtype);
  params.config_id = static_cast<int>(config_id);
  params.sm_count = info.sm_count;
  params.shared_memory_per_sm = info.shared_memory_per_sm;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  try {
    const size_t workspace_bytes = scaled_mm_sm80_workspace_size(params);
    // From the caching allocator on the current stream (graph-capturable).
    at::Tensor workspace;
    if (workspace_bytes > 0) {
      workspace = at::empty({static_cast<int64_t>(workspace_bytes)}, a.options().dtype(at::kByte));
    }
    scaled_mm_sm80(params, workspace_bytes > 0 ? workspace.data_ptr() : nullptr, stream);
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    W8A8_CHECK(false, e.what(), " (M = ", m, ", N = ", n, ", K = ", k, ", config_id = ", config_id, ")");
  }
  return out;
}

int64_t scaled_mm_cutlass_sm80_config(int64_t m, int64_t n, int64_t k) {
  W8A8_CHECK(m > 0 && n > 0 && k > 0, "the config query needs M, N, K > 0, got M = ", m, ", N = ", n, ", K = ", k);
  const DeviceInfo& info = device_info(c10::cuda::current_device());
  return scaled_mm_sm80_heuristic_config(m, n, k, info.sm_count, info.shared_memory_per_sm);
}

// Keep in step with SM80_ARCHS in setup.py.
std::vector<int64_t> cutlass_sm80_archs() { return {80, 86, 89, 90}; }

std::vector<std::string> cutlass_sm80_config_names() {
  std::vector<std::string> names;
  for (int i = 0; i < scaled_mm_sm80_num_configs(); ++i) names.emplace_back(scaled_mm_sm80_config_name(i));
  return names;
}

}  // namespace
}  // namespace w8a8

TORCH_LIBRARY_FRAGMENT(w8a8, m) {
  m.def(
      "scaled_mm_cutlass_sm80(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, Tensor? bias, "
      "ScalarType out_dtype, int config_id=-1) -> Tensor");
  m.def("scaled_mm_cutlass_sm80_config(int m, int n, int k) -> int");
  m.def("cutlass_sm80_archs() -> int[]");
  m.def("cutlass_sm80_config_names() -> str[]");
}

TORCH_LIBRARY_IMPL(w8a8, CUDA, m) { m.impl("scaled_mm_cutlass_sm80", &w8a8::scaled_mm_cutlass_sm80); }

TORCH_LIBRARY_IMPL(w8a8, CompositeExplicitAutograd, m) {
  m.impl("scaled_mm_cutlass_sm80_config", &w8a8::scaled_mm_cutlass_sm80_config);
  m.impl("cutlass_sm80_archs", &w8a8::cutlass_sm80_archs);
  m.impl("cutlass_sm80_config_names", &w8a8::cutlass_sm80_config_names);
}

// `import w8a8._C_sm80` loads this shared library (running the registrations
// above); the module has no attributes.
PyMODINIT_FUNC PyInit__C_sm80(void) {
  static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C_sm80", nullptr, -1, nullptr,
                                      nullptr, nullptr, nullptr, nullptr};
  return PyModule_Create(&module);
}
