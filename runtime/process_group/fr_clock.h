// The flight recorder's clock: the time stamp counter where it is invariant
// (x86-64 with constant_tsc and nonstop_tsc), read in a few nanoseconds,
// and converted to CLOCK_REALTIME nanoseconds only when a dump or an
// observer asks; CLOCK_REALTIME itself elsewhere.
#pragma once

#include <cstdint>

namespace collie::fr_clock {

// Measures the counter's rate against CLOCK_REALTIME (about 1 ms, once per
// process; later calls return at once).
void calibrate();
// Ticks: opaque, monotonic; 0 is never returned.
int64_t now();
// CLOCK_REALTIME_COARSE nanoseconds (the kernel's tick: 1-4 ms), read in a
// few nanoseconds where the counter takes 15 in a VM.
int64_t coarse_now();
// A moment read on both clocks: converting several tick values with one
// anchor keeps their order and differences exact.
struct Anchor {
  int64_t ticks = 0, ns = 0;
};
Anchor anchor();
// CLOCK_REALTIME nanoseconds of a tick value now() returned.
int64_t to_realtime_ns(int64_t ticks, const Anchor& a);
inline int64_t to_realtime_ns(int64_t ticks) { return to_realtime_ns(ticks, anchor()); }

}  // namespace collie::fr_clock
