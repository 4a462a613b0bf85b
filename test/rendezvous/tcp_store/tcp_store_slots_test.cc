// ConnectionSlots: the TcpStore server's admission rules, without sockets.
#include <catch2/catch.hpp>

#include "collie/rendezvous/tcp_store/tcp_store_slots.h"

namespace collie {
namespace {

using namespace std::chrono_literals;
using Verdict = ConnectionSlots::Verdict;

TEST_CASE("ConnectionSlots, strict: pending connections have a quota and a deadline",
          "[tcp_store][slots]") {
  ConnectionSlots slots(
      {.max_connections = 2, .max_unauthenticated = 3, .handshake_timeout = 10s, .strict = true});
  const auto t0 = Clock::now();
  for (ConnectionId id = 1; id <= 3; ++id) {
    auto a = slots.arrive(id, t0 + std::chrono::seconds(id));
    CHECK(a.verdict == Verdict::kPending);
    CHECK_FALSE(a.evict);
  }
  // A fourth closes the oldest.
  auto a = slots.arrive(4, t0 + 4s);
  CHECK(a.verdict == Verdict::kPending);
  CHECK(a.evict == ConnectionId{1});
  CHECK(slots.pending() == 3);
  // Proven ones leave the pending pool, up to max_connections.
  CHECK(slots.admit(2));
  CHECK(slots.admit(2));  // again: still admitted
  CHECK(slots.admit(3));
  CHECK_FALSE(slots.admit(4));  // full
  CHECK(slots.admitted() == 2);
  slots.leave(4);
  // Deadlines, oldest first, and only those past it.
  slots.arrive(5, t0 + 5s);
  slots.arrive(6, t0 + 20s);
  CHECK(slots.overdue(t0 + 14s).empty());
  CHECK(slots.overdue(t0 + 15s) == std::vector<ConnectionId>{5});
  CHECK(slots.overdue(t0 + 31s) == std::vector<ConnectionId>{5, 6});
  // A closed admitted connection frees its slot.
  slots.leave(2);
  CHECK(slots.admit(6));
  CHECK(slots.overdue(t0 + 31s) == std::vector<ConnectionId>{5});
}

TEST_CASE("ConnectionSlots, not strict: every connection is admitted on arrival, up to the cap",
          "[tcp_store][slots]") {
  ConnectionSlots slots({.max_connections = 2, .max_unauthenticated = 1, .strict = false});
  const auto now = Clock::now();
  CHECK(slots.arrive(1, now).verdict == Verdict::kAdmitted);
  CHECK(slots.arrive(2, now).verdict == Verdict::kAdmitted);
  CHECK(slots.arrive(3, now).verdict == Verdict::kRefuseFull);
  CHECK(slots.admit(1));  // a compat-mode client that authenticated anyway
  CHECK(slots.overdue(now + 1h).empty());
  slots.leave(1);
  CHECK(slots.arrive(4, now).verdict == Verdict::kAdmitted);
}

}  // namespace
}  // namespace collie
