// The TcpStore under load: 256 clients (one connection each) hammer an
// out-of-process server with set/get/add/wait for a bounded time (CI 15 s;
// COLLIE_STORE_LOAD_SECONDS=N runs longer). No update may be lost: the final
// shared counter must equal the sum of every client's adds, and every get
// must return the value its client set last. Latency percentiles per
// operation are recorded.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>

#include "collie/base/check.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/test/soak/soak_util.h"
#include "collie/test/support/child.h"
#include "collie/test/support/subprocess.h"

using namespace collie;
using namespace collie::test;

COLLIE_TEST_CHILD(load_store_server) {
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  std::printf("port=%u\n", static_cast<unsigned>(server->port()));
  std::fflush(stdout);
  for (;;) ::pause();
}

namespace {

enum Op { kSet, kGet, kAdd, kWait, kOps };
const char* const kOpNames[kOps] = {"set", "get", "add", "wait"};

std::string percentiles(std::vector<uint32_t>& us) {
  if (us.empty()) return "none";
  std::sort(us.begin(), us.end());
  auto at = [&](double q) {
    return us[std::min(us.size() - 1, static_cast<size_t>(q * us.size()))];
  };
  return str_cat(us.size(), " ops, p50 ", at(0.50), " us, p99 ", at(0.99), " us, max ", us.back(),
                 " us");
}

}  // namespace

TEST_CASE("store under load: 256 clients, no lost update, latency percentiles", "[soak][store]") {
  constexpr int kClients = 256;
  const double seconds = soak_seconds("COLLIE_STORE_LOAD_SECONDS", 15);
  auto server = Subprocess::spawn(child_argv("load_store_server"));
  std::string out = server.wait_for_output("\n", std::chrono::seconds(30));
  const auto port = static_cast<uint16_t>(std::stoi(out.substr(out.find('=') + 1)));

  std::vector<std::unique_ptr<TcpStore>> clients;
  for (int c = 0; c < kClients; ++c)
    clients.push_back(TcpStore::connect("127.0.0.1", port, {.timeout = std::chrono::seconds(60)}));

  std::mutex mu;
  std::vector<uint32_t> latencies[kOps];
  std::atomic<int64_t> total_added{0};
  std::vector<std::string> failures;
  const auto stop_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(seconds));
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      std::vector<uint32_t> mine[kOps];
      int64_t added = 0;
      TcpStore& store = *clients[c];
      auto timed = [&](Op op, auto&& fn) {
        auto t0 = Clock::now();
        fn();
        mine[op].push_back(static_cast<uint32_t>(
            std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count()));
      };
      try {
        const std::string own = str_cat("load/", c), next = str_cat("load/", (c + 1) % kClients);
        for (int64_t i = 0; Clock::now() < stop_at; ++i) {
          const std::string value = str_cat(c, ":", i);
          timed(kSet, [&] { store.set(own, to_bytes(value)); });
          Bytes got;
          timed(kGet, [&] { got = store.get(own); });
          COLLIE_CHECK(std::string(got.begin(), got.end()) == value, "client ", c, " set ", value,
                       " but got ", std::string(got.begin(), got.end()));
          const int64_t delta = 1 + (c + i) % 3;
          timed(kAdd, [&] { store.add("load/counter", delta); });
          added += delta;
          // The neighbour's key exists after its first set; the first
          // wait measures the neighbour's start-up, not the store.
          if (i == 0)
            store.wait({next}, std::chrono::seconds(60));
          else
            timed(kWait, [&] { store.wait({next}, std::chrono::seconds(60)); });
        }
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(str_cat("client ", c, ": ", e.what()));
      }
      total_added += added;
      std::lock_guard<std::mutex> lock(mu);
      for (int op = 0; op < kOps; ++op)
        latencies[op].insert(latencies[op].end(), mine[op].begin(), mine[op].end());
    });
  }
  for (auto& t : threads) t.join();
  INFO((failures.empty() ? std::string() : failures.front()));
  CHECK(failures.empty());
  const int64_t counter = clients[0]->add("load/counter", 0);
  CHECK(counter == total_added.load());
  std::string report = str_cat("counter ", counter, " == sum of adds ", total_added.load(), "\n");
  size_t ops = 0;
  for (int op = 0; op < kOps; ++op) {
    ops += latencies[op].size();
    report += str_cat(kOpNames[op], ": ", percentiles(latencies[op]), "\n");
  }
  report += str_cat("total ", ops, " ops in ", seconds,
                    " s = ", static_cast<int64_t>(ops / seconds), " ops/s\n");
  soak_record(str_cat("TcpStore, 256 clients, ", seconds, " s"), report);
}
