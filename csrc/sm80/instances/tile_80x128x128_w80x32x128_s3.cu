// Sm80Tile80x128x128_W80x32x128_S3 (sm80/scaled_mm_sm80_configs.cuh), bf16 and fp16 out.
#include "sm80/scaled_mm_sm80_kernel.cuh"
W8A8_SM80_INSTANTIATE(Sm80Tile80x128x128_W80x32x128_S3)
