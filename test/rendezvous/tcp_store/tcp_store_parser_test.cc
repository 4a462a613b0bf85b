// The TcpStore server's parser on its own: exact bytes of each dialect,
// incremental input, the caps, and a replay of the fuzz corpus.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "collie/base/error.h"
#include "collie/rendezvous/tcp_store/store_protocol.h"
#include "collie/test/fuzz/store_parser_driver.h"

namespace collie {
namespace {

using namespace store_protocol;
using Status = ParseResult::Status;

Bytes validate() {
  Bytes b;
  Writer(b).u8(0).u32(kValidationMagic);
  return b;
}

ParseResult parse(const Bytes& in, Dialect d, Limits limits = {}) {
  return parse_request(in, d, limits);
}

TEST_CASE("parser: VALIDATE starts the 2.x dialect; PING carries a nonce", "[tcp_store][parser]") {
  Bytes in = validate();
  REQUIRE(in == Bytes{0x00, 0xCE, 0xF7, 0x85, 0x3C});  // little-endian magic
  Writer(in).u8(13).u32(0xA1B2C3D4);
  auto r = parse(in, Dialect::kUnknown);
  REQUIRE(r.status == Status::kRequest);
  CHECK(r.request.op == Op::kValidate);
  CHECK(r.request.dialect == Dialect::kV2);
  CHECK(r.consumed == 5);
  auto p = parse(Bytes(in.begin() + 5, in.end()), Dialect::kV2);
  REQUIRE(p.status == Status::kRequest);
  CHECK(p.request.op == Op::kPing);
  CHECK(p.request.nonce == 0xA1B2C3D4);
}

TEST_CASE("parser: every 2.x query type parses its torch layout", "[tcp_store][parser]") {
  struct Case {
    Bytes bytes;
    Op op;
    size_t keys;
    size_t values;
  };
  auto make = [](auto fn) {
    Bytes b;
    Writer w(b);
    fn(w);
    return b;
  };
  std::vector<Case> cases = {
      {make([](Writer& w) { w.u8(1).str("k").str("v"); }), Op::kSet, 1, 1},
      {make([](Writer& w) { w.u8(2).str("k").str("").str("d"); }), Op::kCompareSet, 1, 2},
      {make([](Writer& w) { w.u8(3).str("k"); }), Op::kGet, 1, 0},
      {make([](Writer& w) { w.u8(4).str("k").i64(-3); }), Op::kAdd, 1, 0},
      {make([](Writer& w) {
         w.u8(5).keys({"a", "b"});
       }),
       Op::kCheck, 2, 0},
      {make([](Writer& w) {
         w.u8(6).keys({"a", "b", "c"});
       }),
       Op::kWait, 3, 0},
      {make([](Writer& w) { w.u8(7); }), Op::kNumKeys, 0, 0},
      {make([](Writer& w) { w.u8(8).str("k"); }), Op::kDeleteKey, 1, 0},
      {make([](Writer& w) { w.u8(9).str("k").str("tail"); }), Op::kAppend, 1, 1},
      {make([](Writer& w) {
         w.u8(10).keys({"a", "b"});
       }),
       Op::kMultiGet, 2, 0},
      {make([](Writer& w) { w.u8(11).u64(2).str("a").str("1").str("b").str("2"); }), Op::kMultiSet,
       2, 2},
      {make([](Writer& w) { w.u8(12); }), Op::kCancelWait, 0, 0},
      {make([](Writer& w) { w.u8(13).u32(5); }), Op::kPing, 0, 0},
      {make([](Writer& w) { w.u8(14).str("q").str("v"); }), Op::kQueuePush, 1, 1},
      {make([](Writer& w) { w.u8(15).str("q"); }), Op::kQueuePop, 1, 0},
      {make([](Writer& w) { w.u8(16).str("q"); }), Op::kQueueLen, 1, 0},
      {make([](Writer& w) { w.u8(17); }), Op::kListKeys, 0, 0},
      {make([](Writer& w) { w.u8(18).str("b").i64(4); }), Op::kBarrier, 1, 0},
  };
  for (const auto& c : cases) {
    INFO(op_name(c.op));
    auto r = parse(c.bytes, Dialect::kV2);
    REQUIRE(r.status == Status::kRequest);
    CHECK(r.request.op == c.op);
    CHECK(r.consumed == c.bytes.size());
    CHECK(r.request.keys.size() == c.keys);
    CHECK(r.request.values.size() == c.values);
    CHECK(query_byte(c.op, Dialect::kV2) == c.bytes[0]);
    // Every strict prefix asks for more, never for less than it has.
    for (size_t n = 0; n < c.bytes.size(); ++n) {
      auto partial = parse(Bytes(c.bytes.begin(), c.bytes.begin() + n), Dialect::kV2);
      REQUIRE(partial.status == Status::kNeedMore);
      CHECK(partial.need_bytes > n);
      CHECK(partial.need_bytes <= c.bytes.size());
    }
  }
  auto add = parse(cases[3].bytes, Dialect::kV2);
  CHECK(add.request.delta == -3);
  auto barrier = parse(cases.back().bytes, Dialect::kV2);
  CHECK(barrier.request.delta == 4);  // the world size
}

TEST_CASE("parser: torch 2.11/2.15 clients' bytes for the queues, LIST_KEYS and BARRIER",
          "[tcp_store][parser]") {
  // Captured between a torch 2.15 client and its own libuv server:
  // queue_push("q", "xy"), queue_pop("q", False), queue_len("q"),
  // list_keys(), barrier("b", 1). torch puts "/" before every key.
  const Bytes push{0x0e, 2, 0, 0, 0, 0, 0, 0, 0, '/', 'q', 2, 0, 0, 0, 0, 0, 0, 0, 'x', 'y'};
  const Bytes pop{0x0f, 2, 0, 0, 0, 0, 0, 0, 0, '/', 'q'};
  const Bytes len{0x10, 2, 0, 0, 0, 0, 0, 0, 0, '/', 'q'};
  const Bytes list{0x11};
  const Bytes barrier{0x12, 2, 0, 0, 0, 0, 0, 0, 0, '/', 'b', 1, 0, 0, 0, 0, 0, 0, 0};
  Bytes stream;
  for (const Bytes* b : {&push, &pop, &len, &list, &barrier})
    stream.insert(stream.end(), b->begin(), b->end());
  std::vector<Request> parsed;
  for (size_t at = 0; at < stream.size();) {
    auto r = parse(Bytes(stream.begin() + static_cast<ptrdiff_t>(at), stream.end()), Dialect::kV2);
    REQUIRE(r.status == Status::kRequest);
    at += r.consumed;
    parsed.push_back(std::move(r.request));
  }
  REQUIRE(parsed.size() == 5);
  CHECK(parsed[0].op == Op::kQueuePush);
  CHECK(parsed[0].keys == std::vector<std::string>{"/q"});
  CHECK(parsed[0].values == std::vector<Bytes>{to_bytes("xy")});
  CHECK(parsed[1].op == Op::kQueuePop);
  CHECK(parsed[2].op == Op::kQueueLen);
  CHECK(parsed[3].op == Op::kListKeys);
  CHECK(parsed[4].op == Op::kBarrier);
  CHECK(parsed[4].keys == std::vector<std::string>{"/b"});
  CHECK(parsed[4].delta == 1);
  // 1.13 has none of them: there 14 is an unknown query type, and a client
  // cannot encode them.
  for (Op op : {Op::kQueuePush, Op::kQueuePop, Op::kQueueLen, Op::kListKeys, Op::kBarrier}) {
    CHECK(!dialect_has(op, Dialect::kV1_13));
    CHECK_THROWS_WITH(query_byte(op, Dialect::kV1_13), Catch::Contains(op_name(op)));
  }
  auto r = parse(push, Dialect::kV1_13);
  REQUIRE(r.status == Status::kError);
  CHECK_THAT(r.error, Catch::Contains("unknown 1.13 query type 0x0e"));
  // Past BARRIER, 2.x knows nothing either.
  r = parse(Bytes{19}, Dialect::kV2);
  REQUIRE(r.status == Status::kError);
  CHECK_THAT(r.error, Catch::Contains("unknown 2.x query type 0x13"));
}

TEST_CASE("parser: 1.13 numbering, and a first message decides the dialect",
          "[tcp_store][parser]") {
  // torch 1.13's first message from a client: ADD "init/" 1.
  Bytes add;
  Writer(add).u8(3).str("init/").i64(1);
  auto r = parse(add, Dialect::kUnknown);
  REQUIRE(r.status == Status::kRequest);
  CHECK(r.request.op == Op::kAdd);
  CHECK(r.request.dialect == Dialect::kV1_13);
  // 1.13 SET is 0x00 like VALIDATE; without the magic it is a SET.
  Bytes set;
  Writer(set).u8(0).str("/a").str("1");
  r = parse(set, Dialect::kUnknown);
  REQUIRE(r.status == Status::kRequest);
  CHECK(r.request.op == Op::kSet);
  CHECK(r.request.dialect == Dialect::kV1_13);
  CHECK(r.request.keys == std::vector<std::string>{"/a"});
  // 1.13: 6 is GETNUMKEYS, 7 WATCH_KEY, 8 DELETE_KEY.
  CHECK(parse(Bytes{6}, Dialect::kV1_13).request.op == Op::kNumKeys);
  Bytes del;
  Writer(del).u8(8).str("k");
  CHECK(parse(del, Dialect::kV1_13).request.op == Op::kDeleteKey);
  CHECK(!dialect_has(Op::kAppend, Dialect::kV1_13));
  CHECK_THROWS_AS(query_byte(Op::kMultiGet, Dialect::kV1_13), InvalidArgument);
}

TEST_CASE("parser: the dialect probe is recognized only as a whole", "[tcp_store][parser]") {
  Bytes probe;
  Writer(probe).u8(4).keys({kProbeKey});
  auto r = parse(probe, Dialect::kUnknown);
  REQUIRE(r.status == Status::kRequest);
  CHECK(r.request.op == Op::kProbe);
  CHECK(r.request.dialect == Dialect::kUnknown);
  // Inside an established 1.13 connection it is an ordinary CHECK.
  CHECK(parse(probe, Dialect::kV1_13).request.op == Op::kCheck);
}

TEST_CASE("parser: bad input is an error with a reason", "[tcp_store][parser]") {
  auto http = to_bytes("GET / HTTP/1.1\r\n\r\n");
  auto r = parse(http, Dialect::kUnknown);
  REQUIRE(r.status == Status::kError);
  CHECK_THAT(r.error, Catch::Contains("0x47 ('G')"));
  r = parse(Bytes{42}, Dialect::kV2);
  REQUIRE(r.status == Status::kError);
  CHECK_THAT(r.error, Catch::Contains("unknown 2.x query type 0x2a"));
  CHECK(parse(validate(), Dialect::kV2).status == Status::kError);  // VALIDATE only first

  // A declared length over the cap fails as soon as the length is seen,
  // before any of the value has arrived (nothing is allocated for it).
  Limits small;
  small.max_value_bytes = 1024;
  Bytes big;
  Writer(big).u8(1).str("k").u64(1025);
  r = parse(big, Dialect::kV2, small);
  REQUIRE(r.status == Status::kError);
  CHECK_THAT(r.error, Catch::Contains("value of 1025 bytes exceeds the cap of 1024"));
  Bytes huge;
  Writer(huge).u8(5).u64(uint64_t{1} << 62);
  r = parse(huge, Dialect::kV2);
  REQUIRE(r.status == Status::kError);
  CHECK_THAT(r.error, Catch::Contains("key count"));
}

TEST_CASE("parser: the fuzz corpus replays cleanly", "[tcp_store][parser]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(COLLIE_SOURCE_DIR) / "test/fuzz/corpus/store_parser";
  REQUIRE(fs::is_directory(dir));
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    Bytes data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    INFO(entry.path().filename().string());
    REQUIRE_NOTHROW(fuzz::fuzz_store_parser(data.data(), data.size()));
    // And with every chunking, not only the one the file picks.
    for (uint8_t chunk = 0; chunk < 17 && data.size() >= 2; ++chunk) {
      Bytes copy = data;
      copy[1] = chunk;
      REQUIRE_NOTHROW(fuzz::fuzz_store_parser(copy.data(), copy.size()));
    }
    ++files;
  }
  CHECK(files >= 10);
}

}  // namespace
}  // namespace collie
