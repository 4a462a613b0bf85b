// COLLIE_CHECK macros. A failed check throws (never aborts).
//
// COLLIE_CHECK* guard collie's own invariants and throw collie::Error with the
// condition, both operands' values and the place in the source (relative to
// the source root), so that a bug report is enough to find it:
//
//   COLLIE_CHECK_EQ(recv_count, count, "from rank ", peer);
//   -> collie::Error: Check failed: recv_count == count (12 vs. 16): from rank 3
//      [collectives/all_reduce_ring.cc:88]
//
// COLLIE_ARG_CHECK* guard the caller's input and throw collie::InvalidArgument
// whose message is the text the call site gives (which names the culprit),
// with no source location: a user who passed a bad rank needs to read what was
// wrong with it, not where collie noticed.
//
//   COLLIE_ARG_CHECK(root < size, "broadcast: root ", root, " is not a rank of ", size);
//   -> collie::InvalidArgument: broadcast: root 4 is not a rank of 4
#pragma once

#include <sstream>
#include <string>
#include <string_view>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie::detail {

template <typename A, typename B>
std::string check_op_message(const char* expr, const A& a, const B& b) {
  std::ostringstream out;
  out << expr << " (" << a << " vs. " << b << ")";
  return out.str();
}

template <typename E, typename... Args>
[[noreturn]] void check_fail(const char* file, int line, const std::string& head,
                             const Args&... args) {
  std::string msg = head;
  if constexpr (sizeof...(Args) > 0) msg += ": " + str_cat(args...);
  // The build maps the source root out of __FILE__; a build that names sources
  // relative to its build folder (or a compiler cache that rewrites paths)
  // leaves "../" in front, which says nothing to a reader.
  std::string_view where(file);
  while (where.starts_with("../")) where.remove_prefix(3);
  msg += str_cat(" [", where, ":", line, "]");
  throw E(msg);
}

// COLLIE_ARG_CHECK: the call site's text; `cond` only when there is none.
template <typename... Args>
[[noreturn]] void arg_check_fail(const char* cond, const Args&... args) {
  if constexpr (sizeof...(Args) > 0)
    throw InvalidArgument(str_cat(args...));
  else
    throw InvalidArgument(str_cat("invalid argument: expected ", cond));
}

// COLLIE_ARG_CHECK_OP: the call site's text, then the comparison that failed
// with both values: "data for shape [2, 3] (expected a == b, got 5 vs. 6)".
template <typename A, typename B, typename... Args>
[[noreturn]] void arg_check_op_fail(const char* expr, const A& a, const B& b, const Args&... args) {
  std::ostringstream out;
  if constexpr (sizeof...(Args) > 0)
    out << str_cat(args...) << " (expected " << expr << ", got " << a << " vs. " << b << ")";
  else
    out << "invalid argument: expected " << expr << ", got " << a << " vs. " << b;
  throw InvalidArgument(out.str());
}

}  // namespace collie::detail

#define COLLIE_CHECK_IMPL_(E, cond, ...)                                                  \
  do {                                                                                    \
    if (!(cond)) [[unlikely]]                                                             \
      ::collie::detail::check_fail<E>(__FILE__, __LINE__,                                 \
                                      "Check failed: " #cond __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

#define COLLIE_CHECK_OP_IMPL_(E, op, a, b, ...)                                           \
  do {                                                                                    \
    const auto& collie_a_ = (a);                                                          \
    const auto& collie_b_ = (b);                                                          \
    if (!(collie_a_ op collie_b_)) [[unlikely]]                                           \
      ::collie::detail::check_fail<E>(                                                    \
          __FILE__, __LINE__,                                                             \
          "Check failed: " +                                                              \
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

#define COLLIE_ARG_CHECK(cond, ...)                                       \
  do {                                                                    \
    if (!(cond)) [[unlikely]]                                             \
      ::collie::detail::arg_check_fail(#cond __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

#define COLLIE_ARG_CHECK_OP_IMPL_(op, a, b, ...)                                 \
  do {                                                                           \
    const auto& collie_a_ = (a);                                                 \
    const auto& collie_b_ = (b);                                                 \
    if (!(collie_a_ op collie_b_)) [[unlikely]]                                  \
      ::collie::detail::arg_check_op_fail(#a " " #op " " #b, collie_a_,          \
                                          collie_b_ __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

#define COLLIE_ARG_CHECK_EQ(a, b, ...) COLLIE_ARG_CHECK_OP_IMPL_(==, a, b, __VA_ARGS__)
#define COLLIE_ARG_CHECK_NE(a, b, ...) COLLIE_ARG_CHECK_OP_IMPL_(!=, a, b, __VA_ARGS__)
#define COLLIE_ARG_CHECK_LT(a, b, ...) COLLIE_ARG_CHECK_OP_IMPL_(<, a, b, __VA_ARGS__)
#define COLLIE_ARG_CHECK_LE(a, b, ...) COLLIE_ARG_CHECK_OP_IMPL_(<=, a, b, __VA_ARGS__)
#define COLLIE_ARG_CHECK_GT(a, b, ...) COLLIE_ARG_CHECK_OP_IMPL_(>, a, b, __VA_ARGS__)
#define COLLIE_ARG_CHECK_GE(a, b, ...) COLLIE_ARG_CHECK_OP_IMPL_(>=, a, b, __VA_ARGS__)
