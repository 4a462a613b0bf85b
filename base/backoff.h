// Backoff: the one retry pause of collie, capped exponential with jitter (the
// shape of c10d's ExponentialBackoffWithJitter). Every retry loop (store
// connects, data-connection connects, FileStore polling, the launcher's node
// barrier) uses it, so that ranks started together do not retry in lock-step
// against a server that is still coming up.
//
//   Backoff backoff({.initial = 10ms, .max = 1s});
//   while (!try_connect()) {
//     if (!backoff.sleep(deadline)) throw TimeoutError(...);
//   }
#pragma once

#include <chrono>
#include <random>

#include "collie/base/deadline.h"

namespace collie {

class Backoff {
 public:
  struct Options {
    std::chrono::microseconds initial = std::chrono::milliseconds(10);
    std::chrono::microseconds max = std::chrono::seconds(1);
    double multiplier = 2.0;
    // Each pause is drawn uniformly from [(1 - jitter) * p, p], where p is
    // the current un-jittered pause; 0 makes the pauses deterministic.
    double jitter = 0.5;
  };

  explicit Backoff(const Options& options);

  // The next pause (jittered), then grows the un-jittered one towards max.
  std::chrono::microseconds next_pause();
  // Starts again from `initial`.
  void reset() { current_ = options_.initial; }
  // Sleeps next_pause(), cut short at the deadline. Returns false, without
  // sleeping, when the deadline has already passed.
  bool sleep(const Deadline& deadline);

 private:
  Options options_;
  std::chrono::microseconds current_;
  std::minstd_rand rng_;
};

}  // namespace collie
