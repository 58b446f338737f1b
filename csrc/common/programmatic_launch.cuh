// Programmatic dependent launch (Hopper and later): a kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start while the
// kernel before it on the stream still runs, once every CTA of that kernel has
// called allow_dependent_launch() or exited; it must call wait_for_prior_grids()
// before it touches anything the earlier kernel may read or write (the wait
// returns once that grid has finished and its writes are visible). Without the
// launch attribute, or before sm_90, both are no-ops and the stream orders the
// kernels as usual.
//
// Every kernel of the sm90 path launches this way and waits before its first
// global access (the GEMM's weights-first prologue in w8a8::linear excepted:
// scaled_mm_sm90_mainloop.cuh; an L2 prefetch of a plain GEMM's first weights is
// a hint, not an access), so a kernel's launch and CTA start-up overlap
// the end of the kernel before it:
//   * the CUDA quantizers (quantize/) wait, then allow their
//     dependents at once;
//   * the CUTLASS GEMMs (sm90/scaled_mm_sm90_mainloop.cuh) wait in the load
//     warp before the first tile's loads and allow their dependents once they
//     have issued every load of a tile; where CUTLASS's stream-K scheduler
//     splits K, they launch plainly;
//   * the decode kernels (decode/scaled_mm_gemv.cu, decode/scaled_mm_skinny.cu)
//     wait before their first load and never allow early.
// Kernels of other libraries (PyTorch, Triton) never allow early: after one of
// them the next kernel here can start only as its CTAs exit. [evidence sm90.pdl]
//
// Early start needs room: a dependent's CTA becomes resident on an SM only beside blocks
// that leave it the registers and shared memory it asks for, in the L1 / shared-memory
// split the SM runs at. The driver picks a kernel's split from its own needs, so a
// quantizer (little shared memory) runs its SMs at a small split, and a CUTLASS GEMM
// (most of the 228 KB) cannot start on them until the quantizer's blocks leave and the
// SM drains. A kernel whose dependent takes most of the shared memory asks for the
// largest split (prefer_max_shared_memory); the quantizers do so where the op knows a
// CUTLASS GEMM follows (QuantizeParams::next_kernel_full_smem), not before the decode
// kernels. [evidence quant.full-smem-split]
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace w8a8 {

__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Asks the driver to run `kernel` at the largest shared-memory split (a hint: it keeps the
// blocks' own shared memory and occupancy). A failed call throws std::runtime_error
// naming `who`.
template <class... Params>
void prefer_max_shared_memory(const char* who, void (*kernel)(Params...)) {
  const cudaError_t error =
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  if (error != cudaSuccess) {
    throw std::runtime_error(std::string(who) + ": setting the shared-memory carveout failed: " +
                             cudaGetErrorString(error));
  }
}

// kKernel, set (once per kernel: one instantiation, one static per kernel) to run at the
// largest shared-memory split when kFullSmem.
template <bool kFullSmem, auto kKernel>
auto with_carveout(const char* who) {
  if constexpr (kFullSmem) {
    static const bool set = (prefer_max_shared_memory(who, kKernel), true);
    (void)set;
  }
  return kKernel;
}

// kKernel, allowed (once per kernel) the kBytes of dynamic shared memory it launches with where
// that is over the default 48 KiB; a failed call throws std::runtime_error naming `who`.
template <auto kKernel, int kBytes>
auto with_dynamic_smem(const char* who) {
  if constexpr (kBytes > 48 * 1024) {
    static const bool set = [who] {
      const cudaError_t error = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
      if (error != cudaSuccess) {
        throw std::runtime_error(std::string(who) + ": allowing " + std::to_string(kBytes) +
                                 " bytes of dynamic shared memory failed: " + cudaGetErrorString(error));
      }
      return true;
    }();
    (void)set;
  }
  return kKernel;
}

// kernel<<<grid, block, smem_bytes, stream>>>(args...), with programmatic stream serialization;
// a failed launch throws std::runtime_error naming `who`.
template <class... Params, class... Args>
void launch_programmatic_smem(const char* who, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                              cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  const cudaError_t error = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (error != cudaSuccess) {
    throw std::runtime_error(std::string(who) + ": kernel launch failed: " + cudaGetErrorString(error));
  }
}

// launch_programmatic_smem without dynamic shared memory.
template <class... Params, class... Args>
void launch_programmatic(const char* who, void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                         Args&&... args) {
  launch_programmatic_smem(who, kernel, grid, block, 0, stream, std::forward<Args>(args)...);
}

}  // namespace w8a8
