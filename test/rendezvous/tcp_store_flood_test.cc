// The TcpStore server against hostile clients that send little and cost the
// server much: clients that never read their replies, and strangers that
// hold connections open without ever authenticating. Each case runs
// collie-store as its own process, measures what the attack costs it, and
// checks that a well-behaved client is served meanwhile.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <vector>

#include "rendezvous/store_protocol.h"
#include "rendezvous/tcp_store.h"
#include "runtime/base/error.h"
#include "test/rendezvous/raw_store_client.h"

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

}  // namespace
}  // namespace collie
