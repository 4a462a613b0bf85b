// Timeouts and deadlines. collie has exactly one timeout sentinel, kUnsetTimeout
// ("use the default of whoever you are calling"), and one default,
// kDefaultTimeout (30 minutes, like torch). A blocking operation turns its
// Timeout into a Deadline once, at the top, and passes the Deadline down, so
// that nested waits share one budget instead of each restarting the clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace collie {

using Clock = std::chrono::steady_clock;
using Timeout = std::chrono::milliseconds;

// "Not set": resolve with resolve_timeout() against the callee's default.
inline constexpr Timeout kUnsetTimeout{-1};
// torch's default for collectives and the store.
inline constexpr Timeout kDefaultTimeout = std::chrono::minutes(30);

// Returns `timeout` unless it is kUnsetTimeout, else `fallback`.
constexpr Timeout resolve_timeout(Timeout timeout, Timeout fallback = kDefaultTimeout) {
  return timeout == kUnsetTimeout ? fallback : timeout;
}

// "1.5s", "250ms", "30min": for error messages.
std::string format_duration(std::chrono::nanoseconds d);

class Deadline {
 public:
  // A deadline `timeout` from now. kUnsetTimeout means kDefaultTimeout.
  explicit Deadline(Timeout timeout = kUnsetTimeout)
      : start_(Clock::now()), limit_(resolve_timeout(timeout)) {}

  static Deadline after(Timeout timeout) { return Deadline(timeout); }
  // A deadline `timeout` from its first use (start(), when(), expired(),
  // ...), not from now: for an operation that often finishes without
  // waiting, which then never reads the clock (25 ns a read on the 2-core
  // VMs, a tenth of a 4-byte all_reduce). The clock starts the first time
  // the operation waits for the clock's sake. Its first use writes it: keep
  // it on one thread (copies made before then start on their own).
  static Deadline from_first_use(Timeout timeout) { return Deadline(timeout, Clock::time_point{}); }

  Clock::time_point start() const {
    if (start_ == Clock::time_point{}) [[unlikely]]
      start_ = Clock::now();
    return start_;
  }
  Clock::time_point when() const { return start() + limit_; }
  Timeout limit() const { return limit_; }
  bool expired() const { return Clock::now() >= when(); }

  // Time left, never negative.
  std::chrono::milliseconds remaining() const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(when() - Clock::now());
    return left.count() > 0 ? left : std::chrono::milliseconds(0);
  }
  std::chrono::nanoseconds elapsed() const {
    const Clock::time_point from = start();
    return Clock::now() - from;
  }

  // "after 1.2s (limit 1s)": the tail every timeout message carries.
  std::string describe() const;

 private:
  Deadline(Timeout timeout, Clock::time_point start)
      : start_(start), limit_(resolve_timeout(timeout)) {}

  mutable Clock::time_point start_;  // time_point{}: not started (from_first_use)
  Timeout limit_;
};

}  // namespace collie
