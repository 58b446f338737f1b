// Explicit instantiation of the split-K sm80 int8 scaled matmul for config
// Sm80Int8M96SplitK (see scaled_mm_sm80_configs.cuh), both output dtypes.
#include "scaled_mm_sm80_split_k.cuh"

namespace w8a8::sm80 {
template struct ScaledMmSm80SplitKLauncher<Sm80Int8M96SplitK, cutlass::bfloat16_t>;
template struct ScaledMmSm80SplitKLauncher<Sm80Int8M96SplitK, cutlass::half_t>;
}  // namespace w8a8::sm80
