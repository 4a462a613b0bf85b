// TcpStoreState on its own, without sockets: torch 2.x's queues, LIST_KEYS
// and BARRIER as torch's server answers them (checked against torch 2.15's
// libuv server byte for byte, docs/store-protocol.md), and what becomes of
// a parked request when its connection goes away. Each request is applied
// in a known order, so who is woken, and who is not, is exact.
#include <catch2/catch.hpp>

#include <map>

#include "collie/base/error.h"
#include "collie/rendezvous/tcp_store/store_protocol.h"
#include "collie/rendezvous/tcp_store/tcp_store_state.h"

namespace collie {
namespace {

using store_protocol::Op;
using store_protocol::Request;
using Outcome = TcpStoreState::Outcome;

Bytes drain(ReplyQueue& q) {
  Bytes out;
  while (!q.empty()) {
    std::span<const uint8_t> spans[8];
    const size_t n = q.front(spans);
    size_t taken = 0;
    for (size_t i = 0; i < n; ++i) {
      out.insert(out.end(), spans[i].begin(), spans[i].end());
      taken += spans[i].size();
    }
    q.consume(taken);
  }
  return out;
}

// A state and what it delivered to each connection, as bytes.
struct Harness {
  std::map<ConnectionId, Bytes> delivered;
  TcpStoreState state{[this](ConnectionId c, ReplyQueue reply, bool) {
    Bytes b = drain(reply);
    delivered[c].insert(delivered[c].end(), b.begin(), b.end());
  }};

