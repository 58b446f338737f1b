// The dequantization epilogue of the sm90 int8 scaled matmul: one EVT
// (epilogue visitor tree) policy shared by every tile config.
//
// Contract
// --------
// Inputs per output element (token t, channel c), with acc the exact int32
// sum_k a[t, k] * b[c, k]:
//     a_scale: fp32, a vector over tokens or one scalar    (runtime choice)
//     b_scale: fp32, a vector over channels or one scalar  (runtime choice)
//     bias:    absent, an fp32 vector over channels, or a vector over
//              channels in the output type                  (runtime choice)
// Output:
//     out[t, c] = round_out( (a_scale[t] * (b_scale[c] * float(acc))) + bias[c] )
// each * and + an IEEE fp32 operation rounded to nearest and never fused
// into an FMA (so the result is bit-identical to w8a8/reference.py), float(acc)
// rounded to nearest, round_out the round-to-nearest-even conversion to
// ElementOut. An absent bias adds -0, which leaves every value (signed zeros
// included) unchanged, so the output equals the formula without a bias term.
//
// Orientation: with kSwapAB = false the GEMM computes out directly (GEMM rows
// are tokens, GEMM columns are channels). With kSwapAB = true it computes
// out^T (GEMM rows are channels, GEMM columns are tokens) and the caller
// stores D column-major; the policy then broadcasts a_scale along GEMM
// columns and b_scale / bias along GEMM rows. The math is the same.
//
// Cost model: scalar-vs-vector is a runtime stride flag (a bool stride in the
// broadcast nodes, CUTLASS's "dynamic broadcast") and an absent bias is a null
// pointer (the node reads its null_default, -0), so one instantiation per
// (tile config, ElementOut) serves all 2 x 2 x 3 scale/bias cases with no host
// synchronisation. Broadcast loads use alignment 1, so the scale and bias
// pointers need only their natural element alignment.
#pragma once

#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/array.h>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/numeric_conversion.h>

#include "common/scaled_mm_dequant.cuh"

namespace w8a8::sm90 {

using ::w8a8::DequantizeFn;

// kSwapAB: see "Orientation" above. TileShape: the CTA tile (M, N, K) of the
// GEMM as CUTLASS sees it (after the swap).
template <class ElementOut, class TileShape, bool kSwapAB>
struct ScaledMmEpilogue {
  static_assert(std::is_same_v<ElementOut, cutlass::bfloat16_t> ||
                    std::is_same_v<ElementOut, cutlass::half_t>,
                "ScaledMmEpilogue: the output is bf16 or fp16");

  // Broadcast along GEMM rows (values indexed by the GEMM column) or along
  // GEMM columns (indexed by the GEMM row); the bool stride picks vector (true)
  // or scalar (false) at run time.
  using RowVectorStride = cute::Stride<cute::_0, bool, cute::_0>;
  using ColVectorStride = cute::Stride<bool, cute::_0, cute::_0>;
  template <class Element>
  using RowVector = cutlass::epilogue::fusion::Sm90RowBroadcast<
      0, TileShape, Element, float, RowVectorStride, /*Alignment=*/1>;
  template <class Element>
  using ColVector = cutlass::epilogue::fusion::Sm90ColBroadcast<
      0, TileShape, Element, float, ColVectorStride, /*Alignment=*/1>;

  // Tokens are GEMM rows unless swapped; channels are the other side.
  template <class Element>
  using TokenVector = std::conditional_t<kSwapAB, RowVector<Element>, ColVector<Element>>;
  template <class Element>
  using ChannelVector = std::conditional_t<kSwapAB, ColVector<Element>, RowVector<Element>>;
  using TokenStride = std::conditional_t<kSwapAB, RowVectorStride, ColVectorStride>;
  using ChannelStride = std::conditional_t<kSwapAB, ColVectorStride, RowVectorStride>;

  using AScale = TokenVector<float>;
  using BScale = ChannelVector<float>;
  using BiasF32 = ChannelVector<float>;
  using BiasOut = ChannelVector<ElementOut>;
  using Dequantize = cutlass::epilogue::fusion::Sm90Compute<
      DequantizeFn, ElementOut, float, cutlass::FloatRoundStyle::round_to_nearest>;

  // Child order = argument order of DequantizeFn.
  using EVT = cutlass::epilogue::fusion::Sm90EVT<
      Dequantize, cutlass::epilogue::fusion::Sm90AccFetch, BScale, AScale, BiasF32, BiasOut>;

  struct Inputs {
    const float* a_scale;
    bool a_scale_per_token;
    const float* b_scale;
    bool b_scale_per_channel;
    const float* bias_f32;        // null unless the bias is fp32
    const ElementOut* bias_out;   // null unless the bias is in the output type
  };

  static TokenStride token_stride(bool vector) {
    if constexpr (kSwapAB) {
      return cute::make_stride(cute::_0{}, vector, cute::_0{});
    } else {
      return cute::make_stride(vector, cute::_0{}, cute::_0{});
    }
  }
  static ChannelStride channel_stride(bool vector) {
    if constexpr (kSwapAB) {
      return cute::make_stride(vector, cute::_0{}, cute::_0{});
    } else {
      return cute::make_stride(cute::_0{}, vector, cute::_0{});
    }
  }

  static typename EVT::Arguments arguments(Inputs const& in) {
    return typename EVT::Arguments{
        {},                                                                        // acc
        {in.b_scale, 0.0f, channel_stride(in.b_scale_per_channel)},                // b_scale
        {in.a_scale, 0.0f, token_stride(in.a_scale_per_token)},                    // a_scale
        {in.bias_f32, -0.0f, channel_stride(true)},                                // bias (fp32)
        {in.bias_out, ElementOut(-0.0f), channel_stride(true)},                    // bias (out)
        {}};                                                                       // dequantize
  }
};

}  // namespace w8a8::sm90
