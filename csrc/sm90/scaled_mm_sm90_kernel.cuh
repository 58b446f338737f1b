// The sm90 int8 GEMM template (CUTLASS 3.x GemmUniversal from
// CollectiveBuilder) and its launcher. Included only by the instance files
// setup.py generates, one per CUTLASS config of W8A8_SM90_TABLE (and of
// W8A8_SM90_SWEEP_TABLE in the sweep build), through W8A8_SM90_INSTANTIATE.
//
// GEMM as CUTLASS sees it: D[Mg, Ng] = A[Mg, K] * B[Ng, K]^T, A and B int8
// K-major, int32 accumulation, D written by TMA.
//   plain   (kSwapAB = false): Mg = M, Ng = N, A = a, B = b, D = out row-major
//   swap-AB (kSwapAB = true):  Mg = N, Ng = M, A = b, B = a, D = out^T, i.e.
//           D column-major with leading dimension ldd, which is out itself.
#pragma once

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler_detail.hpp>
#include <cutlass/kernel_hardware_info.h>

#include "common/cutlass_status.cuh"
#include "sm90/scaled_mm_sm90.h"
#include "sm90/scaled_mm_sm90_configs.cuh"
#include "sm90/scaled_mm_sm90_epilogue.cuh"
#include "sm90/scaled_mm_sm90_mainloop.cuh"

namespace w8a8::sm90 {

template <class Config, class ElementOut>
struct ScaledMmSm90Gemm {
  using TileShape = typename Config::TileShape;
  using ClusterShape = typename Config::ClusterShape;
  using KernelSchedule = typename Config::KernelSchedule;
  using EpilogueSchedule = typename Config::EpilogueSchedule;
  using TileScheduler = typename Config::TileScheduler;
  static constexpr bool kSwapAB = Config::kSwapAB;
  static constexpr bool kCooperative =
      std::is_same_v<KernelSchedule, cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  static constexpr bool kPingpong =
      std::is_same_v<KernelSchedule, cutlass::gemm::KernelTmaWarpSpecializedPingpong>;
  // The non-persistent warp-specialized kernel: one CTA per output tile, one
  // consumer warpgroup (64-row tiles), no scheduler state.
  static constexpr bool kBasic = std::is_same_v<KernelSchedule, cutlass::gemm::KernelTmaWarpSpecialized>;
  static constexpr bool kStreamK = std::is_same_v<TileScheduler, cutlass::gemm::StreamKScheduler>;

  static_assert(std::is_same_v<ElementOut, cutlass::bfloat16_t> ||
                    std::is_same_v<ElementOut, cutlass::half_t>,
                "scaled_mm_sm90: the output is bf16 or fp16");
  static_assert(kCooperative || kPingpong || kBasic, "scaled_mm_sm90: TMA warp-specialized schedules only");
  static_assert(kCooperative == std::is_same_v<EpilogueSchedule,
                                               cutlass::epilogue::TmaWarpSpecializedCooperative>,
                "scaled_mm_sm90: the epilogue schedule must match the kernel schedule");
  static_assert((kPingpong || kBasic) == std::is_same_v<EpilogueSchedule, cutlass::epilogue::TmaWarpSpecialized>,
                "scaled_mm_sm90: the epilogue schedule must match the kernel schedule");
  static_assert(!kBasic || std::is_same_v<TileScheduler, cutlass::gemm::PersistentScheduler>,
                "scaled_mm_sm90: the non-persistent kernel takes the default scheduler (one CTA per tile)");
  static_assert(cute::size<0>(TileShape{}) % (kCooperative ? 128 : 64) == 0,
                "scaled_mm_sm90: tile M is a multiple of 64 rows per consumer warpgroup "
                "(cooperative splits it over two)");
  static_assert(cute::size<1>(TileShape{}) % 8 == 0 && cute::size<1>(TileShape{}) <= 256,
                "scaled_mm_sm90: tile N is a wgmma N (multiple of 8, at most 256)");
  static_assert(cute::size<2>(TileShape{}) % 64 == 0,
                "scaled_mm_sm90: tile K spans whole 64-byte int8 swizzle atoms (wgmma K = 32)");
  static_assert(!kStreamK || kCooperative,
                "scaled_mm_sm90: CUTLASS's stream-K scheduler runs only with the cooperative kernel");

  using ElementA = int8_t;
  using ElementB = int8_t;
  using ElementAccumulator = int32_t;
  using ElementCompute = float;
  using LayoutA = cutlass::layout::RowMajor;     // [Mg, K], K contiguous
  using LayoutB = cutlass::layout::ColumnMajor;  // [Ng, K], K contiguous
  using LayoutD = std::conditional_t<kSwapAB, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  // TMA: 16-byte aligned rows, counted in elements.
  static constexpr int kAlignmentAB = 16;
  static constexpr int kAlignmentD = 16 / sizeof(ElementOut);
  static_assert(kAlignmentD == 8, "scaled_mm_sm90: 16-bit output, 8 elements per 16 bytes");

