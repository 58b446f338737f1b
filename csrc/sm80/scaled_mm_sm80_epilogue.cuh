// The dequantization epilogue of the sm80 (Ampere / Ada) int8 scaled matmul:
// one CUTLASS 2.x visitor tree shared by every sm80 tile config.
//
// Contract: the one of sm90/scaled_mm_sm90_epilogue.cuh, computed by the same
// DequantizeFn (common/scaled_mm_dequant.cuh):
//     out[t, c] = round_out( (a_scale[t] * (b_scale[c] * float(acc))) + bias[c] )
// with a_scale a vector over tokens or one scalar, b_scale a vector over
// channels or one scalar, bias absent / fp32 / output dtype: all runtime
// choices (a stride of 0 or 1 and a null pointer), so one instantiation per
// (tile config, ElementOut) serves the 2 x 2 x 3 cases without a host sync.
// GEMM rows are tokens and GEMM columns channels (no swap-AB on sm80).
//
// Loads: the scales and the bias are read one element at a time (no vector
// access), so their pointers need only their natural alignment; each thread
// loads its tile columns once per tile (begin_epilogue), its rows per step.
#pragma once

#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/threadblock/fusion/visitors.hpp>

#include "common/scaled_mm_dequant.cuh"

namespace w8a8::sm80 {

namespace evt = cutlass::epilogue::threadblock;

// A value per GEMM column (channel), or one scalar broadcast to every column:
// the N stride is 1 (vector) or 0 (scalar), read at run time. A null pointer
// reads as `null_default` everywhere. (CUTLASS's VisitorRowBroadcast loads
// 16-byte vectors, which a scalar or an unaligned vector cannot feed.)
template <class ThreadMap, class Element>
struct RowVectorOrScalar {
  using StrideMNL = cute::Stride<cute::_0, int64_t, cute::_0>;

  struct Arguments {
    Element const* ptr = nullptr;
    Element null_default = Element(0);
    StrideMNL stride = {};
  };
  using Params = Arguments;
  struct SharedStorage {};

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }

  CUTLASS_HOST_DEVICE RowVectorOrScalar() {}
  CUTLASS_HOST_DEVICE RowVectorOrScalar(Params const& params, SharedStorage const&) : params_ptr(&params) {}

  Params const* params_ptr = nullptr;

  template <class GTensor, class RTensor, class CTensor>
  struct Callbacks : evt::EmptyCallbacks {
    CUTLASS_DEVICE Callbacks(GTensor&& g, RTensor&& r, CTensor&& c, int n, Params const* params)
        : tC_g(cute::forward<GTensor>(g)), tC_r(cute::forward<RTensor>(r)), tC_c(cute::forward<CTensor>(c)),
          n(n), params_ptr(params) {}

    GTensor tC_g;  // (VECTOR, FRAGMENT_COLUMN) in global memory
    RTensor tC_r;  // the same in registers
    CTensor tC_c;  // their (m, n) coordinates
    int n;
    Params const* params_ptr;

    CUTLASS_DEVICE void begin_epilogue() {
      if (params_ptr->ptr == nullptr) {
        cute::fill(tC_r, params_ptr->null_default);
        return;
      }
      cute::clear(tC_r);
      auto in_bounds = cute::lazy::transform(tC_c, [&](auto const& c) { return cute::get<1>(c) < n; });
      cute::copy_if(in_bounds, tC_g, tC_r);
    }

    template <class ElementAccumulator, int FragmentSize>
    CUTLASS_DEVICE auto visit(int, int, int column_idx, int,
                              cutlass::Array<ElementAccumulator, FragmentSize> const&) {
      auto fragments = cute::recast<cutlass::Array<Element, FragmentSize>>(cute::coalesce(tC_r));
      return fragments(column_idx);
    }
  };

  template <class ProblemShape>
  CUTLASS_DEVICE auto get_callbacks(cutlass::gemm::GemmCoord tile_offset, int thread_idx,
                                    ProblemShape problem_shape) {
    using namespace cute;
    Tensor mRow = make_tensor(make_gmem_ptr(params_ptr->ptr), problem_shape, params_ptr->stride);
    Tensor tC_g = ThreadMap::partition(mRow, thread_idx, tile_offset)(_, _, _0{}, _0{}, _0{}, _0{});
    Tensor tC_r = make_tensor<Element>(make_layout(shape(tC_g)));
    Tensor cRow = make_identity_tensor(mRow.shape());
    Tensor tC_c = ThreadMap::partition(cRow, thread_idx, tile_offset)(_, _, _0{}, _0{}, _0{}, _0{});
    return Callbacks<decltype(tC_g), decltype(tC_r), decltype(tC_c)>(
        cute::move(tC_g), cute::move(tC_r), cute::move(tC_c), int(get<1>(problem_shape)), params_ptr);
  }
};

template <class ElementOut, class ThreadMap>
struct ScaledMmEpilogue {
  static_assert(std::is_same_v<ElementOut, cutlass::bfloat16_t> || std::is_same_v<ElementOut, cutlass::half_t>,
                "ScaledMmEpilogue (sm80): the output is bf16 or fp16");

  // A value per GEMM row (token) or one scalar: the M stride is 1 or 0.
  using ColStride = cute::Stride<int64_t, cute::_0, cute::_0>;
  using AScale = evt::VisitorColBroadcast<ThreadMap, float, ColStride>;
  using BScale = RowVectorOrScalar<ThreadMap, float>;
  using BiasF32 = RowVectorOrScalar<ThreadMap, float>;
  using BiasOut = RowVectorOrScalar<ThreadMap, ElementOut>;
  using Dequantize = evt::VisitorCompute<DequantizeFn, float, float, cutlass::FloatRoundStyle::round_to_nearest>;
  // Child order = argument order of DequantizeFn.
  using Compute = evt::Sm80EVT<Dequantize, evt::VisitorAccFetch, BScale, AScale, BiasF32, BiasOut>;

  // The store: round to nearest even to ElementOut, row pitch ldd.
  using OutStride = cute::Stride<int64_t, cute::_1, cute::_0>;
  using Store = evt::VisitorAuxStore<ThreadMap, ElementOut, cutlass::FloatRoundStyle::round_to_nearest, OutStride>;
  using EVT = evt::Sm80EVT<Store, Compute>;

  struct Inputs {
    const float* a_scale;
    bool a_scale_per_token;
    const float* b_scale;
    bool b_scale_per_channel;
    const float* bias_f32;       // null unless the bias is fp32
    const ElementOut* bias_out;  // null unless the bias is in the output type
    ElementOut* out;
    int64_t ldd;
  };

  static typename EVT::Arguments arguments(Inputs const& in) {
    using cute::_0;
    using cute::_1;
    const int64_t per_channel = in.b_scale_per_channel ? 1 : 0;
    const int64_t per_token = in.a_scale_per_token ? 1 : 0;
    typename Compute::Arguments compute{
        {},                                                              // acc
        {in.b_scale, 0.0f, {_0{}, per_channel, _0{}}},                   // b_scale
        {in.a_scale, 0.0f, {per_token, _0{}, _0{}}},                     // a_scale
        {in.bias_f32, -0.0f, {_0{}, int64_t(1), _0{}}},                  // bias (fp32)
        {in.bias_out, ElementOut(-0.0f), {_0{}, int64_t(1), _0{}}},      // bias (out)
        {}};                                                             // dequantize
    return typename EVT::Arguments{compute, {in.out, {in.ldd, _1{}, _0{}}}};
  }
};

}  // namespace w8a8::sm80
