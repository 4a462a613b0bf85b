#include "collie/runtime/launcher/failure_events.h"

#include <cstdio>

#include "collie/base/str_cat.h"
#include "collie/runtime/launcher/failure_summary.h"

namespace collie::launcher {

std::string event_line(std::chrono::system_clock::time_point at,
                       std::chrono::system_clock::time_point since, const std::string& origin,
                       const std::string& what) {
  // Signed: a worker's exit seen in the same pass as a failure may have
  // come a moment before it.
  char offset[32];
  std::snprintf(offset, sizeof offset, "%+.3fs", std::chrono::duration<double>(at - since).count());
  return str_cat("collie-run: [", format_utc(at), ", ", offset, " after ", origin, "] ", what,
                 "\n");
}

std::string describe_worker(const WorkerPlace& place, int pid) {
  return str_cat("rank ", place.global_rank, " (local rank ", place.local_rank, ", pid ", pid, ")");
}

std::string survived_line(const AttemptResult& r) {
  if (r.losses.empty()) return "";
  std::string lost;
  for (const WorkerResult& w : r.losses)
    lost += str_cat(lost.empty() ? "" : "; ", describe_worker(w.place, w.pid), " ended with ",
                    w.exit.describe(), " at ", format_utc(w.exit_time).substr(11, 12),
                    w.replacement ? " (itself a replacement)" : "");
  if (r.on_failure == OnFailure::kReplace)
    return str_cat("collie-run: the workers succeeded after ", r.replacements, " replacement",
                   r.replacements == 1 ? "" : "s", " (--on-failure replace); replaced: ", lost,
                   "\n");
  int ok = 0;
  for (const WorkerResult& w : r.workers) ok += w.exit.ok() ? 1 : 0;
  return str_cat("collie-run: the workers succeeded without ", r.losses.size(), " of ",
                 r.workers.size(), " (--on-failure shrink): ", ok, " exited 0; lost: ", lost, "\n");
}

}  // namespace collie::launcher
