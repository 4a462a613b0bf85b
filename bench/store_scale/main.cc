// store_scale: how fast a job of N ranks rendezvouses through one TcpStore
// server, collie's against torch 1.13's, side by side, at thousands of
// simulated ranks.
//
// Each run starts a fresh server in a process of its own, then forks a few
// client processes that each run a share of the N simulated ranks on one
// event loop (simulated_ranks.h has what a rank does: set its address, add
// to a counter, wait for the barrier, read its two ring neighbours'
// addresses). The time is from the moment every client process is told to
// go to the moment the last rank has its neighbours, connects included.
// Three configurations per run, alternating:
//
//   collie v2     collie's server, the 2.x dialect (MULTI_GET of the
//                 neighbours): what collie's own init sends
//   collie 1.13   collie's server, the 1.13 dialect: byte for byte what
//   torch 1.13    goes to torch's server, which speaks only 1.13
//
//   store_scale                                  # 256 ... 16384 ranks, 3 runs
//   store_scale --ranks 4096 --runs 5 --json
//
// Exit status: 1 when a collie run lost a rank or a connection; with
// --require-torch, 77 when /usr/bin/python3 has no torch (after the collie
// runs) and 1 when a torch run failed.
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/bench/store_scale/simulated_ranks.h"
#include "collie/bench/store_servers/server_process.h"

namespace {

using collie::bench::ServerProcess;
using collie::bench::SimDialect;
using collie::bench::SimulationReport;

struct Config {
  const char* name;
  bool torch;
  SimDialect dialect;
};
constexpr Config kConfigs[] = {{"collie v2", false, SimDialect::kV2},
                               {"collie 1.13", false, SimDialect::kV1_13},
                               {"torch 1.13", true, SimDialect::kV1_13}};

struct RunResult {
  bool ok = false;
  double seconds = 0;
  double connect_seconds = 0;  // until the last rank had connected
  double wall_seconds = 0;     // until every client process had reported
  SimulationReport totals;     // summed over the client processes
  double server_cpu_s = 0;
  double server_peak_mib = 0;
  std::string error;
};

void raise_fd_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
}

