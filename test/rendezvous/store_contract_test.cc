// The Store contract, written once and run over every implementation: each
// TEST_CASE below is generated once per entry of implementations(), so a new
// Store joins the suite by adding one factory to that table.
//
// A StoreUnderTest hands out handles onto one shared store: the same object
// (HashStore), a new view (PrefixStore), a new open of the same file
// (FileStore), a new client connection to one server (TcpStore). Tests that
// involve "another thread" or "another writer" use a second handle, so the
// cross-handle paths (flock, the socket) are what gets exercised.
#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>

#include "collie/base/error.h"
#include "collie/rendezvous/file_store.h"
#include "collie/rendezvous/hash_store.h"
#include "collie/rendezvous/prefix_store.h"
#include "collie/rendezvous/store.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

class StoreUnderTest {
 public:
  virtual ~StoreUnderTest() = default;
  // A new handle onto the one store this object stands for.
  virtual std::shared_ptr<Store> open() = 0;
};

class SharedHashStore : public StoreUnderTest {
 public:
  std::shared_ptr<Store> open() override { return store_; }

 private:
  std::shared_ptr<HashStore> store_ = std::make_shared<HashStore>();
};

class PrefixOverHash : public StoreUnderTest {
 public:
  std::shared_ptr<Store> open() override {
    return std::make_shared<PrefixStore>("contract", store_);
  }

 private:
  std::shared_ptr<HashStore> store_ = std::make_shared<HashStore>();
};

class SharedFile : public StoreUnderTest {
 public:
  // world_size 0: the file outlives the handles; dir_ removes it.
  std::shared_ptr<Store> open() override {
    return std::make_shared<FileStore>(dir_.file("store"), 0);
  }

 private:
  test::TempDir dir_;
};

// One server on an ephemeral loopback port; every handle is a new client
// connection to it.
class TcpServerAndClients : public StoreUnderTest {
 public:
  explicit TcpServerAndClients(StoreProtocol protocol = StoreProtocol::kDetect)
      : protocol_(protocol) {}
  std::shared_ptr<Store> open() override {
    return TcpStore::connect("127.0.0.1", server_->port(),
                             {.timeout = std::chrono::seconds(60), .protocol = protocol_});
  }

 private:
  StoreProtocol protocol_;
  std::unique_ptr<TcpStoreServer> server_ = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
};

struct Implementation {
  const char* name;
  std::function<std::unique_ptr<StoreUnderTest>()> make;
  // TCPStore's wire protocol has no error answer: a server that cannot apply
  // an ADD drops the connection (torch's does the same), so its client sees
  // a NetworkError rather than a StoreError naming the key.
  bool add_error_is_store_error = true;
};

const std::vector<Implementation>& implementations() {
  static const std::vector<Implementation> kAll = {
      {"HashStore", [] { return std::make_unique<SharedHashStore>(); }},
      {"PrefixStore(HashStore)", [] { return std::make_unique<PrefixOverHash>(); }},
      {"FileStore", [] { return std::make_unique<SharedFile>(); }},
      {"TcpStore", [] { return std::make_unique<TcpServerAndClients>(); }, false},
      // The 1.13 dialect lacks APPEND, MULTI_GET, MULTI_SET and CANCEL_WAIT:
      // the client falls back to the Store defaults and reconnects.
      {"TcpStore (1.13 dialect)",
       [] { return std::make_unique<TcpServerAndClients>(StoreProtocol::kV1_13); }, false},
      {"PrefixStore(TcpStore)",
       [] {
         struct PrefixOverTcp : TcpServerAndClients {
           std::shared_ptr<Store> open() override {
             return std::make_shared<PrefixStore>("contract", TcpServerAndClients::open());
           }
         };
         return std::make_unique<PrefixOverTcp>();
       },
       false},
  };
  return kAll;
}

}  // namespace

// Declares a test case that runs once per implementation, with `sut` (the
// StoreUnderTest) and `store` (a first handle) in scope.
#define CONTRACT_CAT2_(a, b) a##b
#define CONTRACT_CAT_(a, b) CONTRACT_CAT2_(a, b)
#define STORE_CONTRACT_CASE(title) \
  STORE_CONTRACT_CASE_(title, CONTRACT_CAT_(contract_body_, __LINE__))
