// The TcpStore server's budget for unsent replies (issue 39, item 7). A
// client that sends a few bytes and never reads the answers must not make
// the server hold a fresh copy of a large reply per request: SET <new key> +
// LIST_KEYS builds a new key list each time, APPEND + GET used to copy the
// value each time. Each case runs collie-store as its own process with
// several such clients, waits until each has been served (its first reply
// reaches its socket), and measures the server's resident set; a
// well-behaved client, big values included, is served throughout.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "collie/base/str_cat.h"
#include "collie/base/unique_fd.h"
#include "collie/rendezvous/tcp_store/store_protocol.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/test/rendezvous/tcp_store/raw_store_client.h"

namespace collie {
namespace {

using namespace std::chrono_literals;
using store_protocol::V2Query;
using store_protocol::Writer;
using test::resident_kib;

constexpr size_t kMiB = size_t{1} << 20;
constexpr int kAttackers = 16;
constexpr size_t kBigMiB = 16;  // the key list, or the value, each attacker asks for
// The server's budget for unsent replies in these cases (--max-reply-bytes).
constexpr size_t kBudgetMiB = 64;

Writer& q(Writer& w, V2Query query) { return w.u8(static_cast<uint8_t>(query)); }

// A client that never reads: its receive buffer is pinned small before it
// connects, so that the kernel does not take the replies off the server's
// hands (on loopback it would otherwise absorb tens of MiB per connection).
UniqueFd attacker_connect(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fd.valid());
  const int small = 4096;
  REQUIRE(::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small) == 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

void send_all(const UniqueFd& fd, const Bytes& b) {
  size_t sent = 0;
  while (sent < b.size()) {
    const ssize_t n = ::send(fd.get(), b.data() + sent, b.size() - sent, MSG_NOSIGNAL);
    REQUIRE(n > 0);
    sent += static_cast<size_t>(n);
  }
}

// Waits until the server has answered something on `fd` (its first reply
// has arrived, unread) or closed it: it has then served the first requests.
void wait_served(const UniqueFd& fd) {
  pollfd p{fd.get(), POLLIN, 0};
  REQUIRE(::poll(&p, 1, 60'000) == 1);
}

struct Growth {
  size_t now_mib = 0;
  size_t peak_mib = 0;
};

Growth growth_since(pid_t pid, size_t base_kib) {
  const size_t now = resident_kib(pid);
  const size_t peak = resident_kib(pid, "VmHWM");
  return {(std::max(now, base_kib) - base_kib) / 1024,
          (std::max(peak, base_kib) - base_kib) / 1024};
}

// A well-behaved client of the same server still gets everything, a 64 MiB
// value and the (16 MiB) key list included.
void check_big_values_served(uint16_t port) {
  auto a = TcpStore::connect("127.0.0.1", port, {.timeout = 60s});
  auto b = TcpStore::connect("127.0.0.1", port, {.timeout = 60s});
  a->set("huge", Bytes(64 * kMiB, 'h'));
  const Bytes got = b->get("huge");
  CHECK(got.size() == 64 * kMiB);
  CHECK(std::all_of(got.begin(), got.end(), [](uint8_t c) { return c == 'h'; }));
  CHECK(!b->list_keys().empty());
  test::check_still_serving(port);
}

TEST_CASE("TcpStore server: SET <new key> + LIST_KEYS from clients that never read is bounded",
          "[tcp_store][flood][reply_budget]") {
  uint16_t port = 0;
  auto server =
      test::start_collie_store({"--max-reply-bytes", std::to_string(kBudgetMiB * kMiB)}, &port);
  // A store whose key list is 16 MiB: one long key.
  auto setter = TcpStore::connect("127.0.0.1", port, {.timeout = 60s});
  setter->set(std::string(kBigMiB * kMiB, 'k'), "v");
  REQUIRE(setter->num_keys() == 1);  // a round trip: the SET is applied
  const size_t base_kib = resident_kib(server.pid());

  // Each attacker: a few hundred bytes, 20 x (SET of a key of its own +
  // LIST_KEYS), and it never reads.
  std::vector<UniqueFd> attackers;
  for (int i = 0; i < kAttackers; ++i) {
    attackers.push_back(attacker_connect(port));
    Bytes attack;
    Writer w(attack);
    w.u8(0).u32(store_protocol::kValidationMagic);
    for (int j = 0; j < 20; ++j) {
      q(w, V2Query::kSet).str(str_cat("a", i, "-", j)).str("x");
      q(w, V2Query::kListKeys);
    }
    send_all(attackers.back(), attack);
  }
  for (auto& s : attackers) wait_served(s);
  const Growth g = growth_since(server.pid(), base_kib);
  INFO("server resident set " << base_kib / 1024 << " MiB before; with " << kAttackers
                              << " attackers it grew by " << g.now_mib << " MiB (peak +"
                              << g.peak_mib << " MiB); budget " << kBudgetMiB << " MiB");
  // The budget; the store's current list and the one being built before
  // the budget is enforced; and what the allocator keeps of freed lists
  // (heap blocks it does not hand back). Without the budget: 16 lists,
  // about 240 MiB.
  const size_t bound_mib = kBudgetMiB + 5 * kBigMiB;
  CHECK(g.now_mib < bound_mib);
  CHECK(g.peak_mib < bound_mib);

  // The worst offenders were dropped, each named with what it held.
  const std::string err = server.wait_for_stderr("unsent replies", 30s);
  CHECK_THAT(err, Catch::Contains("127.0.0.1:") && Catch::Contains("bytes"));
  check_big_values_served(port);
  server.kill(SIGTERM);
  REQUIRE(server.wait(30s).ok());
}

TEST_CASE("TcpStore server: APPEND + GET from clients that never read pins no copy per request",
          "[tcp_store][flood][reply_budget]") {
  uint16_t port = 0;
  auto server =
      test::start_collie_store({"--max-reply-bytes", std::to_string(kBudgetMiB * kMiB)}, &port);
  auto setter = TcpStore::connect("127.0.0.1", port, {.timeout = 60s});
  setter->set("big", Bytes(kBigMiB * kMiB, 'v'));
  REQUIRE(setter->num_keys() == 1);  // a round trip: the SET is applied
  const size_t base_kib = resident_kib(server.pid());

  std::vector<UniqueFd> attackers;
  for (int i = 0; i < kAttackers; ++i) {
    attackers.push_back(attacker_connect(port));
    Bytes attack;
    Writer w(attack);
    w.u8(0).u32(store_protocol::kValidationMagic);
    for (int j = 0; j < 10; ++j) {
      q(w, V2Query::kAppend).str("big").str("x");
      q(w, V2Query::kGet).str("big");
    }
    send_all(attackers.back(), attack);
  }
  for (auto& s : attackers) wait_served(s);
  const Growth g = growth_since(server.pid(), base_kib);
  INFO("server resident set " << base_kib / 1024 << " MiB before; with " << kAttackers
                              << " attackers it grew by " << g.now_mib << " MiB (peak +"
                              << g.peak_mib << " MiB)");
  // Replies share the value, which grows in place: about one more copy of
  // it in all, not one per attacker (without that: 16 copies, about 240 MiB).
  CHECK(g.now_mib < 2 * kBigMiB + 16);
  CHECK(g.peak_mib < 2 * kBigMiB + 16);
  // Every attacker was served (none had to be dropped), slowly: each gets
  // the start of its first reply, the value's length.
  for (auto& s : attackers) {
    uint8_t length[8];
    REQUIRE(::recv(s.get(), length, 8, MSG_WAITALL) == 8);
    CHECK(store_protocol::load_u64(length) > kBigMiB * kMiB);
  }
  // The value is what was set plus one byte per APPEND served.
  const Bytes value = setter->get("big");
  CHECK(value.size() > kBigMiB * kMiB);
  CHECK(value.size() <= kBigMiB * kMiB + kAttackers * 10);
  check_big_values_served(port);
  server.kill(SIGTERM);
  REQUIRE(server.wait(30s).ok());
  CHECK_THAT(server.err(), !Catch::Contains("unsent replies"));
}

}  // namespace
}  // namespace collie
