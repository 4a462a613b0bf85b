// TcpStore over real sockets: every operation in each dialect the client can
// speak to collie's server, parked requests, timeouts that name what was
// missing, connect backoff, address in use, threads sharing a client and
// processes rendezvousing through one server.
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <thread>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "collie/base/error.h"
#include "collie/rendezvous/tcp_store/store_protocol.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/test/support/child.h"
#include "collie/test/support/subprocess.h"

namespace collie {
namespace {

using namespace std::chrono_literals;

TcpStoreOptions options_for(StoreProtocol protocol, Timeout timeout = 60s) {
  TcpStoreOptions o;
  o.protocol = protocol;
  o.timeout = timeout;
  return o;
}

std::string str(const Bytes& b) { return to_string(b); }

TEST_CASE("TcpStore: every operation, in every dialect", "[tcp_store]") {
  auto protocol = GENERATE(StoreProtocol::kV2, StoreProtocol::kV1_13, StoreProtocol::kDetect);
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  REQUIRE(server->port() != 0);
  auto store = TcpStore::connect("127.0.0.1", server->port(), options_for(protocol));
  CHECK(store->protocol() ==
        (protocol == StoreProtocol::kV1_13 ? StoreProtocol::kV1_13 : StoreProtocol::kV2));

  store->set("a", "alpha");
  CHECK(str(store->get("a")) == "alpha");
  store->set("a", "");
  CHECK(store->get("a").empty());

  CHECK(store->add("n", 5) == 5);
  CHECK(store->add("n", -7) == -2);
  CHECK(str(store->get("n")) == "-2");  // stored as ASCII decimal, like torch

  // compare_set: torch's four cases.
  CHECK(str(store->compare_set("cs", as_span(""), as_span("first"))) == "first");
  CHECK(str(store->compare_set("missing", as_span("x"), as_span("y"))) == "x");
  CHECK(!store->check({"missing"}));
  CHECK(str(store->compare_set("cs", as_span("first"), as_span("second"))) == "second");
  CHECK(str(store->compare_set("cs", as_span("wrong"), as_span("third"))) == "second");

  CHECK(store->check({"a", "n"}));
  CHECK(!store->check({"a", "nope"}));
  store->wait({"a", "n", "cs"}, 5s);

  const int64_t before = store->num_keys();
  CHECK(before == 3);
  CHECK(store->delete_key("a"));
  CHECK(!store->delete_key("a"));
  CHECK(store->num_keys() == before - 1);

  store->append("log", as_span("x"));
  store->append("log", as_span("yz"));
  CHECK(str(store->get("log")) == "xyz");

  store->multi_set({"m1", "m2"}, {to_bytes("one"), to_bytes("two")});
  auto values = store->multi_get({"m2", "m1"});
  REQUIRE(values.size() == 2);
  CHECK(str(values[0]) == "two");
  CHECK(str(values[1]) == "one");

  // A value of some megabytes crosses many reads and writes intact.
  Bytes big(5 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 131 + 7);
  store->set("big", big);
  CHECK(store->get("big") == big);
}

TEST_CASE("TcpStore: a parked get never blocks other clients", "[tcp_store]") {
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  auto waiter = TcpStore::connect("127.0.0.1", server->port());
  auto other = TcpStore::connect("127.0.0.1", server->port());
  auto pending = std::async(std::launch::async, [&] { return str(waiter->get("late")); });
  // While the get is parked the server keeps serving the other client.
  for (int i = 0; i < 200; ++i) {
    other->set("k" + std::to_string(i), std::to_string(i));
    CHECK(other->add("count", 1) == i + 1);
  }
  CHECK(pending.wait_for(0s) != std::future_status::ready);
  other->set("late", "finally");
  CHECK(pending.get() == "finally");
}

TEST_CASE("TcpStore: a wait that times out names the keys that never came", "[tcp_store]") {
  auto protocol = GENERATE(StoreProtocol::kV2, StoreProtocol::kV1_13);
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  auto store = TcpStore::connect("127.0.0.1", server->port(), options_for(protocol));
  store->set("here", "1");
  try {
    store->wait({"here", "never1", "never2"}, 300ms);
    FAIL("wait did not time out");
  } catch (const TimeoutError& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains("[never1, never2]"));
    CHECK_THAT(msg, Catch::Contains(std::to_string(server->port())));
    CHECK_THAT(msg, Catch::Contains("(limit 300"));
  }
  // The client is usable afterwards: the wait was cancelled (2.x) or the
  // connection replaced (1.13), so no stale STOP_WAITING is read as a reply.
  store->set("never1", "late");
  store->set("never2", "late");
  CHECK(store->add("after", 2) == 2);
  CHECK(str(store->get("never1")) == "late");

