// The events collie-run prints with --on-failure shrink or replace, when a
// worker's failure no longer ends the attempt: one line each on stderr,
// with the wall-clock time and the time since the last failure, so that a
// user reading the log sees how long the survivors took:
//
//   collie-run: [2026-12-06 16:30:01.234 UTC, +0.000s after rank 1 failed] failure seen: ...
//   collie-run: [2026-12-06 16:30:01.236 UTC, +0.002s after rank 1 failed] replacement started: ...
//   collie-run: [2026-12-06 16:30:02.871 UTC, +1.637s after rank 1 failed] worker exited: ...
//
// Before any failure the time is counted from the start of the workers.
#pragma once

#include <chrono>
#include <string>

#include "collie/runtime/launcher/worker_group.h"

namespace collie::launcher {

// One event line, newline included. `origin` names what `since` is ("rank
// 1 failed", "the start").
std::string event_line(std::chrono::system_clock::time_point at,
                       std::chrono::system_clock::time_point since, const std::string& origin,
                       const std::string& what);

// "rank 1 (local rank 1, pid 4242)"
std::string describe_worker(const WorkerPlace& place, int pid);

// What the agent says when an attempt succeeded although workers failed
// (result.losses not empty): which ones, how, and when; empty otherwise.
std::string survived_line(const AttemptResult& result);

}  // namespace collie::launcher
