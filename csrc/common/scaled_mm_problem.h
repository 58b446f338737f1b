// The problem every int8 scaled-matmul kernel of w8a8 solves (sm90 and sm80),
// as a plain C++ struct: it compiles without CUDA or torch headers.
//
//   acc[m, n] = sum_k a[m, k] * b[n, k]                        (exact, int32)
//   out[m, n] = a_scale[m] * (b_scale[n] * float(acc[m, n])) + bias[n]
//
// in fp32, each product and the sum rounded to nearest, then one rounding to
// the output type (bf16 or fp16). a_scale may be one scalar (a_scale[0] for
// every m), b_scale one scalar (b_scale[0] for every n); bias may be absent.
//
// Layouts: a is [M, K] with row pitch lda, b is [N, K] with row pitch ldb
// (nn.Linear weight layout), out is [M, N] with row pitch ldd; the K (for a,
// b) and N (for out) elements are contiguous. Every kernel takes 16-byte rows:
// a, b and out start on 16-byte boundaries, K % 16 == 0, lda % 16 == 0,
// ldb % 16 == 0, N % 8 == 0 and ldd % 8 == 0. K must be > 0 (the caller
// handles K == 0).
#pragma once

#include <cstdint>
#include <string>

namespace w8a8 {

enum class ScaledMmOutDtype : int { kBFloat16 = 0, kFloat16 = 1 };

enum class ScaledMmBias : int {
  kNone = 0,     // no bias: adds 0
  kFloat32 = 1,  // bias is const float*  [N]
  kOutDtype = 2  // bias is [N] in the output dtype (bf16 / fp16), widened exactly to fp32
};

struct ScaledMmProblem {
  const int8_t* a = nullptr;        // [M, K], row pitch lda (elements)
  const int8_t* b = nullptr;        // [N, K], row pitch ldb (elements)
  void* out = nullptr;              // [M, N], row pitch ldd (elements), out_dtype
  const float* a_scale = nullptr;   // [M] if a_scale_per_token, else [1]
  const float* b_scale = nullptr;   // [N] if b_scale_per_channel, else [1]
  const void* bias = nullptr;       // [N] in the dtype bias_kind names; null iff kNone
  ScaledMmBias bias_kind = ScaledMmBias::kNone;
  bool a_scale_per_token = true;
  bool b_scale_per_channel = true;
  ScaledMmOutDtype out_dtype = ScaledMmOutDtype::kBFloat16;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
};

// The first rule of the contract above that `p` breaks, as
// "expected <rule>, got <value>"; empty when `p` keeps them all. The plan
// functions of the kernel entries (sm90/scaled_mm_sm90.cu,
// sm80/scaled_mm_sm80.cu) run it once per call, after the torch bindings have
// checked the same rules with the op's wording.
inline std::string scaled_mm_problem_error(const ScaledMmProblem& p) {
  auto expected = [](const char* rule, const std::string& actual) {
    return std::string("expected ") + rule + ", got " + actual;
  };
  auto aligned16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  auto address = [](const void* ptr) { return "address " + std::to_string(reinterpret_cast<uintptr_t>(ptr)); };
  // Messages are built only on failure: the entries run this check on every call.
  auto mnk = [&p] { return "M=" + std::to_string(p.m) + " N=" + std::to_string(p.n) + " K=" + std::to_string(p.k); };
  const int64_t kIntMax = 2147483647;
  if (!(p.m > 0 && p.n > 0 && p.k > 0)) return expected("M, N, K > 0", mnk());
  if (!(p.m <= kIntMax && p.n <= kIntMax && p.k <= kIntMax)) return expected("M, N, K < 2^31", mnk());
  if (p.k % 16 != 0) return expected("K % 16 == 0 (16-byte int8 rows)", "K=" + std::to_string(p.k));
  if (p.n % 8 != 0) return expected("N % 8 == 0 (16-byte output rows)", "N=" + std::to_string(p.n));
  if (!(p.lda >= p.k && p.lda % 16 == 0)) return expected("lda >= K and lda % 16 == 0", "lda=" + std::to_string(p.lda));
  if (!(p.ldb >= p.k && p.ldb % 16 == 0)) return expected("ldb >= K and ldb % 16 == 0", "ldb=" + std::to_string(p.ldb));
  if (!(p.ldd >= p.n && p.ldd % 8 == 0)) return expected("ldd >= N and ldd % 8 == 0", "ldd=" + std::to_string(p.ldd));
  if (!(p.a && aligned16(p.a))) return expected("a non-null and 16-byte aligned", address(p.a));
  if (!(p.b && aligned16(p.b))) return expected("b non-null and 16-byte aligned", address(p.b));
  if (!(p.out && aligned16(p.out))) return expected("out non-null and 16-byte aligned", address(p.out));
  if (!(p.a_scale && p.b_scale)) return expected("non-null a_scale and b_scale", "a null pointer");
  if ((p.bias_kind == ScaledMmBias::kNone) != (p.bias == nullptr)) {
    return expected("a bias pointer iff bias_kind != kNone",
                    "bias_kind=" + std::to_string(int(p.bias_kind)) + (p.bias ? " with" : " without") + " a pointer");
  }
  if (!(p.out_dtype == ScaledMmOutDtype::kBFloat16 || p.out_dtype == ScaledMmOutDtype::kFloat16)) {
    return expected("out_dtype bf16 or fp16", std::to_string(int(p.out_dtype)));
  }
  return "";
}

}  // namespace w8a8