  store->set_timeout(200ms);
  CHECK_THROWS_WITH(store->get("absent"), Catch::Contains("'absent'"));
}

TEST_CASE("TcpStore: clients retry until a late server comes up", "[tcp_store]") {
  // Find a free port, release it, and start the server only after the
  // client has begun retrying against it.
  uint16_t port;
  {
    auto probe = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
    port = probe->port();
  }
  auto client = std::async(std::launch::async, [&] {
    return TcpStore::connect("127.0.0.1", port, options_for(StoreProtocol::kDetect, 30s));
  });
  std::this_thread::sleep_for(300ms);  // not synchronization: the test passes either way
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = port});
  auto store = client.get();
  store->set("k", "v");
  CHECK(str(store->get("k")) == "v");
}

TEST_CASE("TcpStore: connect errors name host:port, elapsed and limit", "[tcp_store]") {
  uint16_t port;
  {
    auto probe = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
    port = probe->port();
  }
  try {
    TcpStore::connect("127.0.0.1", port, options_for(StoreProtocol::kV2, 400ms));
    FAIL("connected to a closed port");
  } catch (const TimeoutError& e) {
    CHECK_THAT(e.what(), Catch::Contains("127.0.0.1:" + std::to_string(port)));
    CHECK_THAT(e.what(), Catch::Contains("(limit 400"));
    CHECK_THAT(e.what(), Catch::Contains("refused"));
  }
}

// args: what ("connect", "wait", "get" or "barrier"), port. Connects (and waits for a key
// nobody sets) with a 1.5 s limit, reporting slow waits after 300 ms; the
// parent reads the lines it logged.
COLLIE_TEST_CHILD(slow_store_call) {
  TcpStoreOptions o = options_for(StoreProtocol::kDetect, 1500ms);
  o.report_after = 300ms;
  const auto port = static_cast<uint16_t>(std::stoi(args[1]));
  try {
    auto store = TcpStore::connect("127.0.0.1", port, o);
    if (args[0] == "wait") store->wait({"never_set_key", "other_missing_key"});
    if (args[0] == "get") store->get("never_set_key");
    if (args[0] == "barrier") store->barrier("never_barrier", 2);
  } catch (const TimeoutError& e) {
    std::fprintf(stderr, "TimeoutError: %s\n", e.what());
    return 0;
  }
  return 1;
}

TEST_CASE("TcpStore: a slow connect or wait says what it awaits while it waits", "[tcp_store]") {
  const std::string what = GENERATE("connect", "wait", "get", "barrier");
  INFO(what);
  std::unique_ptr<TcpStoreServer> server;
  uint16_t port;
  {
    auto probe = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
    port = probe->port();
  }
  if (what != "connect") server = TcpStoreServer::start({.host = "127.0.0.1", .port = port});
  auto child =
      test::Subprocess::spawn(test::child_argv("slow_store_call", {what, std::to_string(port)}),
                              {.env = {{"COLLIE_LOG_LEVEL", "INFO"}}});
  REQUIRE(child.wait(60s).ok());
  const std::string err = child.err();
  INFO(err);
  REQUIRE_THAT(err, Catch::Contains("TimeoutError"));
  const std::string where = "TcpStore 127.0.0.1:" + std::to_string(port);
  if (what == "connect") {
    // At the first retry, then while it goes on: what, how long, the limit.
    CHECK_THAT(err, Catch::Contains(" I ") && Catch::Contains(where + ": cannot connect yet"));
    CHECK_THAT(err, Catch::Contains(" W ") &&
                        Catch::Contains(where + ": still cannot connect after") &&
                        Catch::Contains("(limit 1.5"));
  } else if (what == "wait") {
    CHECK_THAT(err, Catch::Contains(" W ") &&
                        Catch::Contains(where + ": still waiting for key(s) [never_set_key, "
                                                "other_missing_key] after") &&
                        Catch::Contains("(limit 1.5"));
  } else if (what == "get") {
    CHECK_THAT(err, Catch::Contains(where + ": still waiting for key(s) [never_set_key] after"));
  } else {
    CHECK_THAT(err, Catch::Contains(where + ": still waiting for barrier 'never_barrier' (world "
                                            "size 2) after"));
    CHECK_THAT(err, Catch::Contains("1 of 2 arrived"));
  }
}

