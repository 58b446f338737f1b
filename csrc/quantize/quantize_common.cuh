// The pieces both CUDA activation quantizers use (the static kernel in quantize.cu, the
// per-token kernel in quantize_per_token.cuh): the block size, the ops' names and the code
// range, loads of kVec elements (raw, and widened to float) and int8 code stores. Included by
// quantize.cu only (the anonymous namespace: internal to that translation unit).
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace w8a8 {
namespace {

constexpr int kBlockThreads = 256;
constexpr const char* kPerTokenOp = "quantize_per_token_sm90";
constexpr const char* kStaticOp = "quantize_static_sm90";
constexpr float kQMin = -128.0f;
constexpr float kQMax = 127.0f;
constexpr float kSymmetricQMax = 127.0f;
// Where the reference sends +-Inf before adding zero_point (nan_to_num(posinf=4*QMAX, neginf=4*QMIN)).
constexpr float kPosInfCode = 508.0f;
constexpr float kNegInfCode = -512.0f;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// kVec consecutive elements of T as loaded: one 16-byte vector when kVec * sizeof(T) == 16,
// else one element. Rows are held in this raw form (half the registers of floats for
// 16-bit inputs) and widened where they are used.
template <class T, int kVec>
using Raw = std::conditional_t<kVec * sizeof(T) == 16, uint4, T>;

template <class T, int kVec>
__device__ __forceinline__ Raw<T, kVec> load_raw(const T* p) {
  static_assert(kVec * sizeof(T) == 16 || kVec == 1, "quantize: a vector is 16 bytes or one element");
  if constexpr (kVec * sizeof(T) == 16) {
    return __ldg(reinterpret_cast<const uint4*>(p));
  } else {
    return p[0];
  }
}

template <class T, int kVec>
__device__ __forceinline__ void widen(const Raw<T, kVec>& raw, float (&out)[kVec]) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVec; ++i) out[i] = to_float(e[i]);
}

template <class T, int kVec>
__device__ __forceinline__ void load(const T* p, float (&out)[kVec]) {
  widen<T, kVec>(load_raw<T, kVec>(p), out);
}

// kVec int8 codes in one store (kVec bytes; q rows are kVec-aligned, see Launch).
template <int kVec>
struct alignas(kVec) Codes {
  int8_t v[kVec];
};

// The same bytes as whole words, where kVec is a multiple of 4 (the per-token kernel packs them so).
template <int kVec>
struct alignas(kVec) CodeWords {
  uint32_t w[kVec / 4];
};

template <int kVec>
using PackedCodes = std::conditional_t<kVec % 4 == 0, CodeWords<kVec>, Codes<kVec>>;

template <int kVec, template <int> class C>
__device__ __forceinline__ void store(int8_t* p, const C<kVec>& codes) {
  *reinterpret_cast<C<kVec>*>(p) = codes;
}

}  // namespace
}  // namespace w8a8
