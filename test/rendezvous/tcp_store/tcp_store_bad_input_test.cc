// The TcpStore server under bad input: each case drops the offending
// connection only, and a well-behaved client keeps being served. Raw sockets
// write the exact bytes.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <string>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/tcp_store/store_protocol.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/rendezvous/tcp_store/tcp_store_socket.h"
#include "collie/test/rendezvous/tcp_store/raw_store_client.h"
#include "collie/test/support/skip.h"

namespace collie {
namespace {

using namespace std::chrono_literals;
using store_protocol::Writer;
using test::check_still_serving;
using test::closed_by_server;
using test::raw_connect;
using test::resident_kib;
using test::send_raw;
using test::v2_hello;

TEST_CASE("TcpStore server: a first message that is not a TCPStore query is dropped",
          "[tcp_store][bad_input]") {
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  auto input = GENERATE(std::string("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"),
                        std::string("\xff\xfe\xfd garbage \x90\x91", 14),
                        std::string("SSH-2.0-OpenSSH_9.2\r\n"));
  StoreSocket s = raw_connect(server->port());
  send_raw(s, to_bytes(input));
  CHECK(closed_by_server(s));
  check_still_serving(server->port());
}

TEST_CASE("TcpStore server: an unknown query type after VALIDATE is dropped",
          "[tcp_store][bad_input]") {
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  StoreSocket s = raw_connect(server->port());
  Bytes b = v2_hello(77);
  b.push_back(0x42);
  send_raw(s, b);
  uint8_t nonce[4];
  REQUIRE(s.recv_exact(nonce, 4, Clock::now() + 10s).ok());  // the PING came first
  CHECK(store_protocol::load_u32(nonce) == 77);
  CHECK(closed_by_server(s));
  check_still_serving(server->port());
}

TEST_CASE("TcpStore server: a key or value over the cap closes that connection only",
          "[tcp_store][bad_input]") {
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0, .max_value_bytes = 4096});
  auto bystander = TcpStore::connect("127.0.0.1", server->port());
  bystander->set("before", "1");
  SECTION("declared value length over the cap, before any of it is sent") {
    StoreSocket s = raw_connect(server->port());
    Bytes b = v2_hello(1);
    Writer(b).u8(1).str("k").u64(4097);
    send_raw(s, b);
    uint8_t nonce[4];
    REQUIRE(s.recv_exact(nonce, 4, Clock::now() + 10s).ok());
    CHECK(closed_by_server(s));
  }
  SECTION("an absurd key length") {
    StoreSocket s = raw_connect(server->port());
    Bytes b = v2_hello(1);
    Writer(b).u8(3).u64(~uint64_t{0});
    send_raw(s, b);
    uint8_t nonce[4];
    REQUIRE(s.recv_exact(nonce, 4, Clock::now() + 10s).ok());
    CHECK(closed_by_server(s));
  }
  SECTION("through a client with a larger cap: the server drops it, the client reports it") {
    TcpStoreOptions options;
    options.max_value_bytes = 1 << 20;
    auto big = TcpStore::connect("127.0.0.1", server->port(), options);
    big->set("x", Bytes(8192, 1));  // sent; the server closes on reading it
    CHECK_THROWS_AS(big->add("y", 1), NetworkError);
  }
  SECTION("a client with the same cap refuses before sending") {
    TcpStoreOptions options;
    options.max_value_bytes = 4096;
    auto store = TcpStore::connect("127.0.0.1", server->port(), options);
    CHECK_THROWS_WITH(store->set("x", Bytes(4097, 1)), Catch::Contains("'x'") &&
                                                           Catch::Contains("4097 bytes") &&
                                                           Catch::Contains("cap of 4096"));
    CHECK(store->add("fine", 1) == 1);  // the connection is intact
  }
  CHECK(to_string(bystander->get("before")) == "1");
  bystander->set("still", "here");
  CHECK(bystander->check({"still"}));
  CHECK(!bystander->check({"x"}));
}

TEST_CASE("TcpStore server: a client dying mid-message is forgotten", "[tcp_store][bad_input]") {
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  for (int i = 0; i < 20; ++i) {
    StoreSocket s = raw_connect(server->port());
    Bytes b = v2_hello(i);
    Writer(b).u8(1).str("half").u64(1000);
    b.resize(b.size() + 10, 'x');  // 10 of 1000 value bytes, then gone
    send_raw(s, b);
    if (i % 2 == 0) {
      // And one that dies with a WAIT parked.
      StoreSocket w = raw_connect(server->port());
      Bytes wb = v2_hello(i);
      Writer(wb).u8(6).keys({"never"});
      send_raw(w, wb);
    }
  }
  check_still_serving(server->port());
  auto store = TcpStore::connect("127.0.0.1", server->port());
  CHECK(!store->check({"half"}));
}

TEST_CASE("TcpStore server: 1000 concurrent connections, memory bounded",
          "[tcp_store][bad_input]") {
  // Client and server share this process: 2 fds per connection.
  rlimit lim{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &lim) == 0);
  constexpr rlim_t kWanted = 4096;
  if (lim.rlim_cur < kWanted) {
    lim.rlim_cur = std::min<rlim_t>(kWanted, lim.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  constexpr int kConnections = 1000;
  if (lim.rlim_cur < 2 * kConnections + 100)
    test::skip_test(str_cat("RLIMIT_NOFILE hard limit ", lim.rlim_max, " is too low for ",
                            kConnections, " connections"));
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  const size_t rss_before = resident_kib();
  std::vector<StoreSocket> sockets;
  sockets.reserve(kConnections);
  for (int i = 0; i < kConnections; ++i) {
    sockets.push_back(raw_connect(server->port()));
    // Every connection declares a 32 MiB value (under the 64 MiB cap) and
    // sends only its first bytes: a server that allocated declared lengths
    // would need 32 GB here.
    Bytes b = v2_hello(static_cast<uint32_t>(i));
    Writer(b).u8(1).str("big" + std::to_string(i)).u64(uint64_t{32} << 20);
    b.resize(b.size() + 100, 'v');
    send_raw(sockets.back(), b);
  }
  // Each gets its own PING answer: all 1000 are being served.
  for (int i = 0; i < kConnections; ++i) {
    uint8_t nonce[4];
    REQUIRE(sockets[i].recv_exact(nonce, 4, Clock::now() + 30s).ok());
    REQUIRE(store_protocol::load_u32(nonce) == static_cast<uint32_t>(i));
  }
  check_still_serving(server->port());
  const size_t grown_mib = (resident_kib() - std::min(resident_kib(), rss_before)) / 1024;
  INFO("resident set grew by " << grown_mib << " MiB for 1000 connections");
  CHECK(grown_mib < 256);
  sockets.clear();
  check_still_serving(server->port());
}

}  // namespace
}  // namespace collie