// Hosts a server and reads keys through a client, logging every request
// the server reads (COLLIE_LOG_LEVEL=TRACE); the calls measured are between
// the BEGIN and END lines.
COLLIE_TEST_CHILD(count_requests) {
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  auto store = TcpStore::connect("127.0.0.1", server->port());
  store->multi_set({"a", "b", "c"}, {to_bytes("1"), to_bytes("2"), to_bytes("3")});
  store->check({"a"});  // the MULTI_SET has been applied
  std::fprintf(stderr, "BEGIN\n");
  const auto values = store->multi_get({"c", "a", "b"});
  const auto one = store->get("b");
  std::fprintf(stderr, "END\n");
  return values == std::vector<Bytes>{to_bytes("3"), to_bytes("1"), to_bytes("2")} &&
                 one == to_bytes("2")
             ? 0
             : 1;
}

TEST_CASE("TcpStore: multi_get and get are one request each to collie's server", "[tcp_store]") {
  auto child = test::Subprocess::spawn(test::child_argv("count_requests"),
                                       {.env = {{"COLLIE_LOG_LEVEL", "TRACE"}}});
  REQUIRE(child.wait(60s).ok());
  const std::string err = child.err();
  const size_t begin = err.find("BEGIN"), end = err.find("END");
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  const std::string measured = err.substr(begin, end - begin);
  INFO(measured);
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t at = measured.find(needle); at != std::string::npos;
         at = measured.find(needle, at + 1))
      ++n;
    return n;
  };
  CHECK(count(" MULTI_GET (3 key(s))") == 1);
  CHECK(count(" GET (1 key(s))") == 1);
  CHECK(count(" WAIT ") == 0);
}

TEST_CASE("TcpStore: a server that goes away fails a parked wait at once", "[tcp_store]") {
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  auto store = TcpStore::connect("127.0.0.1", server->port());
  auto other = TcpStore::connect("127.0.0.1", server->port());
  auto waiting = std::async(std::launch::async, [&] { store->wait({"never"}, 120s); });
  other->set("sync", "1");
  // Whether the WAIT is parked on the server by now or still in flight, the
  // closed socket ends it at once, long before its 120 s limit.
  const auto start = Clock::now();
  server->stop();
  CHECK_THROWS_AS(waiting.get(), NetworkError);
  CHECK(Clock::now() - start < 60s);
}

TEST_CASE("TcpStore: a port in use is an error naming it", "[tcp_store]") {
  auto first = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  try {
    TcpStoreServer::start({.host = "127.0.0.1", .port = first->port()});
    FAIL("bound a port in use");
  } catch (const NetworkError& e) {
    CHECK_THAT(e.what(), Catch::Contains("127.0.0.1:" + std::to_string(first->port())));
    CHECK_THAT(e.what(), Catch::Contains("in use"));
  }
}

TEST_CASE("TcpStore: create(is_master) hosts the server on port 0", "[tcp_store]") {
  auto master = TcpStore::create("127.0.0.1", 0, /*is_master=*/true);
  REQUIRE(master->port() != 0);
  auto worker = TcpStore::create("127.0.0.1", master->port(), /*is_master=*/false);
  worker->set("from_worker", "w");
  CHECK(str(master->get("from_worker")) == "w");
}

