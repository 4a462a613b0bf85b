#include "collie/runtime/process_group/fr_clock.h"

#include <time.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <string>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace collie::fr_clock {
namespace {

int64_t clock_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

int64_t realtime_ns() { return clock_ns(CLOCK_REALTIME); }

// The counter is used only when it ticks at one rate in every state and on
// every core; the flags say so.
bool invariant_tsc() {
#if defined(__x86_64__)
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    return line.find(" constant_tsc") != std::string::npos &&
           line.find(" nonstop_tsc") != std::string::npos;
  }
#endif
  return false;
}

std::atomic<bool> use_tsc{false};
// realtime = base_ns + (ticks - base_ticks) * ns_per_tick
std::atomic<double> ns_per_tick{1.0};
// The first calibration sample: later anchors refine the rate against it,
// over an ever longer baseline.
Anchor origin;
std::once_flag calibrated;

}  // namespace

#if defined(__x86_64__)
// Both clocks read at one moment: a counter read on each side of the
// clock's, kept only when nothing (a preemption, an interrupt) came between
// them, so that the pair is good to a few hundred nanoseconds.
static Anchor sample() {
  Anchor best;
  int64_t best_gap = INT64_MAX;
  for (int attempt = 0; attempt < 16; ++attempt) {
    const int64_t before = static_cast<int64_t>(__rdtsc());
    const int64_t ns = realtime_ns();
    const int64_t after = static_cast<int64_t>(__rdtsc());
    if (after - before < best_gap) {
      best_gap = after - before;
      best = {before + (after - before) / 2, ns};
    }
    if (best_gap < 2000) break;
  }
  return best;
}
#endif

void calibrate() {
  std::call_once(calibrated, [] {
#if defined(__x86_64__)
    if (!invariant_tsc()) return;
    const Anchor first = sample();
    while (realtime_ns() - first.ns < 2'000'000) {  // 2 ms: a rate good to ~1e-4 at worst
    }
    const Anchor second = sample();
    if (second.ticks <= first.ticks || second.ns <= first.ns) return;
    origin = first;
    ns_per_tick.store(static_cast<double>(second.ns - first.ns) /
                      static_cast<double>(second.ticks - first.ticks));
    use_tsc.store(true, std::memory_order_release);
#endif
  });
}

int64_t coarse_now() { return clock_ns(CLOCK_REALTIME_COARSE); }

int64_t now() {
#if defined(__x86_64__)
  if (use_tsc.load(std::memory_order_relaxed)) return static_cast<int64_t>(__rdtsc());
#endif
  return realtime_ns();
}

Anchor anchor() {
#if defined(__x86_64__)
  if (use_tsc.load(std::memory_order_acquire)) {
    const Anchor a = sample();
    if (a.ns - origin.ns > 1'000'000'000)  // a second or more: a better rate
      ns_per_tick.store(static_cast<double>(a.ns - origin.ns) /
                        static_cast<double>(a.ticks - origin.ticks));
    return a;
  }
#endif
  return {0, realtime_ns()};
}

int64_t to_realtime_ns(int64_t ticks, const Anchor& a) {
  if (!use_tsc.load(std::memory_order_acquire)) return ticks;
  // Anchored at a recent moment, so the rate's error (~1e-5) scales with
  // the entry's age, not the process's: a second-old entry is off ~10 us.
  return a.ns - static_cast<int64_t>(static_cast<double>(a.ticks - ticks) * ns_per_tick.load());
}

}  // namespace collie::fr_clock
