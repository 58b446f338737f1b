// Explicit instantiation of the sm90 int8 scaled matmul for config Sm90Int8M128
// (see scaled_mm_sm90_configs.cuh), both output dtypes. One config per file
// so that the build compiles the configs in parallel.
#include "scaled_mm_sm90_kernel.cuh"

namespace w8a8::sm90 {
template struct ScaledMmSm90Launcher<Sm90Int8M128, cutlass::bfloat16_t>;
template struct ScaledMmSm90Launcher<Sm90Int8M128, cutlass::half_t>;
}  // namespace w8a8::sm90
