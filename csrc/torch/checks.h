// The input checks of every op of the extensions, written once.
//
// First the rules of the public ops, as w8a8/validate.py states them: the same
// rules in the same order with the same words, raised as ValueError, so a bad
// input gives one error whichever kernel the dispatcher picked. Of the "must be a
// tensor" rules only None is left to check: the schemas refuse other non-tensors,
// but hand None to a `Tensor` argument as an undefined tensor. Then what the kernels can take
// (bf16 / fp16 output, 16-byte rows, 32-bit sizes, the compute capability),
// which only a caller that forces a kernel can break: the Python router sends
// such operands elsewhere.
//
// The checks read dtypes, shapes, strides and devices, never data; a message
// is built only when its check fails.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>
#include <c10/util/Optional.h>

#include "torch/messages.h"

namespace w8a8::checks {

// validate.FLOAT_DTYPES, OUT_DTYPES and ZERO_POINT_DTYPES, as names() joins them.
constexpr const char* kFloatDtypes = "torch.float16, torch.bfloat16, torch.float32";
constexpr const char* kOutDtypes = "torch.bfloat16, torch.float16, torch.float32";
constexpr const char* kZeroPointDtypes = "torch.int8, torch.int32";

// validate.MAX_K: the int32 accumulator holds K products of int8 codes, each at most
// 128 * 128 = 2^14 in magnitude, so K <= (2^31 - 1) / 2^14 can never overflow it.
constexpr int64_t kMaxK = 2147483647 / (128 * 128);

inline void k_fits_int32(const char* op, int64_t k) {
  W8A8_CHECK_VALUE(op, k <= kMaxK, "K must be at most ", kMaxK,
                   " (K products of 128 x 128 must fit the int32 accumulator), got K = ", k);
}

inline bool is_float_dtype(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat; }
inline bool is_zero_point_dtype(at::ScalarType t) { return t == at::kChar || t == at::kInt; }

// ---------------------------------------------------------------------------
// The rules of validate.py, helper for helper.
// ---------------------------------------------------------------------------

// validate._tensor for a `Tensor` argument: None arrives as an undefined tensor.
inline void tensor(const char* op, const char* name, const at::Tensor& t) {
  W8A8_CHECK_VALUE(op, t.defined(), name, " must be a tensor, got NoneType");
}

inline void unit_k_stride(const char* op, const char* name, const at::Tensor& t) {
  W8A8_CHECK_VALUE(op, t.size(-1) <= 1 || t.stride(-1) == 1, name,
                   " must have unit stride along its last dim (K); call .contiguous() first, got strides ",
                   t.strides(), " for shape ", t.sizes());
}

inline void scale_vector(const char* op, const char* name, const at::Tensor& t, int64_t length,
                         const char* length_name) {
  W8A8_CHECK_VALUE(op, t.scalar_type() == at::kFloat, name, " must be torch.float32, got ", t.scalar_type());
  W8A8_CHECK_VALUE(op, t.numel() == 1 || t.numel() == length, name, " must hold 1 or ", length_name, " = ", length,
                   " values, got shape ", t.sizes());
  W8A8_CHECK_VALUE(op, t.numel() == 1 || t.is_contiguous(), name, " must be contiguous, got strides ", t.strides(),
                   " for shape ", t.sizes());
}

inline void bias(const char* op, const at::Tensor& t, int64_t n, at::ScalarType out_dtype) {
  W8A8_CHECK_VALUE(op, t.scalar_type() == at::kFloat || t.scalar_type() == out_dtype,
                   "bias must be torch.float32 or the output dtype ", out_dtype, ", got ", t.scalar_type());
  W8A8_CHECK_VALUE(op, t.dim() == 1 && t.size(0) == n, "bias must be [N] = [", n, "], got shape ", t.sizes());
  W8A8_CHECK_VALUE(op, t.numel() <= 1 || t.stride(0) == 1, "bias must be contiguous, got strides ", t.strides());
}

inline void same_device(const char* op, const at::Device& device, const char* anchor, const char* name,
                        const at::Tensor* t) {
  if (t != nullptr) {
    W8A8_CHECK_VALUE(op, t->device() == device, name, " must be on ", device, " like ", anchor, ", got ",
                     t->device());
  }
}

inline const at::Tensor* optional_ptr(const c10::optional<at::Tensor>& t) { return t.has_value() ? &*t : nullptr; }

inline void float_input(const char* op, const at::Tensor& x) {
  tensor(op, "x", x);
  W8A8_CHECK_VALUE(op, is_float_dtype(x.scalar_type()), "x must be one of ", kFloatDtypes, ", got ", x.scalar_type());
  W8A8_CHECK_VALUE(op, x.dim() >= 1, "x must have at least 1 dimension [..., K], got shape ", x.sizes());
}

// validate.quantize_per_token: x [..., K] float, K >= 1, unit stride along K.
inline void quantize_per_token(const at::Tensor& x) {
  constexpr const char* op = "quantize_per_token";
  float_input(op, x);
  W8A8_CHECK_VALUE(op, x.size(-1) >= 1, "x's last dim (K) must be >= 1, got shape ", x.sizes());
  unit_k_stride(op, "x", x);
}

// validate.quantize_static: x [..., K] float (K = 0 allowed), unit stride along K; scale
// one float32 value and zero_point one int8 / int32 value (or None), both on x's device.
inline void quantize_static(const at::Tensor& x, const at::Tensor& scale, const c10::optional<at::Tensor>& zero_point) {
  constexpr const char* op = "quantize_static";
  float_input(op, x);
  unit_k_stride(op, "x", x);
  tensor(op, "scale", scale);
  W8A8_CHECK_VALUE(op, scale.scalar_type() == at::kFloat, "scale must be torch.float32, got ", scale.scalar_type());
  W8A8_CHECK_VALUE(op, scale.numel() == 1, "scale must hold one value, got shape ", scale.sizes());
  if (zero_point.has_value()) {
    const at::Tensor& zp = *zero_point;
    W8A8_CHECK_VALUE(op, is_zero_point_dtype(zp.scalar_type()), "zero_point must be one of ", kZeroPointDtypes,
                     ", got ", zp.scalar_type());
    W8A8_CHECK_VALUE(op, zp.numel() == 1, "zero_point must hold one value, got shape ", zp.sizes());
  }
  same_device(op, x.device(), "x", "scale", &scale);
  same_device(op, x.device(), "x", "zero_point", optional_ptr(zero_point));
}

// validate.scaled_mm: a int8 [M, K], b int8 [N, K], unit stride along K; a_scale float32
// with 1 or M values, b_scale float32 with 1 or N values, both contiguous; bias None or
// [N] in float32 or out_dtype, contiguous; everything on a's device.
inline void scaled_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale, const at::Tensor& b_scale,
                      const c10::optional<at::Tensor>& bias_, at::ScalarType out_dtype) {
  constexpr const char* op = "scaled_mm";
  tensor(op, "a", a);
  tensor(op, "b", b);
  tensor(op, "a_scale", a_scale);
  tensor(op, "b_scale", b_scale);
  W8A8_CHECK_VALUE(op, a.scalar_type() == at::kChar, "a must be torch.int8, got ", a.scalar_type());
  W8A8_CHECK_VALUE(op, b.scalar_type() == at::kChar, "b must be torch.int8, got ", b.scalar_type());
  W8A8_CHECK_VALUE(op, a.dim() == 2, "a must be 2-D [M, K], got shape ", a.sizes());
  W8A8_CHECK_VALUE(op, b.dim() == 2, "b must be 2-D [N, K] (the nn.Linear weight layout), got shape ", b.sizes());
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  W8A8_CHECK_VALUE(op, b.size(1) == k, "b must be [N, K] with K = ", k, " (a's K), got shape ", b.sizes());
  k_fits_int32(op, k);
  W8A8_CHECK_VALUE(op, out_dtype == at::kBFloat16 || out_dtype == at::kHalf || out_dtype == at::kFloat,
                   "out_dtype must be one of ", kOutDtypes, ", got ", out_dtype);
  scale_vector(op, "a_scale", a_scale, m, "M");
  scale_vector(op, "b_scale", b_scale, n, "N");
  if (bias_.has_value()) bias(op, *bias_, n, out_dtype);
  const at::Device device = a.device();
  same_device(op, device, "a", "b", &b);
  same_device(op, device, "a", "a_scale", &a_scale);
  same_device(op, device, "a", "b_scale", &b_scale);
  same_device(op, device, "a", "bias", optional_ptr(bias_));
  unit_k_stride(op, "a", a);
  unit_k_stride(op, "b", b);
}

