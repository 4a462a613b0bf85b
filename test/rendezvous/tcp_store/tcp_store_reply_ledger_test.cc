// ReplyLedger with TcpStoreState, without sockets: what unsent replies hold
// beyond the store's own values is counted exactly (a buffer the store let
// go of, once, until the last reply lets go of it), a value the store still
// holds costs nothing however many replies carry it, and an APPEND behind a
// reply grows the value in place without changing what the reply sends.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "collie/rendezvous/tcp_store/store_protocol.h"
#include "collie/rendezvous/tcp_store/tcp_store_reply.h"
#include "collie/rendezvous/tcp_store/tcp_store_state.h"

namespace collie {
namespace {

using store_protocol::Op;
using store_protocol::Request;

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

struct Harness {
  ReplyLedger ledger;  // outlives the queues and the state
  TcpStoreState state{[](ConnectionId, ReplyQueue, bool) {}, size_t{64} << 20, &ledger};

  void apply(ReplyQueue& reply, Op op, std::vector<std::string> keys = {},
             std::vector<Bytes> values = {}) {
    Request r;
    r.op = op;
    r.dialect = store_protocol::Dialect::kV2;
    r.keys = std::move(keys);
    r.values = std::move(values);
    REQUIRE(state.handle(1, std::move(r), reply) == TcpStoreState::Outcome::kDone);
  }
  ReplyQueue tracked() {
    ReplyQueue q;
    q.track(&ledger);
    return q;
  }
};

Bytes encoded(const Bytes& value) {
  Bytes b;
  store_protocol::Writer(b).bytes(value);
  return b;
}

TEST_CASE("ReplyLedger: a value the store still holds costs nothing, one it let go of is counted",
          "[tcp_store][reply_budget]") {
  Harness h;
  const Bytes big(100'000, 'v');
  ReplyQueue unread;
  ReplyQueue seen = h.tracked();
  h.apply(unread, Op::kSet, {"k"}, {big});
  unread = h.tracked();
  ReplyQueue other = h.tracked();
  h.apply(unread, Op::kGet, {"k"});
  h.apply(other, Op::kGet, {"k"});
  CHECK(h.ledger.retired_bytes() == 0);
  CHECK(unread.held(h.ledger) == 8);  // its length field only

  // Overwritten: the old value is the replies' alone, counted once.
  h.apply(seen, Op::kSet, {"k"}, {Bytes(10, 'n')});
  CHECK(h.ledger.retired_bytes() == big.size());
  CHECK(unread.held(h.ledger) == 8 + big.size());
  CHECK(drain(other) == encoded(big));
  CHECK(h.ledger.retired_bytes() == big.size());
  CHECK(drain(unread) == encoded(big));
  CHECK(h.ledger.retired_bytes() == 0);
  CHECK(h.ledger.retired_count() == 0);
}

TEST_CASE("ReplyLedger: outdated key lists, deleted values and popped elements are counted",
          "[tcp_store][reply_budget]") {
  Harness h;
  ReplyQueue q = h.tracked();
  h.apply(q, Op::kSet, {std::string(1000, 'a')}, {Bytes{1}});
  h.apply(q, Op::kListKeys);
  const size_t list = q.size();
  CHECK(h.ledger.retired_bytes() == 0);
  h.apply(q, Op::kSet, {"b"}, {Bytes(500, 'b')});  // a new key: the list is outdated
  CHECK(h.ledger.retired_bytes() == list);
  h.apply(q, Op::kGet, {"b"});
  h.apply(q, Op::kDeleteKey, {"b"});
  CHECK(h.ledger.retired_bytes() == list + 500);
  h.apply(q, Op::kQueuePush, {"q"}, {Bytes(300, 'q')});
  h.apply(q, Op::kQueuePop, {"q"});
  CHECK(h.ledger.retired_bytes() == list + 500 + 300);
  CHECK(q.held(h.ledger) == q.owned_size() + list + 500 + 300);
  q.clear();
  CHECK(h.ledger.retired_bytes() == 0);
}

TEST_CASE("TcpStoreState: APPEND grows a value in place behind the replies that carry it",
          "[tcp_store][reply_budget]") {
  Harness h;
  const Bytes big(100'000, 'v');
  ReplyQueue q = h.tracked();
  h.apply(q, Op::kSet, {"k"}, {big});
  // The first APPEND while a reply holds the full value moves it into a
  // buffer with room; the next ones fill that room, copying nothing.
  std::vector<ReplyQueue> readers;
  for (int i = 0; i < 20; ++i) {
    readers.push_back(h.tracked());
    h.apply(readers.back(), Op::kGet, {"k"});
    h.apply(q, Op::kAppend, {"k"}, {Bytes{uint8_t('0' + i % 10)}});
  }
  // One copy let go of (the first buffer, full), however many readers.
  CHECK(h.ledger.retired_bytes() == big.size());
  CHECK(h.ledger.retired_count() == 1);
  // Each reader gets the value as it was when it asked, nothing appended later.
  Bytes expected = big;
  for (int i = 0; i < 20; ++i) {
    CHECK(drain(readers[i]) == encoded(expected));
    expected.push_back(uint8_t('0' + i % 10));
  }
  ReplyQueue last = h.tracked();
  h.apply(last, Op::kGet, {"k"});
  CHECK(drain(last) == encoded(expected));
  CHECK(h.ledger.retired_bytes() == 0);
}

}  // namespace
}  // namespace collie
