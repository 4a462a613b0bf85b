// The timeline: a trace of what every rank of a job did, as one Chrome
// trace / Perfetto JSON file (the Trace Event Format) per job, opened in
// https://ui.perfetto.dev or chrome://tracing:
//
//   * every collective of every group, one track per group, from the flight
//     recorder's observer (flight_recorder.h): the op, its group, sequence
//     number, bytes, algorithm and transport;
//   * what the program adds with span(): DDP's backward and each bucket's
//     all_reduce (nn/ddp.h), the training step (samples/blip_train,
//     collie_torch's step_span).
//
// Each rank is one process in the viewer (pid = rank, named "rank N").
//
//   timeline::start("trace.json", rank, world, store);  // collective
//   ... timeline::span("step", "step 3", t0, timeline::now_ns(), {{"epoch", 1}});
//   timeline::finish();  // collective: rank 0 writes trace.json
//
// init_process_group starts it when COLLIE_TRACE=FILE is set and
// destroy_process_group finishes it (runtime/api/distributed.h).
//
// Clocks. Spans are stamped with CLOCK_REALTIME. Ranks on one host share
// it; across hosts they do not, so start() and finish() measure each rank's
// offset to rank 0 through the store: rank 0 sets a key, the rank answers
// with its clock as soon as its wait for the key returns, and rank 0 takes
// the round trip's midpoint, of the fastest of a few round trips (NTP's
// estimate). finish() writes each event shifted by the offset interpolated
// between the two measurements (so a drift between them is removed too).
// The error is at most half the fastest round trip (tens of microseconds on
// loopback, the store's round trip between hosts); the file records each
// rank's offsets and round trips (otherData).
//
// Merge. finish() serialises this rank's events and hands them to rank 0
// through the store (in chunks under the store's value limit); rank 0
// writes the one file, so that no shared file system is needed, and says
// so through the store. A rank whose part does not arrive within 2 minutes
// is left out (rank 0 names it); a rank that does not hear from rank 0 in
// that time (it died) writes its own part to <path>.rank<N>.json; without
// a store each process writes its own file.
//
// Cost. Recording a span takes a lock and appends to a vector (well under
// a microsecond); nothing is written until finish(). Off, span() is one
// relaxed load (docs/performance.md, "Timeline (trace) cost").
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "collie/rendezvous/store.h"

namespace collie::timeline {

// CLOCK_REALTIME in nanoseconds: the clock of spans (and of the flight
// recorder's time stamps).
int64_t now_ns();

// Starts recording this process's events, as rank `rank` of `world_size`.
// With a store and more than one rank it is collective: every rank must
// call it (it measures the clock offsets). Rank 0 writes `path` at
// finish(); without a store every rank writes `path` itself (a world of
// one) or `path`.rank<N>.json. A second start() before finish() is ignored.
void start(const std::string& path, int rank, int world_size,
           std::shared_ptr<Store> store = nullptr);

// Whether a timeline is recording (one relaxed load).
bool enabled();

// One numeric argument of a span ("bucket", 3).
using Arg = std::pair<const char*, int64_t>;

// Records a span [start_ns, end_ns] (CLOCK_REALTIME, now_ns()) named
// `name` on the track `track` (one row of the rank; spans on one track
// should nest, as a thread's calls do). `cat` is the Trace Event Format's
// category. Thread-safe; does nothing when not enabled(). At most 4 args.
// The keys (and `cat`) must outlive finish(): string literals.
void span(std::string_view track, std::string_view name, int64_t start_ns, int64_t end_ns,
          std::span<const Arg> args, const char* cat = "user");
inline void span(std::string_view track, std::string_view name, int64_t start_ns, int64_t end_ns,
                 std::initializer_list<Arg> args = {}, const char* cat = "user") {
  span(track, name, start_ns, end_ns, std::span<const Arg>(args.begin(), args.size()), cat);
}

// A span from `start_ns` to the completion of the all_reduce it launched:
// this rank's first all_reduce of `bytes` bytes (on any group) that ended
// after `start_ns`, as the flight recorder saw it complete; `end_ns` (when
// the caller saw it complete) if none did, or if that is earlier. DDP's
// buckets: the Work says only that it has completed, not when.
void span_until_all_reduce(std::string_view track, std::string_view name, int64_t start_ns,
                           int64_t end_ns, int64_t bytes, std::initializer_list<Arg> args = {},
                           const char* cat = "user");

// Stops recording and writes the trace (see the merge above). Collective
// like start(); ranks other than 0 return once rank 0 wrote the file.
// Returns the file this rank wrote ("" on ranks that only sent their part,
// or when nothing was recording). Never throws: a failure is logged and
// this rank's part written to `path`.rank<N>.json instead.
std::string finish();

// The offset of a rank's clock to rank 0's, from round trips rank 0
// timed: t0 when it asked, t2 when the answer came (rank 0's clock), t1
// the rank's clock when it answered.
struct ClockSample {
  int64_t t0 = 0, t1 = 0, t2 = 0;
};
struct ClockOffset {
  int64_t offset_ns = 0;  // the rank's clock minus rank 0's
  int64_t rtt_ns = 0;     // of the sample taken; the error is at most rtt_ns / 2
  int64_t at_ns = 0;      // when, on the rank's clock
};
// The estimate from the sample with the shortest round trip:
// offset = t1 - (t0 + t2) / 2.
ClockOffset estimate_offset(std::span<const ClockSample> samples);
// A time `t` of the rank's clock on rank 0's clock: shifted by the offset
// interpolated linearly between `begin` and `end` (measured at start and at
// finish; `end` with at_ns 0, or at begin's time, means "begin's only").
int64_t to_reference_clock(int64_t t, const ClockOffset& begin, const ClockOffset& end);

}  // namespace collie::timeline
