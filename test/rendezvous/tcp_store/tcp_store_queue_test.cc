// TcpStore's share of torch 2.x's later operations over real sockets,
// collie's client against collie's server: queues (torch 2.11's
// queue_push/pop/len), list_keys and barrier (torch 2.15). The server's
// side of each, request by request, is in tcp_store_state_test.cc; torch on
// either side is in torch2_interop_test.cc.
#include <catch2/catch.hpp>

#include <algorithm>
#include <future>
#include <set>
#include <thread>

#include "collie/base/error.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"

namespace collie {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<TcpStore> connect(uint16_t port, StoreProtocol protocol = StoreProtocol::kDetect) {
  TcpStoreOptions o;
  o.protocol = protocol;
  o.timeout = 60s;
  return TcpStore::connect("127.0.0.1", port, o);
}

std::string str(const Bytes& b) { return to_string(b); }

TEST_CASE("TcpStore: queues keep order and stay apart from the keys", "[tcp_store]") {
  auto protocol = GENERATE(StoreProtocol::kDetect, StoreProtocol::kV2);
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  auto store = connect(server->port(), protocol);

  store->queue_push("jobs", "first");
  store->queue_push("jobs", "");
  Bytes big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7 + 1);
  store->queue_push("jobs", big);
  CHECK(store->queue_len("jobs") == 3);
  CHECK(store->queue_len("nothing") == 0);

  // A queue is no key: not counted, not listed, and a key may share its name.
  store->set("jobs", "a key");
  store->set("a", "1");
  CHECK(store->num_keys() == 2);
  CHECK(store->list_keys() == std::vector<std::string>{"a", "jobs"});

  CHECK(str(store->queue_pop("jobs")) == "first");
  CHECK(store->try_queue_pop("jobs") == std::optional<Bytes>(Bytes{}));
  CHECK(store->queue_pop("jobs", 5s) == big);
  CHECK(store->try_queue_pop("jobs") == std::nullopt);
  CHECK(store->queue_len("jobs") == 0);
  CHECK(str(store->get("jobs")) == "a key");

  // list_keys: every key, sorted, verbatim; deleted ones gone.
  store->add("/torch/style", 1);
  CHECK(store->delete_key("a"));
  CHECK(store->list_keys() == std::vector<std::string>{"/torch/style", "jobs"});
}

TEST_CASE("TcpStore: a blocking queue_pop waits for a push from another client", "[tcp_store]") {
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  auto popper = connect(server->port());
  auto pusher = connect(server->port());
  auto popped = std::async(std::launch::async, [&] { return str(popper->queue_pop("work")); });
  // While the pop waits, the server serves everyone else.
  for (int i = 0; i < 100; ++i) CHECK(pusher->add("busy", 1) == i + 1);
  pusher->queue_push("work", "item");
  CHECK(popped.get() == "item");
  CHECK(pusher->queue_len("work") == 0);
}

TEST_CASE("TcpStore: poppers on several clients each take one element", "[tcp_store]") {
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  constexpr int kPoppers = 5;
  std::vector<std::unique_ptr<TcpStore>> clients;
  for (int i = 0; i < kPoppers; ++i) clients.push_back(connect(server->port()));
  std::vector<std::future<std::string>> popped;
  for (auto& c : clients) {
    popped.push_back(
        std::async(std::launch::async, [&c] { return str(c->queue_pop("tasks", 60s)); }));
  }
  // A non-blocking popper competes for the same elements: a blocking pop
  // that loses an element to it waits again instead of failing.
  auto pusher = connect(server->port());
  std::set<std::string> taken;
  for (int i = 0; i < kPoppers + 3; ++i) pusher->queue_push("tasks", "t" + std::to_string(i));
  for (int i = 0; i < 3;) {
    if (auto v = pusher->try_queue_pop("tasks")) {
      taken.insert(str(*v));
      ++i;
    } else {
      std::this_thread::yield();  // the poppers took them first: wait for those left
    }
  }
  for (auto& f : popped) taken.insert(f.get());
  CHECK(taken.size() == kPoppers + 3);  // every element once, none twice
  CHECK(pusher->queue_len("tasks") == 0);
}