#define STORE_CONTRACT_CASE_(title, body)                                                       \
  static void body(const Implementation& impl, StoreUnderTest& sut, Store& store);              \
  TEST_CASE("Store contract: " title, "[store][contract]") {                                    \
    const auto& impl = implementations()[GENERATE(range(size_t{0}, implementations().size()))]; \
    INFO("implementation: " << impl.name);                                                      \
    auto sut = impl.make();                                                                     \
    auto store = sut->open();                                                                   \
    body(impl, *sut, *store);                                                                   \
  }                                                                                             \
  static void body([[maybe_unused]] const Implementation& impl,                                 \
                   [[maybe_unused]] StoreUnderTest& sut, Store& store)

STORE_CONTRACT_CASE("set then get returns the value, and set overwrites") {
  store.set("alpha", "one");
  CHECK(to_string(store.get("alpha")) == "one");
  store.set("alpha", "two");
  CHECK(to_string(store.get("alpha")) == "two");
  // Another handle sees the same data.
  CHECK(to_string(sut.open()->get("alpha")) == "two");
}

STORE_CONTRACT_CASE("binary values with zero bytes, empty values and large values") {
  Bytes binary = {0, 1, 0, 255, 0, 0, 7, 0};
  store.set("binary", binary);
  CHECK(store.get("binary") == binary);

  store.set("empty", Bytes{});
  CHECK(store.check({"empty"}));
  CHECK(store.get("empty").empty());

  // 5 MiB of a pattern with every byte value, written through one handle and
  // read through another.
  Bytes large(size_t{5} << 20);
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<uint8_t>(i * 131 + (i >> 13));
  store.set("large", large);
  CHECK(sut.open()->get("large") == large);

  std::string key_with_zero("k\0ey", 4);
  store.set(key_with_zero, "v");
  CHECK(to_string(store.get(key_with_zero)) == "v");
  CHECK_FALSE(store.check({"k"}));
}

STORE_CONTRACT_CASE("get waits for a set made later by another thread") {
  auto writer = sut.open();
  std::thread reader_thread;
  Bytes seen;
  std::exception_ptr failure;
  // The reader announces itself, then blocks in get(); the writer sets the
  // key only once the reader has announced, so get() has to wait for it.
  reader_thread = std::thread([&] {
    try {
      store.set("reader_ready", "1");
      seen = store.get("late");
    } catch (...) {
      failure = std::current_exception();
    }
  });
  writer->wait({"reader_ready"});
  CHECK_FALSE(writer->check({"late"}));
  writer->set("late", "arrived");
  reader_thread.join();
  if (failure) std::rethrow_exception(failure);
  CHECK(to_string(seen) == "arrived");
}

STORE_CONTRACT_CASE("get of a missing key times out with TimeoutError naming the key") {
  store.set_timeout(300ms);
  CHECK(store.timeout() == 300ms);
  auto start = Clock::now();
  try {
    store.get("never_set_key");
    FAIL("get returned for a key nobody set");
  } catch (const TimeoutError& e) {
    CHECK_THAT(e.what(), Contains("never_set_key"));
  }
  // It waited for the timeout rather than failing at once.
  CHECK(Clock::now() - start >= 250ms);
}

STORE_CONTRACT_CASE("add creates the counter at 0, returns the new value, stores decimal") {
  CHECK(store.add("counter", 5) == 5);
  CHECK(store.add("counter", -7) == -2);
  CHECK(store.add("counter", 0) == -2);
  CHECK(to_string(store.get("counter")) == "-2");
  store.set("preset", "40");
  CHECK(store.add("preset", 2) == 42);
  CHECK(store.add("big", int64_t{1} << 40) == int64_t{1} << 40);
}

