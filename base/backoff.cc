#include "collie/base/backoff.h"

#include <unistd.h>

#include <algorithm>
#include <thread>

namespace collie {

Backoff::Backoff(const Options& options)
    : options_(options),
      current_(options.initial),
      rng_(std::random_device{}() ^ static_cast<unsigned>(::getpid())) {
  options_.jitter = std::clamp(options_.jitter, 0.0, 1.0);
  options_.multiplier = std::max(options_.multiplier, 1.0);
}

std::chrono::microseconds Backoff::next_pause() {
  const int64_t hi = current_.count();
  const int64_t lo = static_cast<int64_t>(static_cast<double>(hi) * (1.0 - options_.jitter));
  std::uniform_int_distribution<int64_t> dist(std::min(lo, hi), hi);
  const std::chrono::microseconds pause(dist(rng_));
  const double grown = static_cast<double>(hi) * options_.multiplier;
  current_ = std::chrono::microseconds(
      static_cast<int64_t>(std::min(grown, static_cast<double>(options_.max.count()))));
  return pause;
}

bool Backoff::sleep(const Deadline& deadline) {
  if (deadline.expired()) return false;
  const auto left =
      std::chrono::duration_cast<std::chrono::microseconds>(deadline.when() - Clock::now());
  std::this_thread::sleep_for(std::min(next_pause(), std::max(left, std::chrono::microseconds(0))));
  return true;
}

}  // namespace collie
