// Error-message helpers of the torch bindings (header-only, torch types).
#pragma once

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
inline std::string text(const char* s) { return s; }
inline std::string text(const std::string& s) { return s; }
inline std::string text(int v) { return std::to_string(v); }
inline std::string text(long v) { return std::to_string(v); }
inline std::string text(long long v) { return std::to_string(v); }
inline std::string text(unsigned long v) { return std::to_string(v); }
inline std::string text(c10::ScalarType t) { return c10::toString(t); }
inline std::string text(const c10::Device& d) { return d.str(); }
inline std::string text(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}
inline std::string text(c10::IntArrayRef values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}
template <class... Args>
std::string join(const Args&... args) {
  std::string s;
  (s += ... += text(args));
  return s;
}
}  // namespace msg

// TORCH_CHECK with the message built by msg::join, prefixed with the op's name.
#define W8A8_OP_CHECK(op, cond, ...) TORCH_CHECK(cond, ::w8a8::msg::join(op, ": ", __VA_ARGS__))

}  // namespace w8a8
