// The registry of Triton launches the C++ ops repeat (torch/triton_launch.h says why and how),
// and its private ops:
//   _remember_triton(str op, Tensor[] tensors, int[] ints, float[] floats, str kinds, str params,
//                    int function, int[] grid, int threads, int shared, int scratch) -> ()
//       w8a8/triton/_launch.py, after launching `function` for `op`: the arguments in kernel order
//       (kinds: 't' the next tensor, 'i' int, 'f' float), how each is passed ('P' pointer, 'i' i32,
//       'l' i64, 'f' fp32, '-' not a parameter: Triton made it a constant), the grid, the block's
//       threads, the dynamic shared memory and the trailing scratch pointers (passed null: the
//       kernels remembered need none)
//   _triton_launches() -> int[]      launched from C++, not remembered (run by Python), remembered
//   _forget_triton() -> ()           tests: every signature runs Python again once
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>
#include <cuda.h>
#include <torch/library.h>

#include "torch/op_namespace.h"
#include "torch/triton_launch.h"

namespace w8a8 {
namespace {

struct Remembered {
  CUfunction function;
  unsigned grid[3];
  unsigned threads;
  unsigned shared;
  std::string params;  // one per argument: 'P', 'i', 'l', 'f' or '-'
  int scratch;
};

// The key of a launch: the op, the device, then per argument its kind and what Triton specializes
// on: a tensor's dtype and 16-byte alignment, an int's value (the op's config depends on them too);
// a float's value is a plain parameter.
std::string key_of(c10::string_view op, c10::DeviceIndex device, const TritonArgs& args) {
  std::string key(op.data(), op.size());
  key.push_back('\0');
  key.push_back(static_cast<char>(device));
  for (const TritonArgs::Arg& a : args.args()) {
    switch (a.kind) {
      case TritonArgs::Kind::kTensor:
        key.push_back('t');
        key.push_back(static_cast<char>(a.dtype));
        key.push_back(a.value % 16 == 0 ? '1' : '0');
        break;
      case TritonArgs::Kind::kInt:
        key.push_back('i');
        key.append(reinterpret_cast<const char*>(&a.value), sizeof(a.value));
        break;
      case TritonArgs::Kind::kFloat:
        key.push_back('f');
        break;
    }
  }
  return key;
}

std::shared_mutex registry_lock;
std::unordered_map<std::string, Remembered> registry;
std::atomic<int64_t> launched{0}, not_remembered{0};

constexpr size_t kMaxParams = 32;

void launch(const Remembered& r, const TritonArgs& args, cudaStream_t stream) {
  uint64_t slots[kMaxParams];
  void* params[kMaxParams];
  size_t n = 0;
  const auto& list = args.args();
  for (size_t i = 0; i < list.size(); ++i) {
    const TritonArgs::Arg& a = list[i];
    uint64_t slot = 0;
    switch (r.params[i]) {
      case '-': continue;
      case 'P':
      case 'l': std::memcpy(&slot, &a.value, sizeof(int64_t)); break;
      case 'i': {
        const auto v = static_cast<int32_t>(a.value);
        std::memcpy(&slot, &v, sizeof(v));
        break;
      }
      case 'f': {
        const auto v = static_cast<float>(a.real);
        std::memcpy(&slot, &v, sizeof(v));
        break;
      }
    }
    slots[n] = slot;
    params[n] = &slots[n];
    ++n;
  }
  for (int s = 0; s < r.scratch; ++s, ++n) {  // global / profile scratch: none needed, passed null
    slots[n] = 0;
    params[n] = &slots[n];
  }
  // The driver API launches in the thread's current context: the device's primary one, where
  // Triton loaded the function (torch's runtime calls make it current; a thread that made none
  // gets it here).
  CUcontext context = nullptr;
  if (cuCtxGetCurrent(&context) != CUDA_SUCCESS || context == nullptr) C10_CUDA_CHECK(cudaFree(nullptr));
  const CUresult status = cuLaunchKernel(r.function, r.grid[0], r.grid[1], r.grid[2], r.threads, 1, 1, r.shared,
                                         reinterpret_cast<CUstream>(stream), params, nullptr);
  if (status != CUDA_SUCCESS) {
    const char* what = nullptr;
    cuGetErrorString(status, &what);
    TORCH_CHECK(false, "w8a8: launching a remembered Triton kernel failed: ", what == nullptr ? "unknown error" : what);
  }
}

void remember_triton(c10::string_view op, const std::vector<at::Tensor>& tensors, c10::IntArrayRef ints,
                     c10::ArrayRef<double> floats, c10::string_view kinds, c10::string_view params, int64_t function,
                     c10::IntArrayRef grid, int64_t threads, int64_t shared, int64_t scratch) {
  TORCH_CHECK(!tensors.empty() && tensors[0].is_cuda(), "w8a8::_remember_triton: the first tensor must be a CUDA tensor");
  TORCH_CHECK(kinds.size() == params.size() && params.size() + scratch <= kMaxParams && grid.size() == 3,
              "w8a8::_remember_triton: ", kinds.size(), " kinds, ", params.size(), " params, ", scratch,
              " scratch pointers, ", grid.size(), " grid dims");
  TritonArgs args;
  size_t t = 0, i = 0, f = 0;
  for (const char kind : kinds) {
    if (kind == 't') {
      TORCH_CHECK(t < tensors.size(), "w8a8::_remember_triton: too few tensors");
      args.tensor(tensors[t++]);
    } else if (kind == 'i') {
      TORCH_CHECK(i < ints.size(), "w8a8::_remember_triton: too few ints");
      args.integer(ints[i++]);
    } else {
      TORCH_CHECK(kind == 'f' && f < floats.size(), "w8a8::_remember_triton: bad kind or too few floats");
      args.real(floats[f++]);
    }
  }
  Remembered r{reinterpret_cast<CUfunction>(static_cast<uintptr_t>(function)),
               {static_cast<unsigned>(grid[0]), static_cast<unsigned>(grid[1]), static_cast<unsigned>(grid[2])},
               static_cast<unsigned>(threads),
               static_cast<unsigned>(shared),
               std::string(params.data(), params.size()),
               static_cast<int>(scratch)};
  const std::string key = key_of(op, tensors[0].device().index(), args);
  const std::unique_lock<std::shared_mutex> guard(registry_lock);
  registry.insert_or_assign(key, std::move(r));
}

std::vector<int64_t> triton_launches() {
  std::shared_lock<std::shared_mutex> guard(registry_lock);
  return {launched.load(), not_remembered.load(), static_cast<int64_t>(registry.size())};
}

void forget_triton() {
  const std::unique_lock<std::shared_mutex> guard(registry_lock);
  registry.clear();
}

}  // namespace

bool launch_remembered_triton(c10::string_view op, c10::DeviceIndex device, const TritonArgs& args,
                              cudaStream_t stream) {
  const std::string key = key_of(op, device, args);
  const std::shared_lock<std::shared_mutex> guard(registry_lock);
  const auto found = registry.find(key);
  if (found == registry.end()) {
    not_remembered.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  launch(found->second, args, stream);
  launched.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace w8a8

#ifndef W8A8_SWEEP_CONFIGS  // a sweep build (benchmarks/sweep) registers kernel ops only
TORCH_LIBRARY_FRAGMENT(W8A8_OPS, m) {
  m.def("_remember_triton(str op, Tensor[] tensors, int[] ints, float[] floats, str kinds, str params, int function, "
        "int[] grid, int threads, int shared, int scratch) -> ()");
  m.def("_triton_launches() -> int[]");
  m.def("_forget_triton() -> ()");
}

TORCH_LIBRARY_IMPL(W8A8_OPS, CompositeExplicitAutograd, m) {
  m.impl("_remember_triton", &w8a8::remember_triton);
  m.impl("_triton_launches", &w8a8::triton_launches);
  m.impl("_forget_triton", &w8a8::forget_triton);
}
#endif
