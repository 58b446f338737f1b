// Sm90Coop128x144x128_1x1 (sm90/scaled_mm_sm90_configs.cuh), bf16 and fp16 out.
#include "sm90/scaled_mm_sm90_kernel.cuh"
W8A8_SM90_INSTANTIATE(Sm90Coop128x144x128_1x1)
