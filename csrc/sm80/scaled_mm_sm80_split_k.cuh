// The split-K form of the sm80 int8 scaled matmul and its launcher. The header
// of every sm80 instance file setup.py generates from W8A8_SM80_TABLE
// (W8A8_SM80_INSTANTIATE_SPLITK for an S line, W8A8_SM80_INSTANTIATE for an X line).
//
// Two kernels on one stream:
//   1. CUTLASS 2.x GemmUniversal in kGemmSplitKParallel mode: grid z = the K
//      ranges (split_k_slices, scaled_mm_sm80_configs.cuh); each CTA writes its
//      tile's int32 partial sums, unscaled, to the workspace slab of its range.
//      (The visitor epilogue of the data-parallel kernels refuses this mode,
//      and a serial split cannot add partials through a lossy bf16 output.)
//   2. split_k_dequant (common/scaled_mm_split_k_dequant.cuh): sums the slabs and
//      dequantizes, with the same DequantizeFn as every other epilogue.
// The mainloop (tile, warps, stages, mma.sync with saturating accumulation)
// is the data-parallel config's.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <cutlass/cutlass.h>
#include <cutlass/epilogue/thread/linear_combination.h>
#include <cutlass/gemm/kernel/default_gemm_universal.h>
#include <cutlass/gemm/threadblock/threadblock_swizzle.h>

#include "common/cutlass_status.cuh"
#include "common/scaled_mm_split_k_dequant.cuh"
#include "sm80/scaled_mm_sm80.h"
#include "sm80/scaled_mm_sm80_configs.cuh"
#include "sm80/scaled_mm_sm80_kernel.cuh"

namespace w8a8::sm80 {

// CUTLASS's GemmUniversal kernel under launch bounds of its own: the K ranges
// pay off only when every CTA of the split grid is resident at once (see
// split_k_slices), so ptxas is held to kSplitKCtasPerSm CTAs' worth of registers.
template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreadCount, kSplitKCtasPerSm)
    split_k_partials_kernel(typename Kernel::Params params) {
  extern __shared__ int shared_storage[];
  Kernel::invoke(params, *reinterpret_cast<typename Kernel::SharedStorage*>(shared_storage));
}

template <class Config>
struct ScaledMmSm80SplitKGemm {
  using Rules = Sm80TileRules<Config>;
  static constexpr int kPartialAccess = 4;  // int32 per 16-byte store of a partial tile

  // D = acc, as int32: no scaling, no source operand.
  using PartialOp = cutlass::epilogue::thread::LinearCombination<int32_t, kPartialAccess, int32_t, int32_t,
                                                                 cutlass::epilogue::thread::ScaleType::Nothing>;
  using Kernel = typename cutlass::gemm::kernel::DefaultGemmUniversal<
      int8_t, cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone, Rules::kAlignment,     // A
      int8_t, cutlass::layout::ColumnMajor, cutlass::ComplexTransform::kNone, Rules::kAlignment,  // B
      int32_t, cutlass::layout::RowMajor,                                                         // D: partials
      int32_t, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80, typename Config::TileShape,
      typename Config::WarpShape, typename Rules::InstructionShape, PartialOp,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>, Config::kStages,
      cutlass::arch::OpMultiplyAddSaturate>::GemmKernel;

  static constexpr size_t kSharedBytes = sizeof(typename Kernel::SharedStorage);
  static_assert(kSharedBytes <= kMaxSharedMemoryBytes,
                "scaled_mm_sm80: the config needs more shared memory than sm86/sm89 grant a block");
  static_assert(kSharedBytes == config_shared_bytes<Config>(),
                "scaled_mm_sm80: split_k_resident_ctas counts the mainloop's stages as the CTA's shared memory");

  // The K ranges CUTLASS launches for `slices`: it cuts K into ranges of
  // round_up(ceil(K / slices), 16) (UniversalParamsBase::init_grid_tiled_shape;
  // 16 = 128 bits of int8), which can make fewer ranges than asked (K = 272
  // in 7: 48-deep ranges, 6 of them). With split_k_slices' 2048-deep minimum
  // the two agree; the reduction sums exactly the slabs written either way.
  static int slabs(const ScaledMmSm80Params& p, int slices) {
    const int64_t k_align = Rules::kAlignment;
    const int64_t range = (p.k + slices - 1) / slices;
    const int64_t aligned_range = (range + k_align - 1) / k_align * k_align;
    return static_cast<int>((p.k + aligned_range - 1) / aligned_range);
  }

