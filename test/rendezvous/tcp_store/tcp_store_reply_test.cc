// ReplyQueue: the server's unsent replies, small fields owned and large
// values shared with the store. Whatever the cut of the writes, the bytes
// that come out are the TCPStore encoding, and size() counts them.
#include <catch2/catch.hpp>

#include <array>

#include "collie/rendezvous/tcp_store/store_protocol.h"
#include "collie/rendezvous/tcp_store/tcp_store_reply.h"

namespace collie {
namespace {

using store_protocol::Writer;

// Drains the queue `step` bytes at a time, as partial socket writes would.
Bytes drain(ReplyQueue& q, size_t step) {
  Bytes out;
  while (!q.empty()) {
    std::array<std::span<const uint8_t>, 3> spans;
    const size_t n = q.front(spans);
    REQUIRE(n > 0);
    size_t take = 0;
    for (size_t i = 0; i < n && take < step; ++i) {
      const size_t part = std::min(step - take, spans[i].size());
      out.insert(out.end(), spans[i].begin(), spans[i].begin() + static_cast<ptrdiff_t>(part));
      take += part;
    }
    const size_t before = q.size();
    q.consume(take);
    REQUIRE(q.size() == before - take);
  }
  return out;
}

TEST_CASE("ReplyQueue: fields and shared values come out as the TCPStore encoding",
          "[tcp_store][reply]") {
  const size_t step = GENERATE(1, 7, 64, 1000, 100000);
  auto big = std::make_shared<const Bytes>(5000, uint8_t{0xab});
  auto small = std::make_shared<const Bytes>(Bytes{1, 2, 3});

  ReplyQueue q;
  Writer(q.fields()).u8(0).i64(-2);
  q.value(big);
  q.value(small);
  q.value(big);
  ReplyQueue parked;
  Writer(parked.fields()).u8(store_protocol::kStopWaiting);
  parked.value(big);
  q.splice(std::move(parked));
  CHECK(parked.empty());
  q.append(Bytes{9, 9});

  Bytes expected;
  Writer(expected).u8(0).i64(-2).bytes(*big).bytes(*small).bytes(*big);
  Writer(expected).u8(store_protocol::kStopWaiting).bytes(*big).u8(9).u8(9);
  CHECK(q.size() == expected.size());
  CHECK(drain(q, step) == expected);
  CHECK(q.size() == 0);
  // A value is shared, not copied: only the queue and this test held it.
  CHECK(big.use_count() == 1);
}

}  // namespace
}  // namespace collie
