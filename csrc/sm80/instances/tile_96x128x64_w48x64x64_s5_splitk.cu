// Sm80Tile96x128x64_W48x64x64_S5_SplitK (sm80/scaled_mm_sm80_configs.cuh), bf16 and fp16 out.
#include "sm80/scaled_mm_sm80_split_k.cuh"
W8A8_SM80_INSTANTIATE_SPLITK(Sm80Tile96x128x64_W48x64x64_S5_SplitK)
