// The sm80 int8 GEMM template (CUTLASS 2.x GemmUniversal with a visitor
// epilogue: mma.sync m16n8k32 with saturating int32 accumulation, cp.async
// multistage mainloop) and its launcher. Included by the split-K header, which
// the instance files setup.py generates include (W8A8_SM80_INSTANTIATE).
//
// GEMM as CUTLASS sees it: D[M, N] = A[M, K] * B[K, N], A = a row-major,
// B = b read as column-major [K, N] (which is b [N, K] row-major, the
// nn.Linear layout), D = out row-major. No swap-AB: mma.sync's 16-row
// instruction tile already fits a single token with little waste.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/default_gemm_universal_with_visitor.h>
#include <cutlass/gemm/threadblock/threadblock_swizzle.h>

#include "common/cutlass_status.cuh"
#include "sm80/scaled_mm_sm80.h"
#include "sm80/scaled_mm_sm80_configs.cuh"
#include "sm80/scaled_mm_sm80_epilogue.cuh"

namespace w8a8::sm80 {

// What every sm80 tile config must satisfy (the data-parallel and split-K
// kernels both check it).
template <class Config>
struct Sm80TileRules {
  using TileShape = typename Config::TileShape;
  using WarpShape = typename Config::WarpShape;
  using InstructionShape = cutlass::gemm::GemmShape<16, 8, 32>;  // mma.sync.m16n8k32.s8.s8.s32
  static constexpr int kAlignment = 16;  // int8 elements per cp.async (16 bytes): the K % 16 rule

  static_assert(TileShape::kM % WarpShape::kM == 0 && TileShape::kN % WarpShape::kN == 0 &&
                    TileShape::kK % WarpShape::kK == 0,
                "scaled_mm_sm80: warps tile the CTA tile");
  static_assert(WarpShape::kM % 16 == 0 && WarpShape::kN % 8 == 0 && WarpShape::kK % 32 == 0,
                "scaled_mm_sm80: a warp tile is a whole number of m16n8k32 instructions");
  // cp.async fills a stage in 16-byte accesses spread evenly over the CTA's
  // threads; CUTLASS's raked thread map rounds the per-thread count down when
  // they do not divide, and the rows left over are never loaded (a 144 x 64
  // tile on six warps gave wrong sums on the H100 without failing to compile).
  static constexpr int kThreads =
      32 * (TileShape::kM / WarpShape::kM) * (TileShape::kN / WarpShape::kN) * (TileShape::kK / WarpShape::kK);
  static_assert((TileShape::kM * TileShape::kK / kAlignment) % kThreads == 0 &&
                    (TileShape::kN * TileShape::kK / kAlignment) % kThreads == 0,
                "scaled_mm_sm80: the CTA's threads must split each operand tile's 16-byte loads evenly");
};

template <class Config, class ElementOut>
struct ScaledMmSm80Gemm {
  using Rules = Sm80TileRules<Config>;
  using TileShape = typename Config::TileShape;
  using WarpShape = typename Config::WarpShape;
  using InstructionShape = typename Rules::InstructionShape;
  static constexpr int kStages = Config::kStages;
  static constexpr int kAlignment = Rules::kAlignment;

  static_assert(std::is_same_v<ElementOut, cutlass::bfloat16_t> || std::is_same_v<ElementOut, cutlass::half_t>,
                "scaled_mm_sm80: the output is bf16 or fp16");

  // The epilogue walks the accumulators as fp32 fragments of 4 (the thread
  // map of CUTLASS's default tensor-op epilogue for a 4-wide fp32 C).
  static constexpr int kEpilogueAccess = 4;
  using ThreadMap =
      cutlass::epilogue::threadblock::OutputTileThreadLayout<TileShape, WarpShape, float, kEpilogueAccess,
                                                             /*EpilogueStages=*/1>;
  using Epilogue = ScaledMmEpilogue<ElementOut, ThreadMap>;

