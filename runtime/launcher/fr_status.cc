#include "collie/runtime/launcher/fr_status.h"

#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "collie/base/str_cat.h"

namespace collie::launcher {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

int64_t realtime_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string state_path(const std::string& dir, int rank) {
  return str_cat(dir, "/rank", rank, ".json");
}

std::optional<json> read_state(const std::string& dir, int rank) {
  std::ifstream in(state_path(dir, rank));
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("groups")) return std::nullopt;
  return j;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  for (int r : ranks) parts.push_back(std::to_string(r));
  return str_cat(ranks.size() == 1 ? "rank " : "ranks ", join(parts, ","));
}

std::string seconds(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ms < 1000 ? "%.2f ms" : "%.1f s", ms < 1000 ? ms : ms / 1000);
  return buf;
}

std::string call_name(const json& e) {
  return str_cat(e.value("op", std::string("?")), " #", e.value("seq", 0));
}

std::string group_name(const json& g) {
  const std::string desc = g.value("desc", std::string());
  return str_cat("group ", g.value("name", std::string("?")),
                 desc.empty() || desc == "undefined" ? std::string() : str_cat(" (", desc, ")"));
}

// Per group name: the state each rank (global) gave for it.
using ByGroup = std::map<std::string, std::map<int, json>>;

ByGroup by_group(const std::string& dir, const std::vector<int>& ranks) {
  ByGroup out;
  for (int r : ranks) {
    auto s = read_state(dir, r);
    if (!s) continue;
    for (const json& g : (*s)["groups"]) out[g.value("name", std::string())][r] = g;
  }
  return out;
}

struct HangFinding {
  std::string line;
  std::vector<int> missing;
};

std::vector<HangFinding> find_hangs(const std::string& dir, const std::vector<int>& ranks) {
  std::vector<HangFinding> out;
  std::set<int> answered;
  for (int r : ranks)
    if (read_state(dir, r)) answered.insert(r);
  for (const auto& [name, states] : by_group(dir, ranks)) {
    // The oldest collective some rank of the group waits in.
    std::optional<uint64_t> oldest;
    json call;
    for (const auto& [rank, g] : states)
      for (const json& e : g["pending"])
        if (!e.value("p2p", false) && (!oldest || e.value("seq", uint64_t{0}) < *oldest)) {
          oldest = e.value("seq", uint64_t{0});
          call = e;
        }
    if (!oldest) continue;
    std::vector<int> never, waiting, silent;
    std::vector<std::string> never_detail;
    double longest_ms = 0;
    for (const auto& [rank, g] : states) {
      if (g.value("last_enqueued_collective", uint64_t{0}) < *oldest) {
        never.push_back(rank);
        const json& last = g["last_completed"];
        never_detail.push_back(last.is_object() ? str_cat(rank, ": ", call_name(last)) : "");
        continue;
      }
      for (const json& e : g["pending"])
        if (!e.value("p2p", false) && e.value("seq", uint64_t{0}) == *oldest) {
          waiting.push_back(rank);
          longest_ms = std::max(longest_ms, e.value("waited_ms", 0.0));
        }
    }
    // Members that gave no state at all (the group's ranks, from any state).
    const json& any = states.begin()->second;
    for (int member : any.value("ranks", std::vector<int>{}))
      if (!answered.count(member)) silent.push_back(member);
    std::vector<std::string> parts;
    if (!never.empty()) {
      std::vector<std::string> details;
      for (const auto& d : never_detail)
        if (!d.empty()) details.push_back(d);
      parts.push_back(str_cat(rank_list(never), " never entered ", call_name(call),
                              details.empty()
                                  ? std::string()
                                  : str_cat(" (last completed: ", join(details, "; "), ")")));
    }
    if (!waiting.empty())
      parts.push_back(str_cat(rank_list(waiting), " wait in it (up to ", seconds(longest_ms), ")"));
    if (!silent.empty())
      parts.push_back(str_cat(rank_list(silent), " gave no state (exited or unresponsive)"));
    out.push_back(
        {str_cat(group_name(any), ": ", call_name(call), ": ", join(parts, "; ")), never});
  }
  return out;
}

// Whether `pid` has a handler for SIGUSR2 (its SigCgt mask in
// /proc/PID/status): a process without one would die of it, e.g. a Python
// worker that has not yet imported collie.
bool catches_sigusr2(pid_t pid) {
  std::ifstream in(str_cat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    const unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
    return (mask >> (SIGUSR2 - 1)) & 1;
  }
  return false;
}

