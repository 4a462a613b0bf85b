// Shared by the fuzz drivers in this folder: how a driver states a promise
// of the code under test. A broken promise prints what broke and traps, which
// libFuzzer reports as a crash (with the input saved) and the corpus replay
// (replay_main.cc) reports as a failed test. Errors the parser is allowed to
// throw are caught by each driver; anything else escapes and is a crash too.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace collie::fuzz {

[[noreturn]] inline void broken(const std::string& target, const std::string& what) {
  std::fprintf(stderr, "%s: broken promise: %s\n", target.c_str(), what.c_str());
  std::fflush(stderr);
  __builtin_trap();
}

inline void check(bool ok, const char* target, const std::string& what) {
  if (!ok) broken(target, what);
}

// The handshakes' little-endian 32-bit fields.
inline uint32_t u32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
inline void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace collie::fuzz