  using Epilogue = ScaledMmEpilogue<ElementOut, TileShape, kSwapAB>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAccumulator, ElementCompute,
      void, LayoutD, kAlignmentD,  // no C operand
      ElementOut, LayoutD, kAlignmentD, EpilogueSchedule, typename Epilogue::EVT>::CollectiveOp;

  // Configs that name their stages are sized for two CTAs per SM (TwoPerSm); the others take
  // every stage the epilogue's shared memory leaves room for.
  static constexpr bool kTwoPerSm = PipelineStages<Config>::value > 0;
  using StageCount = std::conditional_t<
      kTwoPerSm, cutlass::gemm::collective::StageCount<PipelineStages<Config>::value>,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>>;

  // The weights are A in swap-AB configs, B otherwise (scaled_mm_sm90_mainloop.cuh).
  using CollectiveMainloop = WeightsFirstMainloop<
      typename cutlass::gemm::collective::CollectiveBuilder<
          cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlignmentAB, ElementB,
          LayoutB, kAlignmentAB, ElementAccumulator, TileShape, ClusterShape, StageCount,
          KernelSchedule>::CollectiveOp,
      kSwapAB, PrefetchKTiles<Config>::value>;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>,
                                                      CollectiveMainloop, CollectiveEpilogue,
                                                      TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static_assert(!kTwoPerSm || Kernel::SharedStorageSize <= TwoPerSm::kSmemPerCta,
                "scaled_mm_sm90: a config that names its stages fits two CTAs per SM");

  using StrideA = typename Kernel::StrideA;
  using StrideB = typename Kernel::StrideB;
  using StrideD = typename Kernel::StrideD;
  static_assert(std::is_same_v<StrideA, cute::Stride<int64_t, cute::_1, int64_t>>,
                "scaled_mm_sm90: A is K-major with a run-time row pitch");
  static_assert(std::is_same_v<StrideB, cute::Stride<int64_t, cute::_1, int64_t>>,
                "scaled_mm_sm90: B is K-major with a run-time row pitch");
  static_assert(std::is_same_v<StrideD, std::conditional_t<kSwapAB,
                                                           cute::Stride<cute::_1, int64_t, int64_t>,
                                                           cute::Stride<int64_t, cute::_1, int64_t>>>,
                "scaled_mm_sm90: D is out (row-major) or out^T (column-major) with pitch ldd");
  static_assert(std::is_same_v<typename CollectiveEpilogue::StrideC, StrideD>,
                "scaled_mm_sm90: the (absent) C operand shares D's stride type");
};

namespace detail {

using ::w8a8::throw_if_failed;

// CUTLASS's persistent schedulers pad the tile grid of each mode to a
// multiple of (swizzle x cluster) and run the padded tiles (TMA zero-fills
// them; the stores are clipped). Take the largest swizzle <= max_swizzle whose
// padding costs at most 1/32 more tiles than cluster padding alone. Mirrors
// PersistentTileSchedulerSm90Params::get_log_swizzle_size.
inline int choose_swizzle(int max_swizzle, int64_t tiles_m, int64_t tiles_n, int cluster_m,
                          int cluster_n) {
  auto effective_log = [&](int swizzle) {
    int64_t min_dim = tiles_m < tiles_n ? tiles_m : tiles_n;
    if (swizzle >= 8 && min_dim >= 6) return 3;
    if (swizzle >= 4 && min_dim >= 3) return 2;
    if (swizzle >= 2 && min_dim >= 2) return 1;
    return 0;
  };
  auto round_up = [](int64_t x, int64_t to) { return (x + to - 1) / to * to; };
  const int64_t base = round_up(tiles_m, cluster_m) * round_up(tiles_n, cluster_n);
  for (int swizzle = max_swizzle; swizzle > 1; swizzle /= 2) {
    const int64_t s = int64_t(1) << effective_log(swizzle);
    const int64_t padded = round_up(tiles_m, s * cluster_m) * round_up(tiles_n, s * cluster_n);
    if (padded * 32 <= base * 33) return swizzle;
  }
  return 1;
}

}  // namespace detail

template <class Config, class ElementOut>
struct ScaledMmSm90Arguments {
  using G = ScaledMmSm90Gemm<Config, ElementOut>;
  using Arguments = typename G::Gemm::Arguments;