// validate.linear: x [..., K] float (any strides); weight int8 [N, K] with unit stride
// along K; weight_scale float32 with 1 or N values; bias None or [N] in float32 or x's
// dtype; input_scale None (dynamic) or one float32 value (static); input_zero_point None
// or one int8 / int32 value, only with input_scale; everything on x's device.
inline void linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_scale,
                   const c10::optional<at::Tensor>& bias_, const c10::optional<at::Tensor>& input_scale,
                   const c10::optional<at::Tensor>& input_zero_point) {
  constexpr const char* op = "linear";
  float_input(op, x);
  tensor(op, "weight", weight);
  tensor(op, "weight_scale", weight_scale);
  W8A8_CHECK_VALUE(op, weight.scalar_type() == at::kChar, "weight must be torch.int8, got ", weight.scalar_type());
  W8A8_CHECK_VALUE(op, weight.dim() == 2, "weight must be 2-D [N, K], got shape ", weight.sizes());
  const int64_t n = weight.size(0), k = weight.size(1);
  W8A8_CHECK_VALUE(op, x.size(-1) == k, "x must be [..., K] with K = ", k, " (weight's K), got shape ", x.sizes());
  k_fits_int32(op, k);
  scale_vector(op, "weight_scale", weight_scale, n, "N");
  if (bias_.has_value()) bias(op, *bias_, n, x.scalar_type());
  if (input_scale.has_value()) {
    const at::Tensor& s = *input_scale;
    W8A8_CHECK_VALUE(op, s.scalar_type() == at::kFloat, "input_scale must be torch.float32, got ", s.scalar_type());
    W8A8_CHECK_VALUE(op, s.numel() == 1, "input_scale must hold one value, got shape ", s.sizes());
  }
  if (input_zero_point.has_value()) {
    const at::Tensor& zp = *input_zero_point;
    W8A8_CHECK_VALUE(op, input_scale.has_value(), "input_zero_point needs input_scale (static activations), got None");
    W8A8_CHECK_VALUE(op, is_zero_point_dtype(zp.scalar_type()), "input_zero_point must be one of ", kZeroPointDtypes,
                     ", got ", zp.scalar_type());
    W8A8_CHECK_VALUE(op, zp.numel() == 1, "input_zero_point must hold one value, got shape ", zp.sizes());
  }
  const at::Device device = x.device();
  same_device(op, device, "x", "weight", &weight);
  same_device(op, device, "x", "weight_scale", &weight_scale);
  same_device(op, device, "x", "bias", optional_ptr(bias_));
  same_device(op, device, "x", "input_scale", optional_ptr(input_scale));
  same_device(op, device, "x", "input_zero_point", optional_ptr(input_zero_point));
  unit_k_stride(op, "weight", weight);
}

