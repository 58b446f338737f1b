// The sm90 GEMM's mainloop: CUTLASS's TMA + wgmma warp-specialized collective (what
// CollectiveBuilder returns), with the producer's first pipeline stages filled weights first,
// or the first weights prefetched into L2 while the CTA waits for the kernel ahead.
//
// Weights first: W8A8Linear runs its activation quantizer and then the GEMM, launched as the
// quantizer's programmatic dependent, so the GEMM's CTAs start while the quantizer runs. The
// weights do not depend on it (ScaledMmSm90Params::weights_ready), so each CTA loads the weight
// tiles of its first K blocks into shared memory (as many stages as WeightsFirstPolicy allots,
// scaled_mm_sm90_configs.cuh), then waits for the quantizer (griddepcontrol.wait), then loads
// the activation tiles of those stages and goes on as CUTLASS's loop does.
// [evidence sm90.weights-first]
//
// L2 prefetch: a plain scaled_mm (weights_first_stages 0), whose weights a kernel still running
// ahead of it may be writing, reads nothing before the wait; it only asks for its first
// kPrefetchKTiles weight tiles in L2 (TMA prefetch, cp.async.bulk.prefetch.tensor). A prefetch
// is a hint, not a read in the memory model: the loads after the wait see what the kernel ahead
// wrote whatever the prefetch fetched (L2 is where every SM's writes land). It turns the wait
// into HBM traffic, so the first loads after it hit L2. [evidence sm90.prefetch]
// Only linear's GEMM loads weights before the wait, and only those of its first stages (no
// L2 prefetch past them). [evidence sm90.weights-first-plain-call]
// [evidence sm90.linear-l2-prefetch]
//
// Only a CTA's first tile: on later tiles of a persistent CTA the stages are still being
// consumed, and issuing every stage's weights before any stage's activations would drain the
// pipeline at each tile edge.
//
// Only the order of the TMA copies changes: each stage's barrier expects the bytes of both
// operands from producer_acquire on, and completes when both have landed, whichever was issued
// first. Everything else a CTA reads that an earlier kernel may write (the activation codes and
// scales, the bias) is read after the wait: the codes by the copies below, the epilogue's
// operands by the consumer warps once they have consumed a stage (so after the wait); the
// output is written after that too.
//
// Every launch of these configs but a K split on the stream-K scheduler is programmatic
// (common/programmatic_launch.cuh): once the load warp has issued every load of a tile it lets
// the next kernel on the stream launch, whose start-up then overlaps this kernel's last stages
// and epilogue. [evidence sm90.pdl]
#pragma once

#include <cute/algorithm/prefetch.hpp>
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>

#include "common/programmatic_launch.cuh"

namespace w8a8::sm90 {

// Base: the CollectiveMma CollectiveBuilder made (MainloopSm90TmaGmmaWarpSpecialized*);
// kWeightIsA: the weights are CUTLASS's A operand (swap-AB configs), else B;
// kPrefetchKTiles: the weight tiles a plain call prefetches into L2 before its wait.
template <class Base, bool kWeightIsA, int kPrefetchKTiles>
struct WeightsFirstMainloop : Base {
  using typename Base::DispatchPolicy;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::TensorStorage;
  using typename Base::GmemTiledCopyA;
  using typename Base::GmemTiledCopyB;

  // weights_first_stages > 0: the kernel before is w8a8::linear's quantizer
  // (ScaledMmSm90Params::weights_ready), and the stages whose weights load before the wait
  // (WeightsFirstPolicy). Otherwise CUTLASS's order (every stage's weights ahead of the first
  // stage's activations would delay the first MMA). [evidence sm90.weights-first-plain-call]
  struct Arguments : Base::Arguments {
    int weights_first_stages = 0;
  };
  struct Params : Base::Params {
    int weights_first_stages = 0;
  };

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args,
                                                  void* workspace) {
    Params params{Base::to_underlying_arguments(problem_shape, args, workspace)};
    params.weights_first_stages = args.weights_first_stages;
    return params;
  }