TEST_CASE("TcpStore: threads share one client", "[tcp_store]") {
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  auto store = TcpStore::connect("127.0.0.1", server->port());
  constexpr int kThreads = 8, kAdds = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) {
        store->add("shared", 1);
        store->set("t" + std::to_string(t), std::to_string(i));
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(store->add("shared", 0) == kThreads * kAdds);
  CHECK(str(store->get("t3")) == std::to_string(kAdds - 1));
}

// A strict 2.x server in miniature, as torch >= 2.0 behaves: a connection
// whose first byte is not VALIDATE is closed; a validated one gets its PING
// echoed and GETNUMKEYS answered with 42. It records what it saw.
class Strict2xServer {
 public:
  Strict2xServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(fd_, 8) == 0);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~Strict2xServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  uint16_t port() const { return port_; }
  int dropped() const { return dropped_; }

 private:
  static bool read_exact(int fd, uint8_t* p, size_t n) {
    while (n > 0) {
      ssize_t got = ::recv(fd, p, n, 0);
      if (got <= 0) return false;
      p += got;
      n -= static_cast<size_t>(got);
    }
    return true;
  }
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int c = ::accept(fd_, nullptr, nullptr);
      timeval tv{10, 0};
      ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      uint8_t first = 0xff;
      if (!read_exact(c, &first, 1) || first != 0) {
        ++dropped_;
        ::close(c);
        continue;
      }
      uint8_t buf[9];
      if (read_exact(c, buf, 4) &&
          store_protocol::load_u32(buf) == store_protocol::kValidationMagic &&
          read_exact(c, buf, 5) && buf[0] == 13) {
        ::send(c, buf + 1, 4, MSG_NOSIGNAL);  // the nonce back
        while (read_exact(c, buf, 1) && buf[0] == 7) {
          Bytes reply;
          store_protocol::Writer(reply).i64(42);
          ::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
        }
      }
      ::close(c);
    }
  }
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> dropped_{0};
  std::thread thread_;
};

TEST_CASE("TcpStore: kDetect finds a strict 2.x server by its dropping the probe", "[tcp_store]") {
  Strict2xServer server;
  auto store = TcpStore::connect("127.0.0.1", server.port(), options_for(StoreProtocol::kDetect));
  CHECK(store->protocol() == StoreProtocol::kV2);
  CHECK(store->num_keys() == 42);
  CHECK(server.dropped() == 1);  // the probe's connection, nothing else
}

COLLIE_TEST_CHILD(tcp_store_rank) {
  // args: port, rank, world
  const auto port = static_cast<uint16_t>(std::stoi(args.at(0)));
  const int rank = std::stoi(args.at(1)), world = std::stoi(args.at(2));
  auto store = TcpStore::connect("127.0.0.1", port, options_for(StoreProtocol::kDetect, 60s));
  store->set("rank/" + std::to_string(rank), std::to_string(::getpid()));
  store->add("joined", 1);
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back("rank/" + std::to_string(r));
  store->wait(keys);
  // Everyone sees everyone.
  for (const auto& k : keys)
    if (store->get(k).empty()) return 2;
  return 0;
}

TEST_CASE("TcpStore: processes rendezvous through one server", "[tcp_store]") {
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  constexpr int kWorld = 6;
  std::vector<test::Subprocess> ranks;
  for (int r = 0; r < kWorld; ++r) {
    ranks.push_back(test::Subprocess::spawn(test::child_argv(
        "tcp_store_rank",
        {std::to_string(server->port()), std::to_string(r), std::to_string(kWorld)})));
  }
  for (auto& p : ranks) {
    auto status = p.wait(120s);
    INFO(p.err());
    CHECK(status.ok());
  }
  auto store = TcpStore::connect("127.0.0.1", server->port());
  CHECK(store->add("joined", 0) == kWorld);
}

}  // namespace
}  // namespace collie