// ---------------------------------------------------------------------------
// What the kernels can take. `family` names the kernels in the message
// ("sm90", "sm80"), `mover` what moves their 16-byte rows ("TMA", "cp.async").
// ---------------------------------------------------------------------------

struct GemmKernels {
  const char* family;
  const char* mover;
};
constexpr GemmKernels kSm90Kernels{"sm90", "TMA"};
constexpr GemmKernels kSm80Kernels{"sm80", "cp.async"};

// The rows a kernel op allocates its activation codes with (w8a8/rows.py pads them for the
// sm90 GEMM): `rows` 0 means x's own m; otherwise it must hold them. `what` names x's rows
// in the message ("tokens", "rows"). Returns the rows to allocate.
inline int64_t allocated_rows(const char* op, int64_t rows, int64_t m, const char* what) {
  W8A8_CHECK_VALUE(op, rows == 0 || rows >= m, "rows (the rows the codes are allocated with) must be 0 or at least the ",
                   m, " ", what, " of x, got ", rows);
  return rows == 0 ? m : rows;
}

// Row pitch of a 2-D operand as the kernels read it. A single-row tensor's outer
// stride is never used to step (PyTorch may report any value for a size-1 dim), so it
// is read as the packed pitch, rounded up to the 16-byte rule.
inline int64_t row_pitch(const at::Tensor& t) {
  if (t.size(0) == 1) return (t.size(1) + 15) / 16 * 16;
  return t.stride(0);
}

