// Error-message helpers of the torch bindings (header-only, torch types):
// values printed as Python prints them, so a message built here is
// byte-identical to the one w8a8/validate.py builds.
#pragma once

#include <cctype>
#include <cstdio>
#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>

namespace w8a8 {

// Error messages are assembled with std::to_string / snprintf and handed to
// TORCH_CHECK as one string, never formatted through std::ostream here: with a
// toolchain that links libstdc++ statically into the extension (the H100
// image's /opt/gcc did), the extension's own copy of ostream's number
// formatting reads an uninitialised locale facet and segfaults (seen on the
// H100: a failing check printing an int64 crashed in _M_insert<long>).
namespace msg {

// A dtype as Python's str(torch.dtype) prints it: "torch.int8", "torch.float32".
inline std::string dtype_name(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Byte: return "torch.uint8";
    case c10::ScalarType::Char: return "torch.int8";
    case c10::ScalarType::Short: return "torch.int16";
    case c10::ScalarType::Int: return "torch.int32";
    case c10::ScalarType::Long: return "torch.int64";
    case c10::ScalarType::Half: return "torch.float16";
    case c10::ScalarType::Float: return "torch.float32";
    case c10::ScalarType::Double: return "torch.float64";
    case c10::ScalarType::ComplexHalf: return "torch.complex32";
    case c10::ScalarType::ComplexFloat: return "torch.complex64";
    case c10::ScalarType::ComplexDouble: return "torch.complex128";
    case c10::ScalarType::Bool: return "torch.bool";
    case c10::ScalarType::BFloat16: return "torch.bfloat16";
    default: break;
  }
  // The rest print as the C++ name in lower case (qint8, float8_e4m3fn, uint16, bits8, ...).
  std::string name = c10::toString(t);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return "torch." + name;
}

// A shape or stride list as "[2, 3]" ("[]" for a 0-d tensor), like validate.dims.
inline std::string dims(c10::IntArrayRef values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

inline std::string text(const char* s) { return s; }
inline std::string text(const std::string& s) { return s; }
inline std::string text(int v) { return std::to_string(v); }
inline std::string text(long v) { return std::to_string(v); }
inline std::string text(long long v) { return std::to_string(v); }
inline std::string text(unsigned long v) { return std::to_string(v); }
inline std::string text(c10::ScalarType t) { return dtype_name(t); }
inline std::string text(const c10::Device& d) { return d.str(); }  // "cuda:0", "cpu", as Python prints it
inline std::string text(c10::IntArrayRef values) { return dims(values); }
inline std::string text(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}

template <class... Args>
std::string join(const Args&... args) {
  std::string s;
  (s += ... += text(args));
  return s;
}

}  // namespace msg

// The checks of the ops: `op` is the public op's name ("scaled_mm", "linear", ...),
// the message reads "w8a8.<op>: <what>". The message is built only on failure.
//   W8A8_CHECK_VALUE: ValueError (the inputs break a rule of the op or of its kernels);
//   W8A8_CHECK_RUNTIME: RuntimeError (a kernel or launch failed).
#define W8A8_CHECK_VALUE(op, cond, ...) TORCH_CHECK_VALUE(cond, ::w8a8::msg::join("w8a8.", op, ": ", __VA_ARGS__))
#define W8A8_CHECK_RUNTIME(op, cond, ...) TORCH_CHECK(cond, ::w8a8::msg::join("w8a8.", op, ": ", __VA_ARGS__))

}  // namespace w8a8
