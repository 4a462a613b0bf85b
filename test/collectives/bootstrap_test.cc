// Wiring up: the bind address rules, a stale address left in the store by an
// earlier group of the same name, and the errors of a group that never
// completes.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <future>

#include "collectives/bootstrap.h"
#include "rendezvous/hash_store.h"
#include "runtime/base/error.h"

using namespace collie;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

// Sets an environment variable for the scope of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      ::unsetenv(name_);
    } else {
      ::setenv(name_, old_.c_str(), 1);
    }
  }

 private:
  const char* name_;
  std::string old_;
};

// A loopback port nobody listens on (bound, then closed).
int closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  ::close(fd);
  return ntohs(sa.sin_port);
}

}  // namespace

TEST_CASE("the bind address comes from the option, COLLIE_SOCKET_IFNAME or MASTER_ADDR") {
  ScopedEnv no_ifname("COLLIE_SOCKET_IFNAME", nullptr);
  ScopedEnv no_master("MASTER_ADDR", nullptr);
  CHECK(resolve_bind_host("10.1.2.3") == "10.1.2.3");
  CHECK(resolve_bind_host("") == "127.0.0.1");
  {
    ScopedEnv master("MASTER_ADDR", "localhost");
    CHECK(resolve_bind_host("") == "127.0.0.1");  // the address that routes to it
  }
  {
    ScopedEnv ifname("COLLIE_SOCKET_IFNAME", "lo");
    CHECK(resolve_bind_host("") == "127.0.0.1");
  }
  ScopedEnv bogus("COLLIE_SOCKET_IFNAME", "no-such-if0");
  CHECK_THROWS_AS(resolve_bind_host(""), InvalidArgument);
  CHECK_THROWS_WITH(resolve_bind_host(""), Contains("COLLIE_SOCKET_IFNAME=no-such-if0"));
}

TEST_CASE(
    "a stale address from an earlier group of the same name is re-read until the new one comes") {
  HashStore store;
  store.set("reused/collectives/addr/0", "127.0.0.1:" + std::to_string(closed_port()));
  CommunicatorOptions o;
  o.store_prefix = "reused";
  o.timeout = 30s;
  // Rank 1 starts first and finds the stale address; rank 0 then publishes.
  auto rank1 =
      std::async(std::launch::async, [&] { return Communicator::connect(store, 1, 2, o); });
  auto rank0 =
      std::async(std::launch::async, [&] { return Communicator::connect(store, 0, 2, o); });
  auto c0 = rank0.get();
  auto c1 = rank1.get();
  std::vector<int64_t> a{1, 2}, b{10, 20};
  auto f = std::async(std::launch::async, [&] {
    c1->all_reduce(view(b.data(), 2), view(b.data(), 2), ReduceOp::kSum, Deadline(30s));
  });
  c0->all_reduce(view(a.data(), 2), view(a.data(), 2), ReduceOp::kSum, Deadline(30s));
  f.get();
  CHECK(a == std::vector<int64_t>{11, 22});
  CHECK(b == a);
}

TEST_CASE("wiring up times out naming the ranks that never came") {
  HashStore store;
  CommunicatorOptions o;
  o.store_prefix = "lonely";
  o.timeout = 300ms;
  // Rank 0 of 3 waits for ranks 1 and 2 to connect.
  CHECK_THROWS_AS(Communicator::connect(store, 0, 3, o), TimeoutError);
  // A rank that timed out leaves no trace: the retry is no duplicate.
  CHECK_THROWS_WITH(Communicator::connect(store, 0, 3, o),
                    Contains("rank(s) 1, 2 to join group 'lonely'"));
  o.store_prefix = "lonely2";
  CHECK_THROWS_WITH(Communicator::connect(store, 2, 3, o), Contains("rank(s) 0, 1 to join"));
}

TEST_CASE("running out of descriptors is named as such, with the limit and what the world needs") {
  const std::string text = describe_fd_failure("socket()", EMFILE, 6);
  CHECK_THAT(text, Contains("socket(): Too many open files") && Contains("RLIMIT_NOFILE is ") &&
                       Contains("a world of 6 holds two listeners") && Contains("up to 5"));
  // Other errors are just their errno text.
  CHECK(describe_fd_failure("accept()", ECONNRESET, 6) ==
        std::string("accept(): ") + std::strerror(ECONNRESET));
}