  // CUTLASS's load (sm90_mma_tma_gmma_ss_warpspecialized.hpp, CUTLASS 4.2) with
  // the prologue above; the multicast masks and partitions are CUTLASS's.
  template <class TensorA, class TensorB, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& mainloop_params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<TensorA, TensorB> const& load_inputs, BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int /*thread_idx*/,
                           uint32_t block_rank_in_cluster, TensorStorage& shared_tensors) {
    using namespace cute;
    if (!cute::elect_one_sync()) return;

    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});  // (BLK_M,BLK_K,PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});  // (BLK_N,BLK_K,PIPE)

    constexpr uint32_t cluster_shape_x = get<0>(typename DispatchPolicy::ClusterShape());
    uint2 cluster_local_block_id = {block_rank_in_cluster % cluster_shape_x, block_rank_in_cluster / cluster_shape_x};

    Tensor gA_mkl = get<0>(load_inputs);
    Tensor gB_nkl = get<1>(load_inputs);
    auto block_tma_a = mainloop_params.tma_load_a.get_slice(cluster_local_block_id.y);
    auto block_tma_b = mainloop_params.tma_load_b.get_slice(cluster_local_block_id.x);

    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    Tensor gA = gA_mkl(_, _, m_coord, _, l_coord);  // (BLK_M,BLK_K,k)
    Tensor gB = gB_nkl(_, _, n_coord, _, l_coord);  // (BLK_N,BLK_K,k)
    Tensor tAgA = block_tma_a.partition_S(gA);      // (TMA,TMA_M,TMA_K,k)
    Tensor tAsA = block_tma_a.partition_D(sA);      // (TMA,TMA_M,TMA_K,PIPE)
    Tensor tBgB = block_tma_b.partition_S(gB);      // (TMA,TMA_N,TMA_K,k)
    Tensor tBsB = block_tma_b.partition_D(sB);      // (TMA,TMA_N,TMA_K,PIPE)

    uint16_t mcast_mask_a = 0;
    uint16_t mcast_mask_b = 0;
    if constexpr (cute::is_same_v<GmemTiledCopyA, SM90_TMA_LOAD_MULTICAST>) {
      auto block_layout = Layout<typename DispatchPolicy::ClusterShape>{};  // (m,n) -> block_id
      for (int n = 0; n < size<1>(block_layout); ++n) {
        mcast_mask_a |= (uint16_t(1) << block_layout(cluster_local_block_id.x, n, Int<0>{}));
      }
    }
    if constexpr (cute::is_same_v<GmemTiledCopyB, SM90_TMA_LOAD_MULTICAST>) {
      auto block_layout = Layout<typename DispatchPolicy::ClusterShape>{};  // (m,n) -> block_id
      for (int m = 0; m < size<0>(block_layout); ++m) {
        mcast_mask_b |= (uint16_t(1) << block_layout(m, cluster_local_block_id.y, Int<0>{}));
      }
    }

    auto copy_a = [&](PipelineState const& state, auto k_tile) {
      copy(mainloop_params.tma_load_a.with(*pipeline.producer_get_barrier(state), mcast_mask_a),
           tAgA(_, _, _, k_tile), tAsA(_, _, _, state.index()));
    };
    auto copy_b = [&](PipelineState const& state, auto k_tile) {
      copy(mainloop_params.tma_load_b.with(*pipeline.producer_get_barrier(state), mcast_mask_b),
           tBgB(_, _, _, k_tile), tBsB(_, _, _, state.index()));
    };
    auto copy_weights = [&](PipelineState const& state, auto k_tile) {
      if constexpr (kWeightIsA) copy_a(state, k_tile); else copy_b(state, k_tile);
    };
    auto copy_activations = [&](PipelineState const& state, auto k_tile) {
      if constexpr (kWeightIsA) copy_b(state, k_tile); else copy_a(state, k_tile);
    };
    auto prefetch_weights = [&](auto k_tile) {
      if constexpr (kWeightIsA) {
        cute::prefetch(mainloop_params.tma_load_a, tAgA(_, _, _, k_tile));
      } else {
        cute::prefetch(mainloop_params.tma_load_b, tBgB(_, _, _, k_tile));
      }
    };

    // A plain call's first tile: its first weight tiles into L2 before the wait.
    if (first_tile_ && mainloop_params.weights_first_stages == 0) {
      KTileIterator prefetch_k = k_tile_iter;
      for (int i = 0; i < cute::min(k_tile_count, kPrefetchKTiles); ++i) {
        prefetch_weights(*prefetch_k);
        ++prefetch_k;
      }
    }

    // Prologue (the CTA's first tile): the weights of the first stages, the wait, then
    // their activations.
    const int first =
        first_tile_ ? cute::min(cute::min(k_tile_count, int(DispatchPolicy::Stages)), mainloop_params.weights_first_stages)
                    : 0;
    PipelineState weight_write = smem_pipe_write;
    KTileIterator weight_k = k_tile_iter;
    for (int i = 0; i < first; ++i) {
      pipeline.producer_acquire(weight_write);
      copy_weights(weight_write, *weight_k);
      ++weight_k;
      ++weight_write;
    }
    if (first_tile_) wait_for_prior_grids();  // returns at once without the launch attribute
    first_tile_ = false;
    for (int i = 0; i < first; ++i) {
      copy_activations(smem_pipe_write, *k_tile_iter);
      ++k_tile_iter;
      ++smem_pipe_write;
    }

    // CUTLASS's loop for the rest.
    CUTLASS_PRAGMA_NO_UNROLL
    for (k_tile_count -= first; k_tile_count > 0; --k_tile_count) {
      pipeline.producer_acquire(smem_pipe_write);
      copy_a(smem_pipe_write, *k_tile_iter);
      copy_b(smem_pipe_write, *k_tile_iter);
      ++k_tile_iter;
      ++smem_pipe_write;
    }
    // Every load of this tile is issued: the next kernel may launch (see above).
    allow_dependent_launch();
  }

 private:
  bool first_tile_ = true;  // the kernel makes one mainloop object per CTA
};

}  // namespace w8a8::sm90
