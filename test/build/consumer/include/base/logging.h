// The consumer's own base/logging.h: many trees (Chromium's, glog-style ones)
// have a header at this path. It is first on the consumer's include path, so
// a collie header that included "base/logging.h" would get this one and fail
// to compile (it defines no collie::log). collie's headers include
// "collie/base/logging.h".
#pragma once

#include <cstdio>

namespace consumer {
inline void log_line(const char* text) { std::printf("consumer log: %s\n", text); }
}  // namespace consumer

#define LOG(text) consumer::log_line(text)
