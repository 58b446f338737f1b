// Explicit instantiation of the sm80 int8 scaled matmul for config Sm80Int8M80
// (see scaled_mm_sm80_configs.cuh), both output dtypes. One config per file
// so that the build compiles the configs in parallel.
#include "scaled_mm_sm80_kernel.cuh"

namespace w8a8::sm80 {
template struct ScaledMmSm80Launcher<Sm80Int8M80, cutlass::bfloat16_t>;
template struct ScaledMmSm80Launcher<Sm80Int8M80, cutlass::half_t>;
}  // namespace w8a8::sm80