// One run: `ranks` simulated ranks in `procs` processes against `server`.
RunResult run_once(const ServerProcess& server, int ranks, int procs, SimDialect dialect,
                   collie::Timeout limit) {
  struct Child {
    pid_t pid;
    int go_fd;
    int result_fd;
  };
  std::vector<Child> children;
  for (int p = 0; p < procs; ++p) {
    const int first = static_cast<int>(static_cast<int64_t>(ranks) * p / procs);
    const int last = static_cast<int>(static_cast<int64_t>(ranks) * (p + 1) / procs);
    int go[2], result[2];
    if (::pipe(go) != 0 || ::pipe(result) != 0) throw collie::Error("pipe failed");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(go[1]);
      ::close(result[0]);
      for (const Child& c : children) {
        ::close(c.go_fd);
        ::close(c.result_fd);
      }
      char byte;
      if (::read(go[0], &byte, 1) != 1) _exit(1);
      SimulationReport r =
          collie::bench::simulate_ranks(server.port(), first, last, ranks, dialect, limit);
      _exit(::write(result[1], &r, sizeof r) == sizeof r ? 0 : 1);
    }
    ::close(go[0]);
    ::close(result[1]);
    children.push_back({pid, go[1], result[0]});
  }
  const double cpu0 = server.cpu_seconds();
  const auto t0 = collie::Clock::now();
  for (const Child& c : children) (void)!::write(c.go_fd, "g", 1);
  RunResult out;
  out.ok = true;
  int64_t last_done_ns = 0, last_connected_ns = 0;
  // Reports come as processes finish. One whose rank lost its connection
  // means the job cannot complete: the others are stopped rather than left
  // waiting for a barrier that will never come.
  std::vector<pollfd> waiting;
  for (const Child& c : children) waiting.push_back({c.result_fd, POLLIN, 0});
  size_t open = children.size();
  bool stopping = false;
  while (open > 0) {
    if (::poll(waiting.data(), waiting.size(), -1) < 0) continue;
    for (size_t i = 0; i < waiting.size(); ++i) {
      if (waiting[i].fd < 0 || waiting[i].revents == 0) continue;
      SimulationReport r;
      if (::read(waiting[i].fd, &r, sizeof r) != sizeof r) {
        out.ok = false;
        if (out.error.empty())
          out.error =
              stopping ? "stopped after another process's rank failed" : "a client process died";
      } else {
        out.totals.done += r.done;
        out.totals.failed += r.failed;
        out.totals.unfinished += r.unfinished;
        for (int k = 0; k < 2; ++k) out.totals.slow_connects[k] += r.slow_connects[k];
        out.totals.connect_retries += r.connect_retries;
        out.totals.wrong_values += r.wrong_values;
        last_done_ns = std::max(last_done_ns, r.last_done_ns);
        last_connected_ns = std::max(last_connected_ns, r.last_connected_ns);
        if (out.error.empty() && r.first_error[0] != 0) out.error = r.first_error;
        if (r.failed > 0 && !stopping) {
          stopping = true;
          for (const Child& c : children) ::kill(c.pid, SIGTERM);
        }
      }
      waiting[i].fd = -1;
      --open;
    }
  }
  for (const Child& c : children) {
    ::close(c.go_fd);
    ::close(c.result_fd);
    ::waitpid(c.pid, nullptr, 0);
  }
  out.server_cpu_s = server.cpu_seconds() - cpu0;
  out.server_peak_mib = server.peak_rss_mib();
  out.wall_seconds = std::chrono::duration<double>(collie::Clock::now() - t0).count();
  if (out.totals.done != ranks || out.totals.failed > 0 || out.totals.wrong_values > 0)
    out.ok = false;
  const int64_t t0_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count();
  out.seconds = out.ok ? static_cast<double>(last_done_ns - t0_ns) / 1e9 : 0;
  out.connect_seconds =
      last_connected_ns ? static_cast<double>(last_connected_ns - t0_ns) / 1e9 : 0;
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("store_scale: a job's rendezvous through one TcpStore server, collie vs torch 1.13");
  std::vector<int> rank_counts = {256, 1024, 4096, 16384};
  int runs = 3;
  int procs = 4;
  double timeout_s = 300;
  bool json = false;
  bool require_torch = false;
  bool skip_torch = false;
  app.add_option("--ranks", rank_counts, "Simulated ranks per job")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  app.add_option("--runs", runs, "Runs per size and server (the median is reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--procs", procs, "Client processes the ranks are shared among")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--timeout", timeout_s, "Limit of one run, in seconds")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  app.add_flag("--json", json, "One JSON object per run instead of the table");
  app.add_flag("--require-torch", require_torch,
               "Exit 77 when torch is missing, 1 when a torch run fails (the smoke test)");
  app.add_flag("--no-torch", skip_torch, "Measure collie's server only");
  CLI11_PARSE(app, argc, argv);
  signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();  // the client processes inherit it
  const auto limit =
      std::chrono::duration_cast<collie::Timeout>(std::chrono::duration<double>(timeout_s));

  std::string torch_missing;
  bool collie_failed = false, torch_failed = false;
  if (!json) {
    std::printf(
        "# store_scale: simulated rendezvous (set address, add, wait barrier, get 2 neighbours),\n"
        "# %d client processes, seconds: median (min-max) of %d runs; fresh server per run\n",
        procs, runs);
    std::printf("%-7s %-24s %-24s %-24s %11s %11s %s\n", "ranks", "collie v2 s", "collie 1.13 s",
                "torch 1.13 s", "torch/c1.13", "torch/cv2", "failed runs (cv2/c1.13/torch)");
  }
  // A configuration that failed a run is not tried again, at that size or
  // above: a server that cannot take N ranks will not take more, and each
  // try costs the whole --timeout.
  std::map<std::string, int> failed_at;
  for (int ranks : rank_counts) {
    std::map<std::string, std::vector<RunResult>> results;
    for (int run = 0; run < runs; ++run) {
      for (const Config& config : kConfigs) {
        if (config.torch && (skip_torch || !torch_missing.empty())) continue;
        if (failed_at.count(config.name) && ranks >= failed_at[config.name]) continue;
        ServerProcess server;
        if (config.torch) {
          if (!server.start_torch(ranks, &torch_missing)) continue;
        } else {
          server.start_collie({});  // collie-store's defaults
        }
        RunResult r = run_once(server, ranks, procs, config.dialect, limit);
        server.stop();
        if (!r.ok) {
          (config.torch ? torch_failed : collie_failed) = true;
          failed_at.emplace(config.name, ranks);
        }
        if (json) {
          const nlohmann::ordered_json row = {{"ranks", ranks},
                                              {"server", config.name},
                                              {"run", run},
                                              {"ok", r.ok},
                                              {"seconds", r.seconds},
                                              {"connect_seconds", r.connect_seconds},
                                              {"wall_seconds", r.wall_seconds},
                                              {"unfinished", r.totals.unfinished},
                                              {"connects_over_1s", r.totals.slow_connects[0]},
                                              {"connects_over_3s", r.totals.slow_connects[1]},
                                              {"done", r.totals.done},
                                              {"failed", r.totals.failed},
                                              {"connect_retries", r.totals.connect_retries},
                                              {"wrong_values", r.totals.wrong_values},
                                              {"server_cpu_s", r.server_cpu_s},
                                              {"server_peak_rss_mib", r.server_peak_mib},
                                              {"error", r.error}};
          // The error is a message from anywhere: escaped by the writer,
          // invalid UTF-8 replaced rather than thrown on.
          std::printf(
              "%s\n",
              row.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
        } else if (!r.ok || r.totals.connect_retries > 0) {
          std::fprintf(stderr,
                       "store_scale: %d ranks, %s, run %d: %s after %.1fs: %lld done, %lld lost "
                       "their connection, %lld unfinished, %lld connect retries, %lld wrong "
                       "values; first error: %s\n",
                       ranks, config.name, run, r.ok ? "completed" : "FAILED", r.wall_seconds,
                       static_cast<long long>(r.totals.done),
                       static_cast<long long>(r.totals.failed),
                       static_cast<long long>(r.totals.unfinished),
                       static_cast<long long>(r.totals.connect_retries),
                       static_cast<long long>(r.totals.wrong_values), r.error.c_str());
        }
        std::fflush(stdout);
        results[config.name].push_back(std::move(r));
      }
    }
    if (json) continue;
    // The table row: medians of the runs that completed.
    std::map<std::string, double> med;
    std::string cells[3], failures;
    for (size_t i = 0; i < std::size(kConfigs); ++i) {
      const auto& rs = results[kConfigs[i].name];
      std::vector<double> times;
      int failed = 0;
      for (const auto& r : rs) (r.ok ? times.push_back(r.seconds) : void(++failed));
      if (rs.empty()) {
        cells[i] = "-";
      } else if (times.empty()) {
        cells[i] = "failed";
      } else {
        med[kConfigs[i].name] = median(times);
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.3f (%.3f-%.3f)", median(times),
                      *std::min_element(times.begin(), times.end()),
                      *std::max_element(times.begin(), times.end()));
        cells[i] = buf;
      }
      failures += (i ? "/" : "") + std::to_string(failed);
    }
    auto ratio = [&](const char* a, const char* b) {
      if (!med.count(a) || !med.count(b)) return std::string("-");
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2f", med[a] / med[b]);
      return std::string(buf);
    };
    std::printf("%-7d %-24s %-24s %-24s %11.11s %11.11s %s\n", ranks, cells[0].c_str(),
                cells[1].c_str(), cells[2].c_str(), ratio("torch 1.13", "collie 1.13").c_str(),
                ratio("torch 1.13", "collie v2").c_str(), failures.c_str());
    std::fflush(stdout);
  }
  if (!torch_missing.empty() && !skip_torch)
    std::fprintf(stderr, "store_scale: torch's server not measured: %s\n", torch_missing.c_str());
  if (collie_failed) return 1;
  if (require_torch && !torch_missing.empty()) return 77;
  if (require_torch && torch_failed) return 1;
  return 0;
}
