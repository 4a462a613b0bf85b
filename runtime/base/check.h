// COLLIE_CHECK macros. A failed check throws (never aborts) with the text of
// the condition, both operands' values and the place, so that the message is
// enough to act on:
//
//   COLLIE_CHECK_EQ(recv_count, count, "from rank ", peer);
//   -> collie::Error: Check failed: recv_count == count (12 vs. 16): from rank 3
//      [collectives/ring.cc:88]
//
// COLLIE_CHECK* throw collie::Error (an internal invariant broke);
// COLLIE_ARG_CHECK* throw collie::InvalidArgument (the caller's input is bad).
#pragma once

#include <sstream>
#include <string>

#include "runtime/base/error.h"
#include "runtime/base/str_cat.h"

namespace collie::detail {

template <typename A, typename B>
std::string check_op_message(const char* expr, const A& a, const B& b) {
  std::ostringstream out;
  out << "Check failed: " << expr << " (" << a << " vs. " << b << ")";
  return out.str();
}

template <typename E, typename... Args>
[[noreturn]] void check_fail(const char* file, int line, const std::string& head,
                             const Args&... args) {
  std::string msg = head;
  if constexpr (sizeof...(Args) > 0) msg += ": " + str_cat(args...);
  msg += str_cat(" [", file, ":", line, "]");
  throw E(msg);
}

}  // namespace collie::detail

#define COLLIE_CHECK_IMPL_(E, cond, ...)                                                  \
  do {                                                                                    \
    if (!(cond)) [[unlikely]]                                                             \
      ::collie::detail::check_fail<E>(__FILE__, __LINE__,                                 \
                                      "Check failed: " #cond __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

#define COLLIE_CHECK_OP_IMPL_(E, op, a, b, ...)                                       \
  do {                                                                                \
    const auto& collie_a_ = (a);                                                      \
    const auto& collie_b_ = (b);                                                      \
    if (!(collie_a_ op collie_b_)) [[unlikely]]                                       \
      ::collie::detail::check_fail<E>(                                                \
          __FILE__, __LINE__,                                                         \
          ::collie::detail::check_op_message(#a " " #op " " #b, collie_a_, collie_b_) \
              __VA_OPT__(, ) __VA_ARGS__);                                            \
  } while (0)

#define COLLIE_CHECK(cond, ...) COLLIE_CHECK_IMPL_(::collie::Error, cond, __VA_ARGS__)
#define COLLIE_CHECK_EQ(a, b, ...) COLLIE_CHECK_OP_IMPL_(::collie::Error, ==, a, b, __VA_ARGS__)
#define COLLIE_CHECK_NE(a, b, ...) COLLIE_CHECK_OP_IMPL_(::collie::Error, !=, a, b, __VA_ARGS__)
#define COLLIE_CHECK_LT(a, b, ...) COLLIE_CHECK_OP_IMPL_(::collie::Error, <, a, b, __VA_ARGS__)
#define COLLIE_CHECK_LE(a, b, ...) COLLIE_CHECK_OP_IMPL_(::collie::Error, <=, a, b, __VA_ARGS__)
#define COLLIE_CHECK_GT(a, b, ...) COLLIE_CHECK_OP_IMPL_(::collie::Error, >, a, b, __VA_ARGS__)
#define COLLIE_CHECK_GE(a, b, ...) COLLIE_CHECK_OP_IMPL_(::collie::Error, >=, a, b, __VA_ARGS__)

#define COLLIE_ARG_CHECK(cond, ...) COLLIE_CHECK_IMPL_(::collie::InvalidArgument, cond, __VA_ARGS__)
#define COLLIE_ARG_CHECK_EQ(a, b, ...) \
  COLLIE_CHECK_OP_IMPL_(::collie::InvalidArgument, ==, a, b, __VA_ARGS__)
#define COLLIE_ARG_CHECK_NE(a, b, ...) \
  COLLIE_CHECK_OP_IMPL_(::collie::InvalidArgument, !=, a, b, __VA_ARGS__)
#define COLLIE_ARG_CHECK_LT(a, b, ...) \
  COLLIE_CHECK_OP_IMPL_(::collie::InvalidArgument, <, a, b, __VA_ARGS__)
#define COLLIE_ARG_CHECK_LE(a, b, ...) \
  COLLIE_CHECK_OP_IMPL_(::collie::InvalidArgument, <=, a, b, __VA_ARGS__)
#define COLLIE_ARG_CHECK_GT(a, b, ...) \
  COLLIE_CHECK_OP_IMPL_(::collie::InvalidArgument, >, a, b, __VA_ARGS__)
#define COLLIE_ARG_CHECK_GE(a, b, ...) \
  COLLIE_CHECK_OP_IMPL_(::collie::InvalidArgument, >=, a, b, __VA_ARGS__)