// A 16-byte aligned data pointer and row pitch (a multiple of 16 int8 that is >= K) for
// the int8 operand `name` of a GEMM (unit stride along K is a rule of the op).
inline void rows_16_bytes(const char* op, const GemmKernels& kernels, const char* name, const at::Tensor& t,
                          int64_t k) {
  W8A8_CHECK_VALUE(op, reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, "the ", kernels.family, " kernels need ",
                   name, "'s data pointer 16-byte aligned (", kernels.mover, "), got ", t.data_ptr(),
                   " (storage offset ", t.storage_offset(), ")");
  const int64_t pitch = row_pitch(t);
  W8A8_CHECK_VALUE(op, pitch >= k && pitch % 16 == 0, "the ", kernels.family, " kernels need ", name,
                   "'s row stride to be a multiple of 16 and >= K (16-byte ", kernels.mover,
                   " rows), got strides ", t.strides(), " for shape ", t.sizes());
}

// The GEMM kernels' limits, after the op's rules: bf16 / fp16 out, K % 16, N % 8, 16-byte
// rows of `a` (null where the op allocates it, as linear does) and `b`, 32-bit sizes.
// `out_what` names the output dtype in the message ("out_dtype", "output dtype").
inline void gemm_kernels(const char* op, const GemmKernels& kernels, at::ScalarType out_dtype, const char* out_what,
                         int64_t m, int64_t n, int64_t k, const char* a_name, const at::Tensor* a,
                         const char* b_name, const at::Tensor& b) {
  W8A8_CHECK_VALUE(op, out_dtype == at::kBFloat16 || out_dtype == at::kHalf, "the ", kernels.family,
                   " kernels write torch.bfloat16 or torch.float16, got ", out_what, " ", out_dtype);
  W8A8_CHECK_VALUE(op, k % 16 == 0, "the ", kernels.family, " kernels need K % 16 == 0 (16-byte ", kernels.mover,
                   " rows), got K = ", k);
  W8A8_CHECK_VALUE(op, n % 8 == 0, "the ", kernels.family, " kernels need N % 8 == 0 (16-byte output rows), got N = ",
                   n);
  if (a != nullptr) rows_16_bytes(op, kernels, a_name, *a, k);
  rows_16_bytes(op, kernels, b_name, b, k);
  const int64_t int_max = 2147483647;
  W8A8_CHECK_VALUE(op, m <= int_max && n <= int_max && k <= int_max, "the ", kernels.family,
                   " kernels need M, N, K < 2^31, got M = ", m, ", N = ", n, ", K = ", k);
}

// The compute capability a library's kernels run on. `who` names them ("the sm90
// kernels", "the CUDA quantizers"), `need` the capabilities in words.
inline void capability(const char* op, const char* who, bool ok, const char* need, int major, int minor,
                       const at::Device& device) {
  W8A8_CHECK_VALUE(op, ok, who, " need compute capability ", need, ", got ", major, ".", minor, " on ", device);
}

}  // namespace w8a8::checks