// Whether `pid` has exited (a zombie its parent has not reaped counts) or
// is exiting: it will not answer.
bool gone(pid_t pid) {
  std::ifstream in(str_cat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return true;
  const char state = stat[paren + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace

std::string fr_state_dir(pid_t launcher_pid) {
  const char* tmp = std::getenv("TMPDIR");
  return str_cat(tmp && *tmp ? tmp : "/tmp", "/collie-run-", launcher_pid, "-states");
}

void write_worker_pids(const std::string& dir, const std::vector<WorkerPid>& workers) {
  std::string text;
  for (const WorkerPid& w : workers) text += str_cat(w.rank, " ", w.pid, "\n");
  const std::string tmp = str_cat(dir, "/workers.tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, str_cat(dir, "/workers"), ec);
}

std::vector<WorkerPid> read_worker_pids(const std::string& dir) {
  std::vector<WorkerPid> out;
  std::ifstream in(str_cat(dir, "/workers"));
  WorkerPid w;
  while (in >> w.rank >> w.pid) out.push_back(w);
  return out;
}

std::vector<int> request_states(const std::string& dir, const std::vector<WorkerPid>& workers,
                                std::chrono::milliseconds wait) {
  const int64_t asked = realtime_ns();
  std::vector<WorkerPid> alive;
  for (const WorkerPid& w : workers)
    if (w.pid > 0 && catches_sigusr2(w.pid) && ::kill(w.pid, SIGUSR2) == 0) alive.push_back(w);
  std::vector<int> answered;
  for (const WorkerPid& w : workers)
    if (std::find_if(alive.begin(), alive.end(),
                     [&](const WorkerPid& a) { return a.rank == w.rank; }) == alive.end() &&
        read_state(dir, w.rank))
      answered.push_back(w.rank);  // exited: its last state stands
  const auto until = Clock::now() + wait;
  while (!alive.empty()) {
    for (auto it = alive.begin(); it != alive.end();) {
      auto s = read_state(dir, it->rank);
      if (s && s->value("time_ns", int64_t{0}) >= asked) {
        answered.push_back(it->rank);
        it = alive.erase(it);
      } else if (gone(it->pid)) {  // exited meanwhile: its last state stands
        if (s) answered.push_back(it->rank);
        it = alive.erase(it);
      } else {
        ++it;
      }
    }
    if (alive.empty() || Clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling the files
  }
  std::sort(answered.begin(), answered.end());
  return answered;
}

std::vector<std::string> describe_states(const std::string& dir, const std::vector<int>& ranks) {
  std::vector<std::string> lines;
  for (int r : ranks) {
    auto s = read_state(dir, r);
    if (!s) {
      lines.push_back(str_cat("rank ", r, ": no state (it did not answer: exited, or stopped)"));
      continue;
    }
    if ((*s)["groups"].empty()) lines.push_back(str_cat("rank ", r, ": no group yet"));
    for (const json& g : (*s)["groups"]) {
      std::string line = str_cat("rank ", r, ", ", group_name(g), ": ");
      const json& last = g["last_completed"];
      line += last.is_object() ? str_cat("last completed ", call_name(last), " (",
                                         seconds(last.value("duration_ms", 0.0)), ")")
                               : std::string("nothing completed");
      std::vector<std::string> pending;
      for (const json& e : g["pending"])
        pending.push_back(str_cat(call_name(e), " ", e.value("state", std::string()), ", waiting ",
                                  seconds(e.value("waited_ms", 0.0))));
      line += pending.empty() ? std::string("; nothing pending")
                              : str_cat("; pending ", join(pending, ", "));
      lines.push_back(std::move(line));
    }
  }
  return lines;
}

std::vector<std::string> analyse_hang(const std::string& dir, const std::vector<int>& ranks) {
  std::vector<std::string> out;
  for (auto& f : find_hangs(dir, ranks)) out.push_back(std::move(f.line));
  return out;
}

std::vector<int> ranks_missing_from_calls(const std::string& dir, const std::vector<int>& ranks) {
  std::set<int> missing;
  for (const auto& f : find_hangs(dir, ranks)) missing.insert(f.missing.begin(), f.missing.end());
  return {missing.begin(), missing.end()};
}

int run_status_query(pid_t launcher_pid) {
  const std::string dir = fr_state_dir(launcher_pid);
  const std::vector<WorkerPid> workers = read_worker_pids(dir);
  if (workers.empty()) {
    std::fprintf(stderr,
                 "collie-run --status: no workers listed in %s: is %d a running collie-run "
                 "(on this node)?\n",
                 dir.c_str(), static_cast<int>(launcher_pid));
    return 1;
  }
  std::vector<int> ranks;
  for (const WorkerPid& w : workers) ranks.push_back(w.rank);
  const std::vector<int> answered = request_states(dir, workers, std::chrono::seconds(3));
  std::printf("collie-run %d: %zu worker(s) on this node, %zu answered\n",
              static_cast<int>(launcher_pid), workers.size(), answered.size());
  for (const std::string& line : describe_states(dir, ranks)) std::printf("  %s\n", line.c_str());
  const auto hangs = analyse_hang(dir, ranks);
  if (!hangs.empty()) std::printf("waiting:\n");
  for (const std::string& line : hangs) std::printf("  %s\n", line.c_str());
  return 0;
}

}  // namespace collie::launcher