  static Arguments make(const ScaledMmSm90Params& p, const SchedulerOptions& options) {
    // GEMM operands (see the file comment).
    const int64_t ld_a = G::kSwapAB ? p.ldb : p.lda;
    const int64_t ld_b = G::kSwapAB ? p.lda : p.ldb;
    const int64_t mg = G::kSwapAB ? p.n : p.m;
    const int64_t ng = G::kSwapAB ? p.m : p.n;

    // Batch strides: L = 1, any value is legal; use the packed size (a
    // multiple of 16 bytes, as TMA wants for every non-unit stride).
    typename G::StrideA stride_a = cute::make_stride(ld_a, cute::_1{}, ld_a * mg);
    typename G::StrideB stride_b = cute::make_stride(ld_b, cute::_1{}, ld_b * ng);
    typename G::StrideD stride_d;
    if constexpr (G::kSwapAB) {
      stride_d = cute::make_stride(cute::_1{}, p.ldd, p.ldd * ng);
    } else {
      stride_d = cute::make_stride(p.ldd, cute::_1{}, p.ldd * mg);
    }

    typename G::Epilogue::Inputs epilogue_inputs{
        p.a_scale,
        p.a_scale_per_token,
        p.b_scale,
        p.b_scale_per_channel,
        p.bias_kind == ScaledMmBias::kFloat32 ? static_cast<const float*>(p.bias) : nullptr,
        p.bias_kind == ScaledMmBias::kOutDtype ? static_cast<const ElementOut*>(p.bias) : nullptr};

    Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {static_cast<int>(mg), static_cast<int>(ng), static_cast<int>(p.k), 1};
    args.mainloop.ptr_A = G::kSwapAB ? p.b : p.a;
    args.mainloop.dA = stride_a;
    args.mainloop.ptr_B = G::kSwapAB ? p.a : p.b;
    args.mainloop.dB = stride_b;
    if (p.weights_ready) {
      constexpr int kWeightRows = cute::size<G::kSwapAB ? 0 : 1>(typename G::TileShape{});
      constexpr int kTokenCols = cute::size<G::kSwapAB ? 1 : 0>(typename G::TileShape{});
      constexpr int kStages = G::CollectiveMainloop::DispatchPolicy::Stages;
      args.mainloop.weights_first_stages =
          WeightsFirstPolicy::stages(p.m, p.n, p.k, p.sm_count, kWeightRows, kTokenCols,
                                     cute::size<2>(typename G::TileShape{}), kStages);
    }
    args.epilogue = {G::Epilogue::arguments(epilogue_inputs), nullptr, stride_d,
                     static_cast<ElementOut*>(p.out), stride_d};
    args.hw_info.device_id = p.device_id;
    args.hw_info.sm_count = p.sm_count;

    using RasterOrderOptions = cutlass::gemm::kernel::detail::RasterOrderOptions;
    const int64_t tiles_m = (mg + cute::size<0>(typename G::TileShape{}) - 1) /
                            cute::size<0>(typename G::TileShape{});
    const int64_t tiles_n = (ng + cute::size<1>(typename G::TileShape{}) - 1) /
                            cute::size<1>(typename G::TileShape{});
    args.scheduler.max_swizzle_size =
        detail::choose_swizzle(options.max_swizzle, tiles_m, tiles_n,
                               cute::size<0>(typename G::ClusterShape{}),
                               cute::size<1>(typename G::ClusterShape{}));
    args.scheduler.raster_order = options.raster == Raster::kAlongM   ? RasterOrderOptions::AlongM
                                  : options.raster == Raster::kAlongN ? RasterOrderOptions::AlongN
                                                                      : RasterOrderOptions::Heuristic;
    if constexpr (G::kStreamK) {
      using DecompositionMode = cutlass::gemm::kernel::detail::DecompositionMode;
      args.scheduler.splits = options.splits;
      args.scheduler.decomposition_mode =
          options.decomposition == Decomposition::kDataParallel ? DecompositionMode::DataParallel
          : options.decomposition == Decomposition::kSplitK     ? DecompositionMode::SplitK
          : options.decomposition == Decomposition::kStreamK    ? DecompositionMode::StreamK
                                                                : DecompositionMode::Heuristic;
      // Integer partial sums: the reduction order cannot change the result,
      // but keep the turnstile (deterministic) mode, CUTLASS's default.
      args.scheduler.reduction_mode = cutlass::gemm::kernel::detail::ReductionMode::Deterministic;
    }
    return args;
  }
};

template <class Config, class ElementOut>
size_t ScaledMmSm90Launcher<Config, ElementOut>::workspace_size(const ScaledMmSm90Params& params,
                                                                 const SchedulerOptions& options) {
  using G = ScaledMmSm90Gemm<Config, ElementOut>;
  return G::Gemm::get_workspace_size(ScaledMmSm90Arguments<Config, ElementOut>::make(params, options));
}

// cudaFuncAttributeMaxDynamicSharedMemorySize of `kernel` on `device`, set once per device
// (the attribute belongs to the device's context; CUTLASS's initialize() sets it on every call).
template <auto kKernel>
void max_dynamic_smem_once(int device, int bytes) {
  static std::atomic<uint64_t> done{0};  // bit d: set on device d (< 64 devices)
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit)) return;
  const cudaError_t error = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (error != cudaSuccess) {
    throw std::runtime_error(std::string("setting the kernel's shared memory size failed: ") + cudaGetErrorString(error));
  }
  done.fetch_or(bit, std::memory_order_release);
}

