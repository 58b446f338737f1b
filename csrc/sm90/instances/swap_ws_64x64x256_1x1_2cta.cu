// Sm90SwapABWarpSpecialized64x64x256_1x1_2PerSm (sm90/scaled_mm_sm90_configs.cuh), bf16 and fp16 out.
#include "sm90/scaled_mm_sm90_kernel.cuh"
W8A8_SM90_INSTANTIATE(Sm90SwapABWarpSpecialized64x64x256_1x1_2PerSm)
