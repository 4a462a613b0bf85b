#include "runtime/process_group/fr_clock.h"

#include <time.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <string>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace collie::fr_clock {
namespace {

int64_t realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

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
double ns_per_tick = 1.0;
std::once_flag calibrated;

}  // namespace

void calibrate() {
  std::call_once(calibrated, [] {
#if defined(__x86_64__)
    if (!invariant_tsc()) return;
    const int64_t t0 = static_cast<int64_t>(__rdtsc());
    const int64_t n0 = realtime_ns();
    int64_t n1 = n0, t1 = t0;
    while (n1 - n0 < 1'000'000) {  // 1 ms: a rate good to ~1e-5
      t1 = static_cast<int64_t>(__rdtsc());
      n1 = realtime_ns();
    }
    if (t1 <= t0) return;
    ns_per_tick = static_cast<double>(n1 - n0) / static_cast<double>(t1 - t0);
    use_tsc.store(true, std::memory_order_release);
#endif
  });
}

int64_t now() {
#if defined(__x86_64__)
  if (use_tsc.load(std::memory_order_relaxed)) return static_cast<int64_t>(__rdtsc());
#endif
  return realtime_ns();
}

Anchor anchor() {
  Anchor a;
#if defined(__x86_64__)
  if (use_tsc.load(std::memory_order_acquire)) a.ticks = static_cast<int64_t>(__rdtsc());
#endif
  a.ns = realtime_ns();
  return a;
}

int64_t to_realtime_ns(int64_t ticks, const Anchor& a) {
  if (!use_tsc.load(std::memory_order_acquire)) return ticks;
  // Anchored at a recent moment, so the rate's error (~1e-5) scales with
  // the entry's age, not the process's: a second-old entry is off ~10 us.
  return a.ns - static_cast<int64_t>(static_cast<double>(a.ticks - ticks) * ns_per_tick);
}

}  // namespace collie::fr_clock
