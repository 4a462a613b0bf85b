// Wiring up: the bind address rules, a group re-created under the name of
// an earlier one (join rounds keep their records apart), and the errors of
// a group that never completes.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <future>
#include <thread>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/collectives/transport/host.h"
#include "collie/collectives/transport/join.h"
#include "collie/collectives/transport/sockets.h"
#include "collie/rendezvous/hash_store.h"
#include "collie/test/collectives/harness.h"

using namespace collie;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

using collie::test::ScopedEnv;

TEST_CASE("the bind address comes from the option, COLLIE_SOCKET_IFNAME or MASTER_ADDR") {
  ScopedEnv no_ifname("COLLIE_SOCKET_IFNAME", nullptr);
  ScopedEnv no_master("MASTER_ADDR", nullptr);
  // The environment is read once, into options (from_env), and only there.
  auto bind = [] {
    const CommunicatorOptions o = CommunicatorOptions::from_env();
    return resolve_bind_host(o.bind_host, o.interface, o.route_host);
  };
  CHECK(resolve_bind_host("10.1.2.3") == "10.1.2.3");
  CHECK(bind() == "127.0.0.1");
  {
    ScopedEnv master("MASTER_ADDR", "localhost");
    CHECK(CommunicatorOptions::from_env().route_host == "localhost");
    CHECK(bind() == "127.0.0.1");  // the address that routes to it
  }
  {
    ScopedEnv ifname("COLLIE_SOCKET_IFNAME", "lo");
    CHECK(bind() == "127.0.0.1");
    CHECK(resolve_bind_host("") == "127.0.0.1");  // no option: the library reads no variable
  }
  ScopedEnv bogus("COLLIE_SOCKET_IFNAME", "no-such-if0");
  CHECK_THROWS_AS(bind(), InvalidArgument);
  CHECK_THROWS_WITH(bind(), Contains("COLLIE_SOCKET_IFNAME=no-such-if0"));
}

TEST_CASE("CommunicatorOptions::from_env reads each COLLIE_* variable into its option") {
  ScopedEnv transport("COLLIE_TRANSPORT", "tcp");
  ScopedEnv host("COLLIE_HOST_ID", "host-x");
  ScopedEnv bytes("COLLIE_SHM_BYTES", "8192");
  ScopedEnv flat("COLLIE_HIERARCHICAL", "0");
  ScopedEnv report("COLLIE_REPORT_AFTER", "2s");
  ScopedEnv across("COLLIE_HIERARCHICAL_SMALL_BYTES", "0");
  ScopedEnv single("COLLIE_P2P_SINGLE_COPY_BYTES", "1048576");
  const CommunicatorOptions o = CommunicatorOptions::from_env();
  CHECK(o.transport == "tcp");
  CHECK(o.host_id == "host-x");
  CHECK(o.shm_buffer_bytes == 8192);
  CHECK_FALSE(o.hierarchical);
  CHECK(o.report_after == std::chrono::seconds(2));
  CHECK(o.hierarchical_small_bytes == 0);
  CHECK(o.p2p_single_copy_bytes == (size_t{1} << 20));
  // What the caller set wins over the environment.
  CHECK(CommunicatorOptions::from_env({.transport = "shm"}).transport == "shm");
  ScopedEnv bad("COLLIE_SHM_BYTES", "12x");
  CHECK_THROWS_WITH(CommunicatorOptions::from_env(), Contains("COLLIE_SHM_BYTES='12x'"));
  ScopedEnv good_shm("COLLIE_SHM_BYTES", "8192");
  ScopedEnv huge("COLLIE_HIERARCHICAL_SMALL_BYTES", "2147483648");
  CHECK_THROWS_WITH(
      CommunicatorOptions::from_env(),
      Contains("COLLIE_HIERARCHICAL_SMALL_BYTES='2147483648'") && Contains("from 0 to 1073741824"));
}

TEST_CASE("a group re-created under the same name reads its own round's records, not the old") {
  // The first group's records stay in the store (pointing at listeners that
  // are gone once it is destroyed); the second group joins round 1 and
  // never reads them. Rank 1 starts first each time, so it would find a
  // stale record if rounds did not keep them apart.
  HashStore store;
  CommunicatorOptions o;
  o.store_prefix = "reused";
  o.timeout = 30s;
  for (int round = 0; round < 2; ++round) {
    auto rank1 = std::async(std::launch::async, [&] {
      return Communicator::connect(store, 1, 2, CommunicatorOptions::from_env(o));
    });
    auto rank0 = std::async(std::launch::async, [&] {
      return Communicator::connect(store, 0, 2, CommunicatorOptions::from_env(o));
    });
    auto c0 = rank0.get();
    auto c1 = rank1.get();
    CHECK(store.check({str_cat("reused/collectives/", round, "/addr/0"),
                       str_cat("reused/collectives/", round, "/addr/1")}));
    const std::string published =
        to_string(store.get(str_cat("reused/collectives/", round, "/addr/0")));
    CHECK_THAT(published, Contains(str_cat("tcp=", c0->address())));
    std::vector<int64_t> a{1, 2}, b{10, 20};
    auto f = std::async(std::launch::async, [&] {
      c1->all_reduce(view(b.data(), 2), view(b.data(), 2), ReduceOp::kSum, Deadline(30s));
    });
    c0->all_reduce(view(a.data(), 2), view(a.data(), 2), ReduceOp::kSum, Deadline(30s));
    f.get();
    CHECK(a == std::vector<int64_t>{11, 22});
    CHECK(b == a);
  }
}