  // Applies a request; returns its immediate reply.
  Bytes apply(ConnectionId c, Op op, std::vector<std::string> keys = {},
              std::vector<std::string> values = {}, int64_t delta = 0,
              Outcome expected = Outcome::kDone) {
    Request r;
    r.op = op;
    r.dialect = store_protocol::Dialect::kV2;
    r.keys = std::move(keys);
    for (auto& v : values) r.values.push_back(to_bytes(v));
    r.delta = delta;
    ReplyQueue reply;
    CHECK(state.handle(c, std::move(r), reply) == expected);
    return drain(reply);
  }
  Bytes taken(ConnectionId c) { return std::exchange(delivered[c], {}); }
};

Bytes i64(int64_t v) {
  Bytes b;
  store_protocol::Writer(b).i64(v);
  return b;
}
Bytes i64_str(int64_t v, const std::string& s) {
  Bytes b = i64(v);
  store_protocol::Writer(b).str(s);
  return b;
}
// A GET's reply: the value as a string.
Bytes value(const std::string& s) {
  Bytes b;
  store_protocol::Writer(b).str(s);
  return b;
}
const Bytes kStop{store_protocol::kStopWaiting};

TEST_CASE("TcpStoreState: queues keep order, apart from the keys", "[tcp_store][state]") {
  Harness h;
  CHECK(h.apply(1, Op::kQueuePush, {"q"}, {"one"}).empty());  // no reply, as in torch
  h.apply(1, Op::kQueuePush, {"q"}, {""});
  h.apply(1, Op::kQueuePush, {"q"}, {std::string(100, 'x')});  // shared, not copied
  CHECK(h.apply(1, Op::kQueueLen, {"q"}) == i64(3));
  CHECK(h.apply(1, Op::kQueueLen, {"never"}) == i64(0));
  // A queue is not a key: not counted, not listed, not deleted, not read.
  CHECK(h.apply(1, Op::kNumKeys) == i64(0));
  CHECK(h.apply(1, Op::kListKeys) == i64(0));
  CHECK(h.apply(1, Op::kDeleteKey, {"q"}) == i64(0));
  h.apply(1, Op::kSet, {"q"}, {"a value"});
  CHECK(h.apply(1, Op::kQueueLen, {"q"}) == i64(3));
  // QUEUE_POP: the length before the pop, then the oldest element.
  CHECK(h.apply(1, Op::kQueuePop, {"q"}) == i64_str(3, "one"));
  CHECK(h.apply(1, Op::kQueuePop, {"q"}) == i64_str(2, ""));
  CHECK(h.apply(1, Op::kQueuePop, {"q"}) == i64_str(1, std::string(100, 'x')));
  CHECK(h.apply(1, Op::kQueuePop, {"q"}) == i64(0));       // empty: the length alone
  CHECK(h.apply(1, Op::kGet, {"q"}) == value("a value"));  // the key, untouched
}

TEST_CASE("TcpStoreState: WAIT and CHECK see a non-empty queue", "[tcp_store][state]") {
  Harness h;
  const Bytes ready{store_protocol::kCheckReady}, not_ready{store_protocol::kCheckNotReady};
  CHECK(h.apply(1, Op::kCheck, {"q"}) == not_ready);
  h.apply(1, Op::kQueuePush, {"q"}, {"x"});
  CHECK(h.apply(1, Op::kCheck, {"q"}) == ready);
  CHECK(h.apply(1, Op::kWait, {"q"}) == kStop);
  h.apply(1, Op::kQueuePop, {"q"});
  CHECK(h.apply(1, Op::kCheck, {"q"}) == not_ready);
  // A GET does not: it reads values, and parks until one is written.
  h.apply(2, Op::kQueuePush, {"g"}, {"x"});
  CHECK(h.apply(1, Op::kGet, {"g"}, {}, 0, Outcome::kBlocked).empty());
  h.apply(2, Op::kQueuePush, {"g"}, {"y"});
  CHECK(h.taken(1).empty());
  h.apply(2, Op::kSet, {"g"}, {"v"});
  CHECK(h.taken(1) == value("v"));
}

TEST_CASE("TcpStoreState: a push wakes the first WAIT in line, only one", "[tcp_store][state]") {
  Harness h;
  // torch's blocking queue_pop is WAIT on the name, then QUEUE_POP.
  for (ConnectionId c : {1, 2, 3}) h.apply(c, Op::kWait, {"q"}, {}, 0, Outcome::kParked);
  h.apply(9, Op::kQueuePush, {"q"}, {"a"});
  CHECK(h.taken(1) == kStop);
  CHECK(h.taken(2).empty());
  CHECK(h.taken(3).empty());
  h.apply(9, Op::kQueuePush, {"q"}, {"b"});
  CHECK(h.taken(2) == kStop);
  CHECK(h.taken(3).empty());
  // Waking pops nothing: the elements wait for the QUEUE_POPs.
  CHECK(h.apply(9, Op::kQueueLen, {"q"}) == i64(2));
  // A write of a value under the name wakes everyone, as any write does.
  h.apply(4, Op::kWait, {"q2"}, {}, 0, Outcome::kParked);
  h.apply(5, Op::kWait, {"q2"}, {}, 0, Outcome::kParked);
  h.apply(9, Op::kSet, {"q2"}, {"v"});
  CHECK(h.taken(4) == kStop);
  CHECK(h.taken(5) == kStop);
}

TEST_CASE("TcpStoreState: a popper that goes away or cancels is passed over",
          "[tcp_store][state]") {
  Harness h;
  h.apply(1, Op::kWait, {"q"}, {}, 0, Outcome::kParked);
  h.apply(2, Op::kWait, {"q"}, {}, 0, Outcome::kParked);
  h.apply(3, Op::kWait, {"q"}, {}, 0, Outcome::kParked);
  h.state.drop(1);  // its connection closed
  CHECK(h.apply(2, Op::kCancelWait) == Bytes{store_protocol::kWaitCanceled});
  h.apply(9, Op::kQueuePush, {"q"}, {"a"});
  CHECK(h.taken(1).empty());
  CHECK(h.taken(2).empty());
  CHECK(h.taken(3) == kStop);
  // A parked GET on the name is passed over too: a push is no value.
  h.apply(4, Op::kGet, {"r"}, {}, 0, Outcome::kBlocked);
  h.apply(5, Op::kWait, {"r"}, {}, 0, Outcome::kParked);
  h.apply(9, Op::kQueuePush, {"r"}, {"a"});
  CHECK(h.taken(4).empty());
  CHECK(h.taken(5) == kStop);
}

TEST_CASE("TcpStoreState: LIST_KEYS lists every key, sorted, as stored", "[tcp_store][state]") {
  Harness h;
  h.apply(1, Op::kSet, {"/b"}, {"1"});
  h.apply(1, Op::kSet, {"a"}, {"2"});
  h.apply(1, Op::kAdd, {"/c"}, {}, 4);
  Bytes expected = i64(3);
  store_protocol::Writer(expected).str("/b").str("/c").str("a");
  CHECK(h.apply(1, Op::kListKeys) == expected);
  CHECK(h.apply(2, Op::kListKeys) == expected);  // the shared encoding, again
  h.apply(1, Op::kDeleteKey, {"/b"});
  h.apply(1, Op::kSet, {std::string(80, 'k')}, {""});
  expected = i64(3);
  store_protocol::Writer(expected).str("/c").str("a").str(std::string(80, 'k'));
  CHECK(h.apply(1, Op::kListKeys) == expected);
}

TEST_CASE("TcpStoreState: BARRIER answers when the last participant arrives",
          "[tcp_store][state]") {
  Harness h;
  // A WAIT on the barrier's key, parked before anyone arrives, is released
  // with the barrier, not by the first arrival (torch's server does this).
  h.apply(7, Op::kWait, {"b"}, {}, 0, Outcome::kParked);
  CHECK(h.apply(1, Op::kBarrier, {"b"}, {}, 3, Outcome::kParked).empty());
  CHECK(h.apply(9, Op::kGet, {"b"}) == value("1"));  // the count, a plain key
  CHECK(h.apply(2, Op::kBarrier, {"b"}, {}, 3, Outcome::kParked).empty());
  CHECK(h.taken(1).empty());
  CHECK(h.taken(7).empty());
  CHECK(h.apply(3, Op::kBarrier, {"b"}, {}, 3) == kStop);
  CHECK(h.taken(1) == kStop);
  CHECK(h.taken(2) == kStop);
  CHECK(h.taken(7) == kStop);
  // The count is never reset: a later arrival passes at once.
  CHECK(h.apply(4, Op::kBarrier, {"b"}, {}, 3) == kStop);
  CHECK(h.apply(9, Op::kGet, {"b"}) == value("4"));
  CHECK(h.apply(9, Op::kAdd, {"b"}, {}, 10) == i64(14));
  // A world size of 1, 0 or less passes at once.
  for (int64_t world : {1, 0, -1}) CHECK(h.apply(5, Op::kBarrier, {"w"}, {}, world) == kStop);
}

TEST_CASE("TcpStoreState: a parked BARRIER is cancelled, dropped, or released by a write",
          "[tcp_store][state]") {
  Harness h;
  h.apply(1, Op::kBarrier, {"b"}, {}, 2, Outcome::kParked);
  CHECK(h.apply(1, Op::kCancelWait) == Bytes{store_protocol::kWaitCanceled});
  // Its arrival still counts (the key says 1): the next one completes it,
  // and the cancelled participant hears nothing.
  CHECK(h.apply(2, Op::kBarrier, {"b"}, {}, 2) == kStop);
  CHECK(h.taken(1).empty());

  h.apply(3, Op::kBarrier, {"c"}, {}, 2, Outcome::kParked);
  h.state.drop(3);
  CHECK(h.apply(4, Op::kBarrier, {"c"}, {}, 2) == kStop);
  CHECK(h.taken(3).empty());

  // Any write to the key releases the parked participants, as in torch.
  h.apply(5, Op::kBarrier, {"d"}, {}, 5, Outcome::kParked);
  h.apply(9, Op::kSet, {"d"}, {"7"});
  CHECK(h.taken(5) == kStop);

  // A key that does not hold a count is refused, naming it.
  h.apply(9, Op::kSet, {"text"}, {"not a number"});
  Request r;
  r.op = Op::kBarrier;
  r.keys = {"text"};
  r.delta = 2;
  ReplyQueue reply;
  CHECK_THROWS_WITH(h.state.handle(6, std::move(r), reply),
                    Catch::Contains("barrier on key 'text'") &&
                        Catch::Contains("'not a number' is not an integer"));
}

TEST_CASE("TcpStoreState: APPEND never grows a value past max_value_bytes") {
  std::map<ConnectionId, Bytes> delivered;
  TcpStoreState state([&](ConnectionId, ReplyQueue, bool) {}, 100);
  auto append = [&](const std::string& value) {
    Request r;
    r.op = Op::kAppend;
    r.keys = {"log"};
    r.values = {to_bytes(value)};
    ReplyQueue reply;
    return state.handle(1, std::move(r), reply);
  };
  append(std::string(60, 'a'));
  append(std::string(40, 'b'));  // exactly the cap
  CHECK_THROWS_WITH(append("c"), Catch::Contains("append on key 'log'") &&
                                     Catch::Contains("from 100 to 101 bytes") &&
                                     Catch::Contains("cap of 100"));
  Request get;
  get.op = Op::kGet;
  get.keys = {"log"};
  ReplyQueue reply;
  state.handle(2, std::move(get), reply);
  CHECK(drain(reply).size() == 8 + 100);  // the length field and the value, unchanged
}

}  // namespace
}  // namespace collie