// cutlass::device_kernel<Kernel>(params) on `stream`, as GemmUniversalAdapter::run launches it,
// without its per-launch cudaFuncSetAttribute (NonPortableClusterSizeAllowed, which a cluster
// of at most 8 CTAs does not need): the cluster shape, and `programmatic` as a programmatic
// dependent of the kernel before it. A failed launch throws std::runtime_error.
template <class Kernel>
void launch_gemm(const typename Kernel::Params& params, dim3 grid, cudaStream_t stream, bool programmatic) {
  using ClusterShape = typename Kernel::DispatchPolicy::ClusterShape;
  constexpr unsigned kClusterM = cute::size<0>(ClusterShape{}), kClusterN = cute::size<1>(ClusterShape{});
  static_assert(kClusterM * kClusterN <= 8 && cute::size<2>(ClusterShape{}) == 1, "a portable cluster size");
  cudaLaunchAttribute attributes[2] = {};
  unsigned count = 0;
  if constexpr (kClusterM * kClusterN > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count++].val.clusterDim = {kClusterM, kClusterN, 1};
  }
  if (programmatic) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = Kernel::get_block_shape();
  config.dynamicSmemBytes = Kernel::SharedStorageSize;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  void* args[] = {const_cast<typename Kernel::Params*>(&params)};
  const cudaError_t error =
      cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(&cutlass::device_kernel<Kernel>), args);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();  // reported here: not left for the next call to find
    throw std::runtime_error(std::string("CUTLASS launch failed: ") + cudaGetErrorString(error));
  }
}

template <class Config, class ElementOut>
void ScaledMmSm90Launcher<Config, ElementOut>::run(const ScaledMmSm90Params& params,
                                                   const SchedulerOptions& options, void* workspace,
                                                   cudaStream_t stream) {
  using G = ScaledMmSm90Gemm<Config, ElementOut>;
  using Kernel = typename G::Kernel;
  const auto args = ScaledMmSm90Arguments<Config, ElementOut>::make(params, options);
  detail::throw_if_failed(G::Gemm::can_implement(args), "can_implement");
  // GemmUniversalAdapter::initialize() without its per-call cudaFuncSetAttribute: zero the
  // stream-K locks in `workspace` on `stream`, then build the params (the TMA descriptors).
  detail::throw_if_failed(Kernel::initialize_workspace(args, workspace, stream, nullptr), "initialize_workspace");
  typename Kernel::Params kernel_params = Kernel::to_underlying_arguments(args, workspace);
  constexpr int kSmem = Kernel::SharedStorageSize;
  if constexpr (kSmem >= (48 << 10)) max_dynamic_smem_once<cutlass::device_kernel<Kernel>>(params.device_id, kSmem);
  // Two CTAs per SM need the largest shared-memory split, which the driver does not pick
  // for a kernel that fits at a smaller one (common/programmatic_launch.cuh).
  with_carveout<G::kTwoPerSm, cutlass::device_kernel<Kernel>>("scaled_mm_sm90");
  // A programmatic dependent of the kernel before it (scaled_mm_sm90_mainloop.cuh), except
  // where the stream-K scheduler splits K (its workspace reset by a kernel above).
  const bool programmatic = !G::kStreamK || options.decomposition == Decomposition::kDataParallel;
  launch_gemm<Kernel>(kernel_params, G::Gemm::get_grid_shape(kernel_params), stream, programmatic);
}

}  // namespace w8a8::sm90

// The body of an instance file: explicit instantiation of one config of
// scaled_mm_sm90_configs.cuh for both output dtypes (one config per file, so
// the build compiles them in parallel).
#define W8A8_SM90_INSTANTIATE(Config)                                                          \
  template struct w8a8::sm90::ScaledMmSm90Launcher<w8a8::sm90::Config, cutlass::bfloat16_t>; \
  template struct w8a8::sm90::ScaledMmSm90Launcher<w8a8::sm90::Config, cutlass::half_t>;