  // Data-parallel: one CTA per output tile and its whole K loop (CUTLASS's
  // stream-K swizzle was never faster with these tiles). [evidence sm80.ladder]
  using Swizzle = cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>;

  using Kernel = typename cutlass::gemm::kernel::DefaultGemmWithVisitor<
      int8_t, cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone, kAlignment,     // A
      int8_t, cutlass::layout::ColumnMajor, cutlass::ComplexTransform::kNone, kAlignment,  // B
      float, cutlass::layout::RowMajor, kEpilogueAccess,                                    // C (unused)
      int32_t, float,                                                                       // acc, compute
      cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80, TileShape, WarpShape, InstructionShape,
      typename Epilogue::EVT, Swizzle, kStages, cutlass::arch::OpMultiplyAddSaturate,
      /*EpilogueStages=*/1>::GemmKernel;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static_assert(sizeof(typename Kernel::SharedStorage) <= kMaxSharedMemoryBytes,
                "scaled_mm_sm80: the config needs more shared memory than sm86/sm89 grant a block");
};

template <class Config, class ElementOut>
struct ScaledMmSm80Arguments {
  using G = ScaledMmSm80Gemm<Config, ElementOut>;
  using Arguments = typename G::Gemm::Arguments;

  static Arguments make(const ScaledMmSm80Params& p) {
    typename G::Epilogue::Inputs inputs{
        p.a_scale,
        p.a_scale_per_token,
        p.b_scale,
        p.b_scale_per_channel,
        p.bias_kind == ScaledMmBias::kFloat32 ? static_cast<const float*>(p.bias) : nullptr,
        p.bias_kind == ScaledMmBias::kOutDtype ? static_cast<const ElementOut*>(p.bias) : nullptr,
        static_cast<ElementOut*>(p.out),
        p.ldd};
    const cutlass::gemm::GemmCoord problem{static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k)};
    // kGemm with batch_count 1: one K range per tile. ptr_C / ptr_D are unused
    // (the visitor tree stores out); batch strides are irrelevant for L = 1.
    return Arguments(cutlass::gemm::GemmUniversalMode::kGemm, problem, /*batch_count=*/1,
                     G::Epilogue::arguments(inputs), p.a, p.b, /*ptr_C=*/nullptr, /*ptr_D=*/nullptr,
                     0, 0, 0, 0, p.lda, p.ldb, /*ldc=*/p.ldd, /*ldd=*/p.ldd);
  }
};

template <class Config, class ElementOut>
size_t ScaledMmSm80Launcher<Config, ElementOut>::workspace_size(const ScaledMmSm80Params& params, int) {
  using G = ScaledMmSm80Gemm<Config, ElementOut>;
  return G::Gemm::get_workspace_size(ScaledMmSm80Arguments<Config, ElementOut>::make(params));
}

template <class Config, class ElementOut>
void ScaledMmSm80Launcher<Config, ElementOut>::run(const ScaledMmSm80Params& params, int, void* workspace,
                                                   cudaStream_t stream) {
  using G = ScaledMmSm80Gemm<Config, ElementOut>;
  const auto args = ScaledMmSm80Arguments<Config, ElementOut>::make(params);
  typename G::Gemm gemm;
  throw_if_failed(gemm.can_implement(args), "can_implement");
  // initialize() sets the kernel's dynamic shared memory limit (once per
  // device) and the kernel params; nothing is enqueued before the launch.
  throw_if_failed(gemm.initialize(args, workspace, stream), "initialize");
  throw_if_failed(gemm.run(stream), "launch");
}

}  // namespace w8a8::sm80

// The body of an instance file: explicit instantiation of one data-parallel
// config of scaled_mm_sm80_configs.cuh for both output dtypes (one config per
// file, so the build compiles them in parallel).
#define W8A8_SM80_INSTANTIATE(Config)                                                          \
  template struct w8a8::sm80::ScaledMmSm80Launcher<w8a8::sm80::Config, cutlass::bfloat16_t>; \
  template struct w8a8::sm80::ScaledMmSm80Launcher<w8a8::sm80::Config, cutlass::half_t>;
