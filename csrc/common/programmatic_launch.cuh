// Programmatic dependent launch (Hopper and later): a kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start while the
// kernel before it on the stream still runs, once that kernel has called
// allow_dependent_launch(); it must call wait_for_prior_grids() before it
// touches anything the earlier kernel writes (the wait returns once that grid
// has finished and its writes are visible). Without the launch attribute, or
// before sm_90, both are no-ops and the stream orders the kernels as usual.
//
// Used by the quantizers (quantize/quantize.cu: they allow it at once) and the
// decode kernels (decode/scaled_mm_gemv.cu, decode/scaled_mm_skinny.cu: they
// wait before their first load). In a decode step the GEMV's launch and CTA
// start-up then overlap the quantizer (measured on the H100, 4-block stack of
// w8a8.demo: 0.577 -> 0.568 ms per CUDA-graph replay).
#pragma once

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

}  // namespace w8a8
