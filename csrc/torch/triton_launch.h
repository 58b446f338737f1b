// Triton kernels launched from C++ (the fused producers' only GPU kernels).
//
// Python compiles a Triton kernel on its first launch and launches it after that with tens of
// microseconds of Python per call (w8a8/triton/_launch.py). A compiled kernel is a function of
// its arguments' types, their alignment and the ints it specializes on; together with the op
// that launches it (which fixes its constexprs from those same ints), the arguments' signature
// below determines every launch parameter. So when Python launches a kernel for an op it hands
// the compiled function, its grid and its parameter layout to this registry
// (w8a8::_remember_triton, keyed on the op, the device and the signature), and the op's C++
// implementation launches it again for arguments of the same signature, with no Python: one
// cuLaunchKernel on the current stream (CUDA-graph capture works). A signature not remembered yet
// runs the op's Python kernel op, which launches (compiling where needed) and remembers it.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>
#include <c10/util/SmallVector.h>
#include <c10/util/string_view.h>
#include <cuda_runtime_api.h>

namespace w8a8 {

// A Triton kernel's leading (non-constexpr) arguments, in its parameter order, as the op's
// Python wrapper passes them: tensors (their data pointers), ints and floats.
class TritonArgs {
 public:
  enum class Kind : uint8_t { kTensor, kInt, kFloat };
  struct Arg {
    Kind kind;
    at::ScalarType dtype;  // a tensor's
    int64_t value;         // a tensor's data pointer, an int's value
    double real;           // a float's value
  };

  TritonArgs& tensor(const at::Tensor& t) {
    args_.push_back({Kind::kTensor, t.scalar_type(), static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.data_ptr())), 0.0});
    return *this;
  }
  TritonArgs& integer(int64_t v) {
    args_.push_back({Kind::kInt, at::ScalarType::Undefined, v, 0.0});
    return *this;
  }
  TritonArgs& real(double v) {
    args_.push_back({Kind::kFloat, at::ScalarType::Undefined, 0, v});
    return *this;
  }
  const c10::SmallVector<Arg, 16>& args() const { return args_; }

 private:
  c10::SmallVector<Arg, 16> args_;
};

// Launches the kernel Python launched for op `op` on `device` with arguments of `args`'s
// signature (each tensor's dtype and 16-byte alignment, each int's value), on `stream`; false,
// launching nothing, where no such launch is remembered. (sm90/triton_launch.cpp)
bool launch_remembered_triton(c10::string_view op, c10::DeviceIndex device, const TritonArgs& args,
                              cudaStream_t stream);

}  // namespace w8a8
