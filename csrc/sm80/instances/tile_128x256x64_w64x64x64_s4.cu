// Sm80Tile128x256x64_W64x64x64_S4 (sm80/scaled_mm_sm80_configs.cuh), bf16 and fp16 out.
#include "sm80/scaled_mm_sm80_kernel.cuh"
W8A8_SM80_INSTANTIATE(Sm80Tile128x256x64_W64x64x64_S4)
