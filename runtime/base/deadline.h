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

  Clock::time_point start() const { return start_; }
  Clock::time_point when() const { return start_ + limit_; }
  Timeout limit() const { return limit_; }
  bool expired() const { return Clock::now() >= when(); }

  // Time left, never negative.
  std::chrono::milliseconds remaining() const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(when() - Clock::now());
    return left.count() > 0 ? left : std::chrono::milliseconds(0);
  }
  std::chrono::nanoseconds elapsed() const { return Clock::now() - start_; }

  // "after 1.2s (limit 1s)": the tail every timeout message carries.
  std::string describe() const;

 private:
  Clock::time_point start_;
  Timeout limit_;
};

}  // namespace collie
