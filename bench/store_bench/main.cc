// store_bench: operations per second of a TcpStore server for set, get and
// add with 1, 8 and 64 concurrent clients (threads, each with its own
// connection), collie's server against torch 1.13's, side by side.
//
// Both servers run in their own process: collie's in a child forked before
// any thread exists, torch's in /usr/bin/python3. Both are driven by the
// same client, collie's TcpStore, speaking the 1.13 dialect to both by
// default so that every byte on the wire is identical (--collie-dialect v2
// measures collie's server in its native dialect instead).
//
//   store_bench                       # the table
//   store_bench --repeat 5 --json     # one JSON object per row
//
// set is fire-and-forget in the protocol, so each client ends its timed run
// with a round trip: the time includes the server draining every set.
//
// Besides ops/s (which on a shared machine swings with everyone else's load)
// it reports each server process's CPU time per operation ("us/op", from
// /proc/<pid>/stat): the cost of the server's own work, much less sensitive
// to load.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/bench/store_servers/server_process.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"

namespace {

using namespace std::chrono;
using collie::StoreProtocol;

struct Sample {
  double ops_per_s = 0;
  double server_us_per_op = 0;  // the server process's CPU time per operation
};

// Runs `op` on `clients` threads for `seconds` against `server`.
Sample measure(const collie::bench::ServerProcess& server, StoreProtocol protocol,
               const std::string& op, int clients, double seconds, size_t value_bytes) {
  const uint16_t port = server.port();
  collie::TcpStoreOptions options;
  options.protocol = protocol;
  options.timeout = std::chrono::seconds(60);
  std::vector<std::unique_ptr<collie::TcpStore>> stores;
  for (int i = 0; i < clients; ++i)
    stores.push_back(collie::TcpStore::connect("127.0.0.1", port, options));
  const collie::Bytes value(value_bytes, 'v');
  for (int i = 0; i < clients; ++i) stores[i]->set(collie::str_cat("bench/", i), value);

  std::atomic<bool> stop{false};
  std::vector<int64_t> counts(clients, 0);
  std::barrier start(clients + 1);
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      auto& store = *stores[i];
      const std::string key = collie::str_cat("bench/", i);
      int64_t n = 0;
      start.arrive_and_wait();
      while (!stop.load(std::memory_order_relaxed)) {
        for (int j = 0; j < 16; ++j) {
          if (op == "set")
            store.set(key, value);
          else if (op == "get")
            store.get(key);
          else
            store.add("bench/counter", 1);
        }
        n += 16;
      }
      store.check({key});  // drain: every set has been applied
      counts[i] = n;
    });
  }
  start.arrive_and_wait();
  const double cpu0 = server.cpu_seconds();
  const auto t0 = steady_clock::now();
  std::this_thread::sleep_for(duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  const double elapsed = duration<double>(steady_clock::now() - t0).count();
  const double cpu = server.cpu_seconds() - cpu0;
  int64_t total = 0;
  for (auto c : counts) total += c;
  return {static_cast<double>(total) / elapsed,
          total > 0 ? cpu * 1e6 / static_cast<double>(total) : 0};
}

// Best of `repeat`: the highest rate, the lowest CPU cost.
void keep_best(Sample& best, const Sample& s, bool first) {
  if (first) {
    best = s;
    return;
  }
  best.ops_per_s = std::max(best.ops_per_s, s.ops_per_s);
  best.server_us_per_op = std::min(best.server_us_per_op, s.server_us_per_op);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("store_bench: TcpStore server throughput, collie vs torch 1.13");
  double seconds = 0.5;
  int repeat = 3;
  size_t value_bytes = 16;
  std::vector<int> client_counts = {1, 8, 64};
  std::vector<std::string> ops = {"set", "get", "add"};
  bool json = false;
  std::string collie_dialect = "v1_13";
  app.add_option("--seconds", seconds, "Timed run per cell")->capture_default_str();
  app.add_option("--repeat", repeat,
                 "Alternating runs per cell; the best of each server is reported (the "
                 "machine's other load only ever slows a run down)")
      ->capture_default_str();
  app.add_option("--value-bytes", value_bytes, "Value size for set")->capture_default_str();
  app.add_option("--clients", client_counts, "Concurrent clients")->capture_default_str();
  app.add_option("--ops", ops, "Operations to measure")
      ->check(CLI::IsMember({"set", "get", "add"}))
      ->capture_default_str();
  app.add_option("--collie-dialect", collie_dialect, "Dialect to collie's server: v1_13 or v2")
      ->check(CLI::IsMember({"v1_13", "v2"}))
      ->capture_default_str();
  app.add_flag("--json", json, "One JSON object per row instead of the table");
  CLI11_PARSE(app, argc, argv);
  signal(SIGPIPE, SIG_IGN);

  try {
    collie::bench::ServerProcess collie_server, torch_server;
    collie_server.start_collie({});  // before any thread exists
    std::string why;
    const bool have_torch = torch_server.start_torch(1, &why);
    if (!have_torch) std::fprintf(stderr, "store_bench: %s; collie only\n", why.c_str());
    const StoreProtocol collie_protocol =
        collie_dialect == "v2" ? StoreProtocol::kV2 : StoreProtocol::kV1_13;

    if (!json) {
      std::printf(
          "# TcpStore server ops/s, best of %d alternating %.1fs runs, %zu-byte values, "
          "collie client (%s to collie, 1.13 to torch)\n",
          repeat, seconds, value_bytes, collie_dialect.c_str());
      std::printf("%-4s %8s %14s %14s %12s %12s %12s\n", "op", "clients", "collie ops/s",
                  "torch ops/s", "collie/torch", "collie us/op", "torch us/op");
    }
    for (const std::string& op : ops) {
      for (int clients : client_counts) {
        Sample cs, ts;
        for (int r = 0; r < repeat; ++r) {
          keep_best(cs, measure(collie_server, collie_protocol, op, clients, seconds, value_bytes),
                    r == 0);
          if (have_torch) {
            keep_best(
                ts, measure(torch_server, StoreProtocol::kV1_13, op, clients, seconds, value_bytes),
                r == 0);
          }
        }
        const double c = cs.ops_per_s, t = ts.ops_per_s;
        if (json) {
          const nlohmann::ordered_json row = {{"op", op},
                                              {"clients", clients},
                                              {"collie_ops_per_s", std::round(c)},
                                              {"torch_ops_per_s", std::round(t)},
                                              {"ratio", t > 0 ? c / t : 0.0},
                                              {"collie_server_cpu_us_per_op", cs.server_us_per_op},
                                              {"torch_server_cpu_us_per_op", ts.server_us_per_op}};
          std::printf("%s\n", row.dump().c_str());
        } else {
          std::printf("%-4s %8d %14.0f %14.0f %12.2f %12.2f %12.2f\n", op.c_str(), clients, c, t,
                      t > 0 ? c / t : 0.0, cs.server_us_per_op, ts.server_us_per_op);
        }
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
