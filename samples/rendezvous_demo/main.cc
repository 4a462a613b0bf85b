// rendezvous_demo: the smallest real multi-process collie job. The parent
// hosts a TcpStore server on a free port and starts --nproc workers (this
// same program, with torch's RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT in
// their environment). Each worker connects, registers itself under
// "rank/<r>", counts itself in with add("joined", 1) and waits for every
// rank's key: a store barrier. Then each reports its timings and rank 0
// prints who joined. The parent waits with a deadline, kills the workers if
// any fails or time runs out, and exits non-zero on failure.
//
//   rendezvous_demo --nproc 4
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "collie/base/child_process.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/env/launch_env.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"

namespace {

using namespace std::chrono;

double now_ms() {
  return duration<double, std::milli>(system_clock::now().time_since_epoch()).count();
}

std::string env_or_die(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) throw collie::InvalidArgument(collie::str_cat("worker: ", name, " is not set"));
  return v;
}

// COLLIE_DEMO_T0_MS: when the parent started, in ms since the epoch.
double parent_start_ms() {
  const std::string text = env_or_die("COLLIE_DEMO_T0_MS");
  char* end = nullptr;
  const double ms = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(ms >= 0))
    throw collie::InvalidArgument(
        collie::str_cat("worker: COLLIE_DEMO_T0_MS='", text, "' is not a time in ms"));
  return ms;
}

int run_worker(int timeout_s) {
  // RANK, WORLD_SIZE and MASTER_PORT are checked there: "RANK='abc' is not a
  // non-negative integer", not a bare "stoi".
  const collie::LaunchEnv env = collie::detect_launch_env();
  if (!env.distributed || env.master_addr.empty() || !env.master_port)
    throw collie::InvalidArgument(
        "worker: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT must all be set (the parent sets "
        "them; run without --worker)");
  const int rank = env.rank, world = env.world_size;
  const std::string& addr = env.master_addr;
  const uint16_t port = *env.master_port;
  const double t0 = parent_start_ms();

  // For the failure test: this rank dies before it registers.
  if (const char* fail = std::getenv("COLLIE_DEMO_FAIL_RANK");
      fail && collie::detail::parse_non_negative("COLLIE_DEMO_FAIL_RANK", fail) == rank) {
    std::fprintf(stderr, "rendezvous_demo worker %d: failing on purpose (COLLIE_DEMO_FAIL_RANK)\n",
                 rank);
    return 3;
  }
  collie::TcpStoreOptions options;
  options.timeout = seconds(timeout_s);
  auto store = collie::TcpStore::connect(addr, port, options);
  const double connected = now_ms() - t0;

  char host[256] = "?";
  ::gethostname(host, sizeof(host) - 1);
  store->set(collie::str_cat("rank/", rank), collie::str_cat(::getpid(), " ", host));
  const int64_t arrival = store->add("joined", 1);

  std::vector<std::string> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(collie::str_cat("rank/", r));
  const double barrier_start = now_ms();
  store->wait(ranks);  // the barrier: every rank has registered
  const double barrier_ms = now_ms() - barrier_start;
  store->set(collie::str_cat("report/", rank),
             collie::str_cat(arrival, " ", connected, " ", barrier_ms));

  if (rank == 0) {
    std::vector<std::string> reports;
    for (int r = 0; r < world; ++r) reports.push_back(collie::str_cat("report/", r));
    auto registered = store->multi_get(ranks);
    auto timings = store->multi_get(reports);
    std::printf("%-5s %-8s %-20s %-8s %-14s %-12s\n", "rank", "pid", "host", "arrived",
                "connected(ms)", "barrier(ms)");
    for (int r = 0; r < world; ++r) {
      std::istringstream who(collie::to_string(registered[r]));
      std::istringstream how(collie::to_string(timings[r]));
      std::string pid, h;
      double conn = 0, bar = 0;
      int64_t order = 0;
      who >> pid >> h;
      how >> order >> conn >> bar;
      std::printf("%-5d %-8s %-20s %-8lld %-14.1f %-12.1f\n", r, pid.c_str(), h.c_str(),
                  static_cast<long long>(order), conn, bar);
    }
    std::printf("rendezvous_demo: all %d ranks met through the store in %.1f ms\n", world,
                now_ms() - t0);
    std::fflush(stdout);
  }
  return 0;
}

int run_parent(int nproc, int timeout_s) {
  auto server = collie::TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  std::printf("rendezvous_demo: %d workers rendezvous through a TcpStore at 127.0.0.1:%u\n", nproc,
              server->port());
  std::fflush(stdout);

  const std::string t0 = collie::str_cat(static_cast<int64_t>(now_ms()));
  std::vector<collie::ChildProcess> workers;
  for (int r = 0; r < nproc; ++r) {
    workers.push_back(collie::ChildProcess::spawn(
        {"rendezvous_demo", "--worker", "--timeout", std::to_string(timeout_s)},
        {.env = {{"RANK", std::to_string(r)},
                 {"LOCAL_RANK", std::to_string(r)},
                 {"WORLD_SIZE", std::to_string(nproc)},
                 {"MASTER_ADDR", "127.0.0.1"},
                 {"MASTER_PORT", std::to_string(server->port())},
                 {"COLLIE_DEMO_T0_MS", t0}},
         .path = "/proc/self/exe"}));
  }

  // The parent sleeps until a worker exits or the deadline passes, never
  // polling.
  const auto deadline = steady_clock::now() + seconds(timeout_s);
  std::string failure;
  for (;;) {
    size_t running = 0;
    for (int r = 0; r < nproc && failure.empty(); ++r) {
      const collie::ChildProcess& w = workers[r];
      if (!w.exited()) {
        ++running;
      } else if (!w.status().ok()) {
        failure = w.status().signal != 0 ? collie::str_cat("rank ", r, " (pid ", w.pid(),
                                                           ") killed by signal ", w.status().signal)
                                         : collie::str_cat("rank ", r, " (pid ", w.pid(),
                                                           ") exited with ", w.status().exit_code);
      }
    }
    if (running == 0 || !failure.empty()) break;
    const auto left = duration_cast<milliseconds>(deadline - steady_clock::now());
    if (left <= milliseconds(0)) {
      failure =
          collie::str_cat(running, " worker(s) still running after the ", timeout_s, "s deadline");
      break;
    }
    collie::wait_for_any_exit(workers, left);
  }
  if (!failure.empty()) {
    workers.clear();  // kills and reaps the ones still running
    std::fprintf(stderr, "rendezvous_demo: FAILED: %s\n", failure.c_str());
    return 1;
  }
  std::printf("rendezvous_demo: all %d workers exited cleanly\n", nproc);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("rendezvous_demo: N processes meet through a collie TcpStore");
  int nproc = 4;
  int timeout_s = 60;
  bool worker = false;
  app.add_option("--nproc", nproc, "Number of worker processes")->check(CLI::Range(1, 1024));
  app.add_option("--timeout", timeout_s, "Seconds before the job is declared failed")
      ->check(CLI::PositiveNumber);
  app.add_flag("--worker", worker, "Run as a worker (set by the parent)")->group("");
  CLI11_PARSE(app, argc, argv);
  try {
    return worker ? run_worker(timeout_s) : run_parent(nproc, timeout_s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rendezvous_demo%s: %s\n", worker ? " worker" : "", e.what());
    return 1;
  }
}