STORE_CONTRACT_CASE("add is atomic across threads using their own handles") {
  constexpr int kThreads = 4;
  constexpr int kAddsEach = 150;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, handle = sut.open()] {
      try {
        for (int i = 0; i < kAddsEach; ++i) handle->add("shared_counter", 1);
      } catch (...) {
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(store.add("shared_counter", 0) == kThreads * kAddsEach);
}

STORE_CONTRACT_CASE("add on a value that is not an integer throws StoreError") {
  store.set("text", "twelve");
  store.set("trailing", "12x");
  if (impl.add_error_is_store_error) {
    CHECK_THROWS_AS(store.add("text", 1), StoreError);
    CHECK_THROWS_WITH(store.add("trailing", 1), Contains("trailing") && Contains("12x"));
  } else {
    CHECK_THROWS_AS(store.add("text", 1), Error);
    CHECK_THROWS_AS(sut.open()->add("trailing", 1), Error);
  }
  // The failed adds changed nothing, and the store still serves.
  auto other = sut.open();
  CHECK(to_string(other->get("text")) == "twelve");
  CHECK(to_string(other->get("trailing")) == "12x");
  CHECK(other->add("number", 1) == 1);
}

STORE_CONTRACT_CASE("add past the int64 range throws StoreError and leaves the value") {
  store.set("max", "9223372036854775807");
  store.set("min", "-9223372036854775808");
  if (impl.add_error_is_store_error) {
    CHECK_THROWS_WITH(store.add("max", 1), Contains("max") && Contains("9223372036854775807") &&
                                               Contains("does not fit"));
    CHECK_THROWS_AS(store.add("min", -1), StoreError);
  } else {
    CHECK_THROWS_AS(store.add("max", 1), Error);
    CHECK_THROWS_AS(sut.open()->add("min", -1), Error);
  }
  auto other = sut.open();
  CHECK(to_string(other->get("max")) == "9223372036854775807");
  CHECK(to_string(other->get("min")) == "-9223372036854775808");
  CHECK(other->add("max", -7) == 9223372036854775800);
  CHECK(other->add("fresh", INT64_MIN) == INT64_MIN);
}

STORE_CONTRACT_CASE("compare_set follows torch's four cases") {
  const Bytes empty;
  // 1. Missing key, empty expected: sets desired and returns it.
  CHECK(to_string(store.compare_set("cs1", empty, to_bytes("new"))) == "new");
  CHECK(to_string(store.get("cs1")) == "new");
  // 2. Missing key, non-empty expected: returns expected, sets nothing.
  CHECK(to_string(store.compare_set("cs2", to_bytes("old"), to_bytes("new"))) == "old");
  CHECK_FALSE(store.check({"cs2"}));
  // 3. Present and equal to expected: swaps and returns desired.
  store.set("cs3", "old");
  CHECK(to_string(store.compare_set("cs3", to_bytes("old"), to_bytes("new"))) == "new");
  CHECK(to_string(store.get("cs3")) == "new");
  // 4. Present and different: returns the current value, unchanged.
  store.set("cs4", "current");
  CHECK(to_string(store.compare_set("cs4", to_bytes("old"), to_bytes("new"))) == "current");
  CHECK(to_string(store.get("cs4")) == "current");
}

STORE_CONTRACT_CASE("check reports whether every key exists, without waiting") {
  CHECK(store.check({}));
  CHECK_FALSE(store.check({"c1"}));
  store.set("c1", "x");
  CHECK(store.check({"c1"}));
  CHECK_FALSE(store.check({"c1", "c2"}));
  // TCPStore's SET has no answer, and another connection's requests are not
  // ordered with it: a round trip on the writer's own connection is what
  // says the set has been applied.
  auto writer = sut.open();
  writer->set("c2", "y");
  writer->check({"c2"});
  CHECK(store.check({"c1", "c2"}));
}

STORE_CONTRACT_CASE("wait returns once every key exists and names the missing ones on timeout") {
  store.set("w_a", "1");
  store.wait({"w_a"}, 5s);
  auto start = Clock::now();
  try {
    store.wait({"w_a", "w_b", "w_c"}, 300ms);
    FAIL("wait returned with keys missing");
  } catch (const TimeoutError& e) {
    CHECK_THAT(e.what(), Contains("w_b"));
    CHECK_THAT(e.what(), Contains("w_c"));
  }
  CHECK(Clock::now() - start >= 250ms);

  // A wait without a timeout uses the store's timeout.
  store.set_timeout(300ms);
  CHECK_THROWS_AS(store.wait({"w_never"}), TimeoutError);

  std::thread writer([handle = sut.open()] {
    handle->wait({"w_waiting"}, 60s);
    handle->multi_set({"w_b", "w_c"}, {to_bytes("2"), to_bytes("3")});
  });
  store.set("w_waiting", "1");
  store.wait({"w_a", "w_b", "w_c"}, 60s);
  writer.join();
  CHECK(store.check({"w_a", "w_b", "w_c"}));
}

STORE_CONTRACT_CASE("delete_key returns whether the key existed") {
  CHECK_FALSE(store.delete_key("d"));
  store.set("d", "value");
  CHECK(store.delete_key("d"));
  CHECK_FALSE(store.check({"d"}));
  CHECK_FALSE(sut.open()->check({"d"}));
  CHECK_FALSE(store.delete_key("d"));
  // A deleted key can be set again; a deleted counter restarts at 0.
  store.add("d", 3);
  CHECK(store.add("d", 1) == 4);
  CHECK(store.delete_key("d"));
  CHECK(store.add("d", 1) == 1);
}

STORE_CONTRACT_CASE("num_keys counts keys set, added and deleted") {
  // Implementations may hold keys of their own (torch's TCPStore does), so
  // count relative to the start.
  const int64_t base = store.num_keys();
  store.set("n1", "a");
  store.add("n2", 1);
  store.append("n3", as_span("x"));
  CHECK(store.num_keys() == base + 3);
  store.set("n1", "b");
  CHECK(store.num_keys() == base + 3);
  store.delete_key("n2");
  CHECK(sut.open()->num_keys() == base + 2);
}

STORE_CONTRACT_CASE("append creates the key and appends bytes") {
  store.append("log", as_span("ab"));
  CHECK(to_string(store.get("log")) == "ab");
  Bytes tail = {0, 'c', 0};
  auto other = sut.open();
  other->append("log", tail);
  other->check({"log"});  // APPEND has no answer either
  Bytes expect = {'a', 'b', 0, 'c', 0};
  CHECK(store.get("log") == expect);
  store.append("log", Bytes{});
  CHECK(store.get("log") == expect);
}

STORE_CONTRACT_CASE("multi_set and multi_get keep the order of the keys") {
  std::vector<std::string> keys = {"m3", "m1", "m2"};
  std::vector<Bytes> values = {to_bytes("three"), Bytes{}, Bytes{0, 1}};
  store.multi_set(keys, values);
  CHECK(sut.open()->multi_get(keys) == values);
  CHECK(store.multi_get({"m2", "m3"}) == std::vector<Bytes>{Bytes{0, 1}, to_bytes("three")});
  CHECK(store.multi_get({}).empty());
  CHECK_THROWS_AS(store.multi_set({"a", "b"}, {to_bytes("1")}), InvalidArgument);

  store.set_timeout(300ms);
  try {
    store.multi_get({"m1", "m_missing"});
    FAIL("multi_get returned with a key missing");
  } catch (const TimeoutError& e) {
    CHECK_THAT(e.what(), Contains("m_missing"));
  }
}

STORE_CONTRACT_CASE("multi_get waits for keys another handle sets later, in the order asked") {
  auto writer = sut.open();
  std::vector<std::string> keys;
  for (int i = 0; i < 200; ++i) keys.push_back("peer/" + std::to_string(i));
  // Half the keys exist; the reader asks for all of them (and one twice),
  // and the writer sets the rest once the reader has announced itself.
  for (int i = 0; i < 200; i += 2) writer->set(keys[i], "addr" + std::to_string(i));
  std::vector<std::string> asked = keys;
  asked.push_back(keys[7]);
  std::vector<Bytes> seen;
  std::exception_ptr failure;
  std::thread reader([&] {
    try {
      store.set("reader_ready", "1");
      seen = store.multi_get(asked);
    } catch (...) {
      failure = std::current_exception();
    }
  });
  writer->wait({"reader_ready"});
  for (int i = 1; i < 200; i += 2) writer->set(keys[i], "addr" + std::to_string(i));
  reader.join();
  if (failure) std::rethrow_exception(failure);
  REQUIRE(seen.size() == asked.size());
  for (int i = 0; i < 200; ++i) CHECK(to_string(seen[i]) == "addr" + std::to_string(i));
  CHECK(to_string(seen.back()) == "addr7");
  // The handle is still in step: a timed-out multi_get leaves it usable too.
  store.set_timeout(200ms);
  CHECK_THROWS_AS(store.multi_get({keys[0], "never"}), TimeoutError);
  store.set_timeout(60s);
  CHECK(store.multi_get({keys[3], keys[2]}) ==
        std::vector<Bytes>{to_bytes("addr3"), to_bytes("addr2")});
  CHECK(store.add("after", 1) == 1);
}
