// Sm90CoopStreamK128x256x128_2x1 (sm90/scaled_mm_sm90_configs.cuh), bf16 and fp16 out. Sweep only:
// built with W8A8_SWEEP_CONFIGS=1, which also defines the struct.
#include "sm90/scaled_mm_sm90_kernel.cuh"
W8A8_SM90_INSTANTIATE(Sm90CoopStreamK128x256x128_2x1)