TEST_CASE("TcpStore: a queue_pop that times out names the queue; the client goes on",
          "[tcp_store]") {
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  auto store = connect(server->port());
  try {
    store->queue_pop("empty_queue", 300ms);
    FAIL("queue_pop did not time out");
  } catch (const TimeoutError& e) {
    CHECK_THAT(e.what(), Catch::Contains("queue_pop of queue 'empty_queue' timed out"));
    CHECK_THAT(e.what(), Catch::Contains("(limit 300"));
    CHECK_THAT(e.what(), Catch::Contains(std::to_string(server->port())));
  }
  // The WAIT was cancelled: a later push is not taken by a ghost.
  store->queue_push("empty_queue", "late");
  CHECK(store->queue_len("empty_queue") == 1);
  CHECK(str(store->queue_pop("empty_queue")) == "late");

  // A key of the queue's name satisfies the WAIT but is no element: the
  // pop still waits for one, and times out.
  store->set("named_like_a_key", "v");
  CHECK_THROWS_AS(store->queue_pop("named_like_a_key", 300ms), TimeoutError);
  CHECK(store->add("after", 1) == 1);
}

TEST_CASE("TcpStore: barrier releases every participant once the last arrives", "[tcp_store]") {
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  constexpr int kWorld = 4;
  std::vector<std::unique_ptr<TcpStore>> clients;
  for (int i = 0; i < kWorld; ++i) clients.push_back(connect(server->port()));
  for (const std::string round : {"round/0", "round/1"}) {
    std::vector<std::future<void>> arrived;
    for (auto& c : clients) {
      arrived.push_back(
          std::async(std::launch::async, [&c, round] { c->barrier(round, kWorld, 60s); }));
    }
    for (auto& f : arrived) f.get();
    CHECK(str(clients[0]->get(round)) == std::to_string(kWorld));  // the count of arrivals
  }
  // One participant is a world of its own.
  clients[0]->barrier("alone", 1);
  CHECK_THROWS_AS(clients[0]->barrier("bad", 0), InvalidArgument);
}

TEST_CASE("TcpStore: a barrier that times out names the key and who arrived", "[tcp_store]") {
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  auto store = connect(server->port());
  auto other = connect(server->port());
  try {
    store->barrier("lonely", 3, 300ms);
    FAIL("barrier did not time out");
  } catch (const TimeoutError& e) {
    CHECK_THAT(e.what(), Catch::Contains("barrier 'lonely' (world size 3) timed out"));
    CHECK_THAT(e.what(), Catch::Contains("(limit 300"));
    CHECK_THAT(e.what(), Catch::Contains("1 of 3 arrived"));
  }
  // The barrier was cancelled, not forgotten: its arrival still counts, and
  // the client goes on.
  CHECK(store->add("after", 1) == 1);
  auto second = std::async(std::launch::async, [&] { other->barrier("lonely", 3, 60s); });
  store->barrier("lonely", 3, 60s);
  second.get();
}

TEST_CASE("TcpStore: the 1.13 dialect has no queues, list_keys or barrier", "[tcp_store]") {
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  auto store = connect(server->port(), StoreProtocol::kV1_13);
  CHECK_THROWS_WITH(store->queue_push("q", "v"), Catch::Contains("1.13 has no QUEUE_PUSH"));
  CHECK_THROWS_WITH(store->queue_pop("q", 60s), Catch::Contains("1.13 has no QUEUE_POP"));
  CHECK_THROWS_WITH(store->try_queue_pop("q"), Catch::Contains("1.13 has no QUEUE_POP"));
  CHECK_THROWS_WITH(store->queue_len("q"), Catch::Contains("1.13 has no QUEUE_LEN"));
  CHECK_THROWS_WITH(store->list_keys(), Catch::Contains("1.13 has no LIST_KEYS"));
  CHECK_THROWS_WITH(store->barrier("b", 2), Catch::Contains("1.13 has no BARRIER"));
  store->set("still", "fine");
  CHECK(str(store->get("still")) == "fine");
}

}  // namespace
}  // namespace collie