  // One int32 slab of M x N per K range.
  static size_t partial_bytes(const ScaledMmSm80Params& p, int slices) {
    return size_t(slabs(p, slices)) * size_t(p.m) * size_t(p.n) * sizeof(int32_t);
  }

  static typename Kernel::Arguments arguments(const ScaledMmSm80Params& p, int slices, int32_t* partials) {
    const cutlass::gemm::GemmCoord problem{static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k)};
    const int64_t slab = p.m * p.n;
    // batch_count = the K ranges; A and B are not batched (their batch
    // strides are unused in this mode); slab s of D starts at s * M * N.
    return typename Kernel::Arguments(cutlass::gemm::GemmUniversalMode::kGemmSplitKParallel, problem, slices,
                                    typename PartialOp::Params{}, p.a, p.b, /*ptr_C=*/nullptr, partials, 0, 0,
                                    /*batch_stride_C=*/0, slab, p.lda, p.ldb, /*ldc=*/p.n, /*ldd=*/p.n);
  }
};

// The workspace holds the partial slabs. (CUTLASS's own get_workspace_size
// asks for the same amount again in this mode, only to zero it: its kernel
// writes the slabs through ptr_D and reads nothing back, so no workspace is
// passed to it.)
template <class Config, class ElementOut>
size_t ScaledMmSm80SplitKLauncher<Config, ElementOut>::workspace_size(const ScaledMmSm80Params& params,
                                                                       int k_slices) {
  return ScaledMmSm80SplitKGemm<Config>::partial_bytes(params, k_slices);
}

template <class Config, class ElementOut>
void ScaledMmSm80SplitKLauncher<Config, ElementOut>::run(const ScaledMmSm80Params& params, int slices,
                                                         void* workspace, cudaStream_t stream) {
  using G = ScaledMmSm80SplitKGemm<Config>;
  using Kernel = typename G::Kernel;
  auto* partials = static_cast<int32_t*>(workspace);
  if (partials == nullptr) throw std::runtime_error("split-K: expected a workspace for the partial sums, got null");
  const auto args = G::arguments(params, slices, partials);
  throw_if_failed(Kernel::can_implement(args), "can_implement");
  // Launched directly, not through CUTLASS's device adapters: those add their
  // own launch bounds-free Kernel2, and GemmUniversalAdapter would run a
  // row-major D as the transposed problem (tiles over N x M, not M x N).
  // No CUTLASS workspace: the partials go through ptr_D, and the serial-split
  // semaphores of this Params are never touched in this mode.
  const typename Kernel::Params kernel_params(args, params.sm_count, kSplitKCtasPerSm);
  auto* kernel = &split_k_partials_kernel<Kernel>;
  cudaError_t error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(G::kSharedBytes));
  if (error == cudaSuccess) {
    kernel<<<kernel_params.get_grid_dims(), Kernel::kThreadCount, G::kSharedBytes, stream>>>(kernel_params);
    error = cudaGetLastError();
  }
  if (error == cudaSuccess) error = split_k_dequant<ElementOut>(params, partials, G::slabs(params, slices), stream);
  if (error != cudaSuccess) throw std::runtime_error(std::string("split-K launch failed: ") + cudaGetErrorString(error));
}

}  // namespace w8a8::sm80

// The body of a split-K instance file: explicit instantiation of one
// SplitK<...> config for both output dtypes.
#define W8A8_SM80_INSTANTIATE_SPLITK(Config)                                                         \
  template struct w8a8::sm80::ScaledMmSm80SplitKLauncher<w8a8::sm80::Config, cutlass::bfloat16_t>; \
  template struct w8a8::sm80::ScaledMmSm80SplitKLauncher<w8a8::sm80::Config, cutlass::half_t>;
