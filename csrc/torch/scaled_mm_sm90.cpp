// Torch binding of the CUTLASS kernels: schemas, input checks, output and
// workspace allocation, stream and device plumbing. No kernel code here: the
// kernels sit behind the torch-free interface of scaled_mm_sm90.h.
//
// Ops (namespace w8a8):
//   scaled_mm_cutlass(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale,
//                     Tensor? bias, ScalarType out_dtype, int config_id=-1,
//                     int? split_k=None, str scheduler="auto") -> Tensor
//       out[m, n] = a_scale[m] * (b_scale[n] * float(a @ b^T)[m, n]) + bias[n]
//       (fp32, one rounding to out_dtype). config_id = -1 picks the tile config
//       by M; 0..n-1 forces an entry of the config table (benchmarking; the
//       error for an out-of-range id lists the table). split_k: None = the
//       heuristic, 1 = no split, n = split K n ways; scheduler: "auto",
//       "persistent" (data-parallel) or "streamk" (see ScaledMmScheduler).
//   scaled_mm_cutlass_plan(int m, int n, int k, int config_id=-1, int? split_k=None,
//                          str scheduler="auto") -> (int, str, int)
//       What scaled_mm_cutlass runs for that shape on the current device:
//       (config id, K decomposition, splits). Raises as the op would.
//   cutlass_archs() -> int[]
//       The SM architectures the CUTLASS kernels were compiled for.
//   cutlass_config_names() -> str[]
//       The config table: entry i is the name of config_id i.
//
// Importing w8a8._C loads this library; the static initialisers below
// register the ops, so the module itself is empty.
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime_api.h>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "scaled_mm_sm90.h"
#include "torch_device_info.h"
#include "torch_messages.h"
#include "torch_ops.h"
#include "torch_scaled_mm_args.h"

