// The TcpStore server against hostile clients that send little and cost the
// server much: clients that never read their replies, and strangers that
// hold connections open without ever authenticating. Each case runs
// collie-store as its own process, measures what the attack costs it, and
// checks that a well-behaved client is served meanwhile.
#include <catch2/catch.hpp>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "collie/base/error.h"
#include "collie/rendezvous/env/job_secret.h"
#include "collie/rendezvous/tcp_store/store_auth.h"
#include "collie/rendezvous/tcp_store/store_protocol.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/test/rendezvous/tcp_store/raw_store_client.h"

namespace collie {
namespace {

using namespace std::chrono_literals;
using store_protocol::Writer;
using test::raw_connect;
using test::resident_kib;
using test::send_raw;

// Round trips of a bystander while an attack runs: each one's latency, and
// the server's largest resident set seen between them.
struct Bystander {
  std::vector<double> latency_ms;
  size_t peak_kib = 0;
  double median_ms() {
    std::sort(latency_ms.begin(), latency_ms.end());
    return latency_ms[latency_ms.size() / 2];
  }
  double max_ms() const { return *std::max_element(latency_ms.begin(), latency_ms.end()); }
};

Bystander serve_bystander(Store& store, pid_t server_pid, int round_trips) {
  Bystander b;
  for (int i = 0; i < round_trips; ++i) {
    const auto t0 = Clock::now();
    REQUIRE(store.add("bystander", 1) == i + 1);
    b.latency_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    b.peak_kib = std::max(b.peak_kib, resident_kib(server_pid));
  }
  return b;
}

// The figure the server's resident set may grow by while a client that
// never reads asks for gigabytes of replies: the replies refer to the
// stored value instead of copying it, and reading stops at 1 MiB unsent.
constexpr size_t kAttackGrowthBoundMiB = 64;

TEST_CASE("TcpStore server: a client that never reads its replies costs bounded memory",
          "[tcp_store][flood]") {
  // About 1 KB of requests asking for 1.25 GiB (40 GETs of a 32 MiB value)
  // or 2 GiB (one MULTI_GET of a 16 MiB value, 128 times) of replies.
  const bool multi_get = GENERATE(false, true);
  INFO((multi_get ? "one MULTI_GET of 128 x 16 MiB" : "40 pipelined GETs of 32 MiB"));
  uint16_t port = 0;
  auto server = test::start_collie_store({}, &port);
  const size_t value_bytes = (multi_get ? size_t{16} : size_t{32}) << 20;
  auto setter = TcpStore::connect("127.0.0.1", port, {.timeout = 60s});
  setter->set("big", Bytes(value_bytes, 'v'));
  const size_t base_kib = resident_kib(server.pid());

  auto bystander = TcpStore::connect("127.0.0.1", port, {.timeout = 60s});
  StoreSocket attacker = raw_connect(port);
  Bytes attack = test::v2_hello(1);
  if (multi_get) {
    Writer(attack).u8(10).keys(std::vector<std::string>(128, "big"));
  } else {
    for (int i = 0; i < 40; ++i) Writer(attack).u8(3).str("big");
  }
  send_raw(attacker, attack);
  // The attacker reads nothing from here on.

  Bystander b = serve_bystander(*bystander, server.pid(), 40);
  const size_t grown_mib = (std::max(b.peak_kib, base_kib) - base_kib) / 1024;
  const size_t peak_mib = resident_kib(server.pid(), "VmHWM") / 1024;
  INFO("server resident set " << base_kib / 1024 << " MiB before, grew by " << grown_mib
                              << " MiB (peak " << peak_mib
                              << " MiB); bystander round trips: median " << b.median_ms()
                              << " ms, max " << b.max_ms() << " ms");
  CHECK(grown_mib < kAttackGrowthBoundMiB);
  CHECK(peak_mib < base_kib / 1024 + kAttackGrowthBoundMiB);
  // Served while the attack runs: well within 100 ms (median; the maximum
  // is only bounded loosely, this machine is shared).
  CHECK(b.median_ms() < 100);
  CHECK(b.max_ms() < 1000);
  // The attacker did get the first of its replies: it is served, slowly.
  uint8_t echo[4];
  CHECK(attacker.recv_exact(echo, 4, Clock::now() + 10s).ok());
  attacker.close();
  test::check_still_serving(port);
}

// A client of the job: it has the secret.
TcpStoreOptions job_client(const JobSecret& secret) {
  TcpStoreOptions o;
  o.timeout = 30s;
  o.secret = secret;
  return o;
}

TEST_CASE("TcpStore server: strangers holding idle connections do not lock the job out",
          "[tcp_store][flood][security]") {
  // The agent store of a job, with room for 64 clients; a stranger holds
  // 100 connections open without a byte sent.
  const JobSecret secret = JobSecret::generate();
  uint16_t port = 0;
  auto server = test::start_collie_store({"--max-connections", "64"}, &port,
                                         {.env = {{"COLLIE_JOB_SECRET", secret.to_hex()}}});
  std::vector<StoreSocket> strangers;
  for (int i = 0; i < 100; ++i) strangers.push_back(raw_connect(port));
  // The job's ranks still get in, all 64 of them.
  std::vector<std::unique_ptr<TcpStore>> ranks;
  for (int i = 0; i < 64; ++i) {
    INFO("rank " << i);
    ranks.push_back(TcpStore::connect("127.0.0.1", port, job_client(secret)));
    CHECK(ranks.back()->add("arrived", 1) == i + 1);
  }
  CHECK(to_string(ranks.front()->get("arrived")) == "64");
}

TEST_CASE("TcpStore server: connections without the job secret get a deadline and a quota",
          "[tcp_store][flood][security]") {
  const JobSecret secret = JobSecret::generate();
  uint16_t port = 0;
  auto server =
      test::start_collie_store({"--max-unauthenticated", "16", "--handshake-timeout", "1"}, &port,
                               {.env = {{"COLLIE_JOB_SECRET", secret.to_hex()}}});
  const auto start = Clock::now();
  // 48 strangers: the 32 oldest are closed at once to make room for newer
  // ones, the 16 left when their second is up. Each learns why (a busy
  // notice) before the close.
  std::vector<StoreSocket> strangers;
  for (int i = 0; i < 48; ++i) strangers.push_back(raw_connect(port));
  auto rank = TcpStore::connect("127.0.0.1", port, job_client(secret));
  for (auto& s : strangers) {
    uint8_t notice = 0;
    REQUIRE(s.recv_exact(&notice, 1, Clock::now() + 20s).ok());
    CHECK(int{notice} == int{kStoreRefusedBusy});
    CHECK(test::closed_by_server(s));
  }
  // The deadline, not a timeout of ours, closed the last ones.
  CHECK(Clock::now() - start < 15s);
  // The authenticated rank is never subject to the deadline.
  CHECK(rank->add("n", 1) == 1);
  server.kill(SIGTERM);
  REQUIRE(server.wait(30s).ok());
  CHECK_THAT(server.err(),
             Catch::Contains("without the job secret") && Catch::Contains("127.0.0.1:"));
}

}  // namespace
}  // namespace collie