TEST_CASE("wiring up times out naming the ranks that never came") {
  HashStore store;
  CommunicatorOptions o;
  o.store_prefix = "lonely";
  o.timeout = 300ms;
  // Rank 0 of 3 waits for ranks 1 and 2 to connect.
  CHECK_THROWS_AS(Communicator::connect(store, 0, 3, CommunicatorOptions::from_env(o)),
                  TimeoutError);
  // A rank that timed out leaves no trace: the retry is no duplicate.
  CHECK_THROWS_WITH(Communicator::connect(store, 0, 3, CommunicatorOptions::from_env(o)),
                    Contains("rank(s) 1, 2 to join group 'lonely'"));
  o.store_prefix = "lonely2";
  CHECK_THROWS_WITH(Communicator::connect(store, 2, 3, CommunicatorOptions::from_env(o)),
                    Contains("rank(s) 0, 1 to join"));
}

TEST_CASE("running out of descriptors is named as such, with the limit and what the world needs") {
  const std::string text = describe_fd_failure("socket()", EMFILE, 6);
  CHECK_THAT(text, Contains("socket(): Too many open files") && Contains("RLIMIT_NOFILE is ") &&
                       Contains("a world of 6 holds two listeners") && Contains("up to 5"));
  // Other errors are just their errno text.
  CHECK(describe_fd_failure("accept()", ECONNRESET, 6) ==
        std::string("accept(): ") + std::strerror(ECONNRESET));
}

TEST_CASE("a rank that joins twice is named, with both addresses, on every rank at once") {
  HashStore store;
  CommunicatorOptions o;
  o.store_prefix = "dup";
  o.timeout = 20s;
  // Ranks 0, 1, 1 (the duplicate) and 2 of a 3-rank group, in that order.
  std::vector<std::future<std::string>> joins;
  auto join_as = [&](int rank) {
    return std::async(std::launch::async, [&store, o, rank]() -> std::string {
      try {
        Communicator::connect(store, rank, 3, CommunicatorOptions::from_env(o));
        return "joined";
      } catch (const NetworkError& e) {
        return e.what();
      }
    });
  };
  const auto start = Clock::now();
  for (int rank : {0, 1, 1}) {
    joins.push_back(join_as(rank));
    // Arrive in this order (the store counts arrivals); not a synchronisation
    // of the assertions, which hold for any order among the first three.
    while (store.add("dup/collectives/arrivals", 0) < static_cast<int64_t>(joins.size())) {
      std::this_thread::yield();
    }
  }
  joins.push_back(join_as(2));
  for (auto& j : joins) {
    const std::string what = j.get();
    CHECK_THAT(what, Contains("rank 1 joined group 'dup' twice, from 127.0.0.1:") &&
                         Contains("and from 127.0.0.1:") &&
                         Contains("two processes were given the same RANK"));
  }
  CHECK(Clock::now() - start < 10s);
}

TEST_CASE("the transport choice is auto, tcp or shm; shm across hosts is refused") {
  CHECK(resolve_transport("tcp") == TransportChoice::kTcp);
  CHECK(resolve_transport("shm") == TransportChoice::kShm);
  CHECK(resolve_transport("auto") == TransportChoice::kAuto);
  CHECK_THROWS_WITH(resolve_transport("udp"), Contains("expected auto, tcp or shm"));
  // Two "hosts": rank 1 claims another host id, so shm cannot reach it.
  HashStore store;
  CommunicatorOptions o;
  o.store_prefix = "hosts";
  o.timeout = 2s;
  o.transport = "shm";
  ::setenv("COLLIE_HOST_ID", "host-a", 1);
  auto r0 = std::async(std::launch::async, [&] {
    return Communicator::connect(store, 0, 2, CommunicatorOptions::from_env(o));
  });
  while (!store.check({"hosts/collectives/0/addr/0"})) std::this_thread::yield();
  ::setenv("COLLIE_HOST_ID", "host-b", 1);
  CHECK_THROWS_WITH(Communicator::connect(store, 1, 2, CommunicatorOptions::from_env(o)),
                    Contains("COLLIE_TRANSPORT=shm, but rank 0") && Contains("host-a"));
  ::unsetenv("COLLIE_HOST_ID");
  CHECK_THROWS(r0.get());
}