namespace w8a8 {
namespace {

constexpr const char* kOp = "w8a8.scaled_mm(backend='cutlass')";
#define W8A8_CHECK(cond, ...) W8A8_OP_CHECK(kOp, cond, __VA_ARGS__)

std::string config_list() {
  std::string list;
  for (int i = 0; i < scaled_mm_sm90_num_configs(); ++i) {
    list += (i ? ", " : "") + std::to_string(i) + "=" + scaled_mm_sm90_config_name(i);
  }
  return list;
}

ScaledMmScheduler parse_scheduler(c10::string_view scheduler) {
  if (scheduler == "auto") return ScaledMmScheduler::kAuto;
  if (scheduler == "persistent") return ScaledMmScheduler::kPersistent;
  if (scheduler == "streamk") return ScaledMmScheduler::kStreamK;
  W8A8_CHECK(false, "scheduler must be 'auto', 'persistent' or 'streamk', got '", std::string(scheduler),
             "'");
  return ScaledMmScheduler::kAuto;
}

// The K-split arguments, checked with the op's wording; the kernel library
// re-checks the parts that depend on the config it picks (scaled_mm_sm90.cu).
void set_split(ScaledMmSm90Params& params, const c10::optional<int64_t>& split_k,
               c10::string_view scheduler_name) {
  const ScaledMmScheduler scheduler = parse_scheduler(scheduler_name);
  int64_t splits = 0;
  if (split_k.has_value()) {
    splits = *split_k;
    const int64_t k_tiles = std::max<int64_t>(1, (params.k + 127) / 128);  // K = 0 still takes split_k = 1
    W8A8_CHECK(splits >= 1 && splits <= k_tiles,
               "split_k must be None (heuristic) or in [1, ", k_tiles,
               "] (1 = no split; at most one split per 128-wide K tile, K = ", params.k, "), got ",
               splits);
    W8A8_CHECK(splits == 1 || scheduler == ScaledMmScheduler::kAuto, "split_k = ", splits,
               " needs scheduler 'auto' (got '", std::string(scheduler_name),
               "': 'persistent' never splits K, 'streamk' balances K by itself)");
  }
  params.split_k = static_cast<int>(splits);
  params.scheduler = scheduler;
}

}  // namespace

at::Tensor scaled_mm_cutlass(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
                             const at::Tensor& b_scale, const c10::optional<at::Tensor>& bias,
                             at::ScalarType out_dtype, int64_t config_id,
                             c10::optional<int64_t> split_k, c10::string_view scheduler) {
  ScaledMmSm90Params params;
  check_scaled_mm_tensors(kOp, params, a, b, a_scale, b_scale, bias, out_dtype);
  const int64_t m = params.m, n = params.n, k = params.k;
  W8A8_CHECK(config_id >= -1 && config_id < scaled_mm_sm90_num_configs(),
             "config_id must be -1 (heuristic) or one of ", config_list(), "; got ", config_id);
  set_split(params, split_k, scheduler);  // K known: checked before any early return

  const at::Device device = a.device();
  const c10::cuda::CUDAGuard device_guard(device);
  if (m == 0 || n == 0) return at::empty({m, n}, a.options().dtype(out_dtype));
  if (k == 0) return scaled_mm_empty_k(a_scale, b_scale, bias, m, n, out_dtype);

  // architecture: the kernels are sm_90a cubins (wgmma, setmaxnreg)
  const DeviceInfo& info = device_info(device.index());
  W8A8_CHECK(info.major == 9 && info.minor == 0,
             "the CUTLASS kernels need compute capability 9.0 (sm_90a), got ", info.major, ".",
             info.minor, " on ", device);
  check_16byte_rows(kOp, params, a, b, "TMA");

  at::Tensor out = bind_problem(params, a, b, a_scale, b_scale, bias, out_dtype);
  params.config_id = static_cast<int>(config_id);
  params.device_id = device.index();
  params.sm_count = info.sm_count;

  // c10::cuda::getCurrentCUDAStream is at::cuda::getCurrentCUDAStream.
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  try {
    const size_t workspace_bytes = scaled_mm_sm90_workspace_size(params);
    // Allocated through the caching allocator on the current stream, so its
    // memory is not reused before this stream's GEMM has finished with it.
    at::Tensor workspace;
    if (workspace_bytes > 0) {
      workspace = at::empty({static_cast<int64_t>(workspace_bytes)}, a.options().dtype(at::kByte));
    }
    scaled_mm_sm90(params, workspace_bytes > 0 ? workspace.data_ptr() : nullptr, stream);
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    W8A8_CHECK(false, e.what(), " (M = ", m, ", N = ", n, ", K = ", k, ", config_id = ", config_id,
               ")");
  }
  return out;
}

namespace {

std::tuple<int64_t, std::string, int64_t> scaled_mm_cutlass_plan(int64_t m, int64_t n, int64_t k,
                                                                 int64_t config_id,
                                                                 c10::optional<int64_t> split_k,
                                                                 c10::string_view scheduler) {
  W8A8_CHECK(m > 0 && n > 0 && k > 0 && k % 16 == 0 && n % 8 == 0,
             "plan needs M, N, K > 0 with K % 16 == 0 and N % 8 == 0, got M = ", m, ", N = ", n,
             ", K = ", k);
  W8A8_CHECK(config_id >= -1 && config_id < scaled_mm_sm90_num_configs(),
             "config_id must be -1 (heuristic) or one of ", config_list(), "; got ", config_id);
  ScaledMmSm90Params params;
  // Placeholder addresses: the plan reads shapes only, never the data.
  static const int8_t kAligned[16] __attribute__((aligned(16))) = {};
  static const float kScale[1] = {1.0f};
  params.a = params.b = kAligned;
  params.out = const_cast<int8_t*>(kAligned);
  params.a_scale = params.b_scale = kScale;
  params.m = m;
  params.n = n;
  params.k = k;
  params.lda = params.ldb = k;
  params.ldd = n;
  params.config_id = static_cast<int>(config_id);
  set_split(params, split_k, scheduler);
  const c10::DeviceIndex device = c10::cuda::current_device();
  params.device_id = device;
  params.sm_count = device_info(device).sm_count;
  try {
    const ScaledMmSm90Plan chosen = scaled_mm_sm90_plan(params);
    return {chosen.config_id, chosen.decomposition, chosen.splits};
  } catch (const std::exception& e) {
    W8A8_CHECK(false, e.what(), " (M = ", m, ", N = ", n, ", K = ", k, ")");
  }
  return {};
}

// The archs compiled into this library; one entry per arch directory of
// kernels (add yours when you add an arch).
std::vector<int64_t> cutlass_archs() { return {90}; }

std::vector<std::string> cutlass_config_names() {
  std::vector<std::string> names;
  for (int i = 0; i < scaled_mm_sm90_num_configs(); ++i) names.emplace_back(scaled_mm_sm90_config_name(i));
  return names;
}

}  // namespace
}  // namespace w8a8

TORCH_LIBRARY_FRAGMENT(w8a8, m) {
  m.def(
      "scaled_mm_cutlass(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, Tensor? bias, "
      "ScalarType out_dtype, int config_id=-1, int? split_k=None, str scheduler=\"auto\") -> Tensor");
  m.def(
      "scaled_mm_cutlass_plan(int m, int n, int k, int config_id=-1, int? split_k=None, "
      "str scheduler=\"auto\") -> (int, str, int)");
  m.def("cutlass_archs() -> int[]");
  m.def("cutlass_config_names() -> str[]");
}

TORCH_LIBRARY_IMPL(w8a8, CUDA, m) { m.impl("scaled_mm_cutlass", &w8a8::scaled_mm_cutlass); }

// No tensor arguments: a CompositeExplicitAutograd kernel also serves the
// empty dispatch key set.
TORCH_LIBRARY_IMPL(w8a8, CompositeExplicitAutograd, m) {
  m.impl("cutlass_archs", &w8a8::cutlass_archs);
  m.impl("cutlass_config_names", &w8a8::cutlass_config_names);
  m.impl("scaled_mm_cutlass_plan", &w8a8::scaled_mm_cutlass_plan);
}

// `import w8a8._C` loads this shared library (running the registrations
// above); the module has no attributes.
PyMODINIT_FUNC PyInit__C(void) {
  static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr,
                                      nullptr, nullptr, nullptr, nullptr};
  return PyModule_Create(&module);
}
