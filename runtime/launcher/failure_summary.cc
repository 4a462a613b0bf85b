#include "collie/runtime/launcher/failure_summary.h"

#include <cstdio>
#include <ctime>

#include "collie/base/str_cat.h"

namespace collie::launcher {
namespace {

constexpr const char* kRule =
    "==============================================================================\n";

std::string pad(std::string s, size_t width, bool right = false) {
  if (s.size() >= width) return s;
  std::string fill(width - s.size(), ' ');
  return right ? fill + s : s + fill;
}

std::string seconds_since(std::chrono::system_clock::time_point from,
                          std::chrono::system_clock::time_point to) {
  double s = std::chrono::duration<double>(to - from).count();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fs", s);
  return buf;
}

}  // namespace

std::string format_utc(std::chrono::system_clock::time_point t) {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d %02d:%02d:%02d.%03d UTC", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

std::string format_failure_summary(const AttemptResult& r, const SummaryContext& c) {
  std::string out = kRule;
  out +=
      str_cat("collie-run: workers failed on node ", c.node_rank, " (", c.hostname, "), attempt ",
              c.attempt, " of run '", c.run_id, "' (max restarts ", c.max_restarts, ")\n");
  switch (r.outcome) {
    case AttemptOutcome::kFailed: {
      const WorkerResult& w = r.workers.at(static_cast<size_t>(r.first_failure));
      const std::string ended =
          str_cat(" ended with ", w.exit.describe(), " at ", format_utc(w.exit_time), ", ",
                  seconds_since(r.start_time, w.exit_time), " after the start\n");
      const std::string who = str_cat("rank ", w.place.global_rank, " (local rank ",
                                      w.place.local_rank, ", pid ", w.pid, ")");
      if (!r.culprit) {
        out += str_cat("root cause: ", who, ended);
        break;
      }
      out += str_cat("root cause: ", describe_culprit(r), "\n  e.g. ", r.culprit->message, "\n");
      out += w.place.global_rank == r.culprit->rank ? str_cat("it", ended)
                                                    : str_cat("first to exit here: ", who, ended);
      break;
    }
    case AttemptOutcome::kRemoteFailed:
      out += str_cat("cause: another node failed: ", r.remote_reason, "\n");
      break;
    case AttemptOutcome::kInterrupted:
      out += str_cat("cause: collie-run received ", signal_name(r.signal),
                     " and stopped the workers\n");
      break;
    case AttemptOutcome::kSucceeded: break;
  }
  if (r.outcome == AttemptOutcome::kFailed && !r.hang_analysis.empty()) {
    out += "the flight recorders (collie-run asked every worker when the first failed):\n";
    for (const std::string& line : r.hang_analysis) out += str_cat("  ", line, "\n");
  }
  out += "------------------------------------------------------------------------------\n";
  out += " rank  local  node  pid       result                     time\n";
  int ok = 0;
  for (size_t i = 0; i < r.workers.size(); ++i) {
    const WorkerResult& w = r.workers[i];
    if (w.exit.ok()) {
      ++ok;
      continue;
    }
    std::string note;
    if (static_cast<int>(i) == r.first_failure)
      note = "  <- root cause";
    else if (w.stopped_by_launcher)
      note = "  (stopped by collie-run)";
    std::string time = format_utc(w.exit_time).substr(11, 12);  // HH:MM:SS.mmm
    out += str_cat(" ", pad(std::to_string(w.place.global_rank), 4, true), "  ",
                   pad(std::to_string(w.place.local_rank), 5, true), "  ",
                   pad(std::to_string(w.place.group_rank), 4, true), "  ",
                   pad(std::to_string(w.pid), 8), "  ", pad(w.exit.describe(), 25), "  ", time,
                   note, "\n");
  }
  if (ok > 0) out += str_cat(" (", ok, " other worker", ok == 1 ? "" : "s", " exited 0)\n");
  // --on-failure replace: the processes the ones above replaced.
  for (const WorkerResult& w :
       r.on_failure == OnFailure::kReplace ? r.losses : std::vector<WorkerResult>{})
    out += str_cat(" (replaced earlier: rank ", w.place.global_rank, ", pid ", w.pid, ", ",
                   w.exit.describe(), " at ", format_utc(w.exit_time).substr(11, 12), ")\n");
  for (const std::string& e : r.log_errors) out += str_cat("log lost: ", e, "\n");
  for (size_t i = 0; i < r.workers.size(); ++i) {
    const WorkerResult& w = r.workers[i];
    bool own_failure =
        !w.exit.ok() && (static_cast<int>(i) == r.first_failure || !w.stopped_by_launcher);
    if (!own_failure) continue;
    out += "------------------------------------------------------------------------------\n";
    if (w.stderr_tail.empty()) {
      out += str_cat("rank ", w.place.global_rank, " wrote nothing to stderr\n");
      continue;
    }
    out += str_cat("last ", w.stderr_tail.size(), " line", w.stderr_tail.size() == 1 ? "" : "s",
                   " of rank ", w.place.global_rank, "'s stderr:\n");
    for (const auto& line : w.stderr_tail) out += str_cat("  ", line, "\n");
  }
  if (!c.hints.empty()) {
    out += "------------------------------------------------------------------------------\n";
    for (const auto& hint : c.hints) out += str_cat("note: ", hint, "\n");
  }
  out += kRule;
  return out;
}

// "rank 3 (local rank 1 on node 1, host h, pid 42) ended with exit code 3"
std::string describe_failure(const AttemptResult& r, int node_rank, const std::string& host) {
  if (r.outcome == AttemptOutcome::kInterrupted)
    return str_cat("the launcher of node ", node_rank, " (", host, ") received ",
                   signal_name(r.signal));
  if (r.culprit) return str_cat(describe_culprit(r), " (seen on node ", node_rank, ", ", host, ")");
  const WorkerResult& w = r.workers.at(static_cast<size_t>(r.first_failure));
  return str_cat("rank ", w.place.global_rank, " (local rank ", w.place.local_rank, " on node ",
                 node_rank, ", host ", host, ", pid ", w.pid, ") ended with ", w.exit.describe());
}

std::string describe_culprit(const AttemptResult& r) {
  const NamedCulprit& c = *r.culprit;
  std::string who =
      str_cat("rank ", c.rank, " (", c.address.empty() ? "" : c.address + ", ", "on another node)");
  std::string state;
  for (const WorkerResult& w : r.workers) {
    if (w.place.global_rank != c.rank) continue;
    who = str_cat("rank ", c.rank, " (local rank ", w.place.local_rank, ", pid ", w.pid, ")");
    if (w.was_stopped)
      state =
          "; it was in the stopped state (SIGSTOP, or a debugger) when "
          "collie-run ended the attempt";
  }
  const bool one = c.named_by.size() == 1;
  return str_cat(who, " stopped responding: rank", one ? " " : "s ", join(c.named_by, ","),
                 " named it in ", one ? "its error record" : "their error records", state);
}

}  // namespace collie::launcher
