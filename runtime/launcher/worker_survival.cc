// WorkerGroup under --on-failure shrink or replace (on_failure.h): a
// worker's failure is an event, not the end of the attempt. The other
// workers are left alone; in replace mode a new process, with the dead
// one's environment plus COLLIE_REPLACEMENT=1, takes its place while
// --max-restarts allows, and a failure with no restart left ends the
// attempt as in stop mode (the failed worker is the root cause, the others
// are stopped). Each event is one timed line on stderr (failure_events.h).
#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include "collie/base/str_cat.h"
#include "collie/runtime/launcher/failure_events.h"
#include "collie/runtime/launcher/orphan_guard.h"
#include "collie/runtime/launcher/worker_group.h"

namespace collie::launcher {

void WorkerGroup::say_event(std::chrono::system_clock::time_point at,
                            const std::string& what) const {
  const std::string line = last_failure_
                               ? event_line(at, last_failure_->first, last_failure_->second, what)
                               : event_line(at, result_.start_time, "the start", what);
  write_all(STDERR_FILENO, line);
}

void WorkerGroup::survive_exits(bool* all_exited) {
  const auto running = [this] {
    return std::count_if(slots_.begin(), slots_.end(),
                         [](const Slot& s) { return !s.proc->exited(); });
  };
  for_each_new_exit(all_exited, [&](size_t i, Slot& slot) {
    const ExitStatus& status = slot.proc->status();
    const auto at = slot.proc->exit_time();
    const std::string who = describe_worker(slot.place, slot.proc->pid());
    // Exits that are no failure of the worker's own: a success, or a worker
    // collie-run stopped (a signal to the launcher, another node's failure,
    // no restart left).
    if (status.ok() || slot.signalled || stopping_) {
      const long left = running();
      say_event(at, str_cat("worker exited: ", who, " with ", status.describe(),
                            slot.signalled ? " (stopped by collie-run)" : "", "; ", left,
                            left == 1 ? " worker" : " workers", " still running"));
      return;
    }
    last_failure_.emplace(at, str_cat("rank ", slot.place.global_rank, " failed"));
    const std::string seen = str_cat("failure seen: ", who, " ended with ", status.describe());
    if (spec_.on_failure == OnFailure::kShrink) {
      const long left = running();
      say_event(at, str_cat(seen, "; ",
                            left == 0 ? std::string("no other worker is running")
                                      : str_cat("the ", left, " other worker",
                                                left == 1 ? " goes" : "s go", " on without it"),
                            " (--on-failure shrink)"));
      return;
    }
    const int used = spec_.restarts_used + result_.replacements;
    if (used < spec_.env.max_restarts) {
      say_event(at, str_cat(seen, "; replacing it (--on-failure replace, restart ", used + 1,
                            " of ", spec_.env.max_restarts, ")"));
      replace_worker(slot);
      *all_exited = false;
      return;
    }
    say_event(at, str_cat(seen, "; no restart left for a replacement (--max-restarts ",
                          spec_.env.max_restarts, "): stopping the other workers"));
    result_.outcome = AttemptOutcome::kFailed;
    result_.first_failure = static_cast<int>(i);
    stop_all(SIGTERM);
  });
}

void WorkerGroup::replace_worker(Slot& slot) {
  // The dead worker goes as at the end of an attempt: its last output, then
  // whatever it started, then the zombie.
  result_.losses.push_back(retire(slot));
  ++result_.replacements;

  slot.replacement = true;
  slot.recorded = false;
  slot.signalled = false;
  slot.was_stopped = false;
  open_streams(slot, /*append=*/true);
  spawn(slot);
  say_event(std::chrono::system_clock::now(),
            str_cat("replacement started: rank ", slot.place.global_rank, " (local rank ",
                    slot.place.local_rank, ") as pid ", slot.proc->pid(), " with ",
                    kReplacementVariable, "=1"));
}

void WorkerGroup::settle_survival() {
  if (result_.outcome != AttemptOutcome::kSucceeded) return;  // stopped, or no restart left
  std::vector<size_t> failed;
  bool any_ok = false;
  for (size_t i = 0; i < result_.workers.size(); ++i) {
    if (result_.workers[i].exit.ok())
      any_ok = true;
    else
      failed.push_back(i);
  }
  std::sort(failed.begin(), failed.end(), [this](size_t a, size_t b) {
    return result_.workers[a].exit_time < result_.workers[b].exit_time;
  });
  if (spec_.on_failure == OnFailure::kShrink) {
    for (size_t i : failed) result_.losses.push_back(result_.workers[i]);
    if (failed.empty() || any_ok) return;  // someone finished the job
  } else if (failed.empty()) {
    return;  // every worker's last process exited 0
  }
  // Nobody survived (shrink), or a worker failed without being replaced:
  // the attempt failed, its first failure the root cause.
  result_.outcome = AttemptOutcome::kFailed;
  result_.first_failure = static_cast<int>(failed.front());
}

}  // namespace collie::launcher
