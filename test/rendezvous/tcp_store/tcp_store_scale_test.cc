// The TcpStore server at the scale of a large job: 16,384 clients (its
// default max_connections) connected at once to one collie-store, started with a low soft
// open-files limit that it must raise itself.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "collie/base/str_cat.h"
#include "collie/rendezvous/tcp_store/store_protocol.h"
#include "collie/rendezvous/tcp_store/tcp_store_socket.h"
#include "collie/test/rendezvous/tcp_store/raw_store_client.h"
#include "collie/test/support/skip.h"

namespace collie {
namespace {

using namespace std::chrono_literals;

TEST_CASE("TcpStore server: 16384 clients connected at once", "[tcp_store][scale]") {
  constexpr size_t kClients = 16384;
  // This process holds the client ends: raise our own soft limit first.
  rlimit lim{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &lim) == 0);
  lim.rlim_cur = lim.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &lim);
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &lim) == 0);
  if (lim.rlim_cur < kClients + 256)
    test::skip_test(str_cat("the open-files hard limit is ", lim.rlim_max, ", below the ",
                            kClients + 256, " this test needs"));

  // collie-store starts with a soft limit of 1024 and must raise it.
  auto server = test::Subprocess::spawn(
      {"/bin/sh", "-c", "ulimit -Sn 1024 && exec \"$0\" --host 127.0.0.1 --port 0",
       test::collie_store_path()},
      {.env = {{"COLLIE_LOG_LEVEL", "INFO"}}});
  const uint16_t port = test::listening_port(server);

  // The clients come from 200 loopback addresses, as a job's ranks come
  // from many hosts: 16384 ephemeral ports of 127.0.0.1 held by this test
  // would make other tests that bind a port of 127.0.0.1 fail meanwhile.
  std::vector<int> clients;
  clients.reserve(kClients);
  struct CloseAll {
    std::vector<int>& fds;
    ~CloseAll() {
      for (int fd : fds) ::close(fd);
    }
  } close_all{clients};
  for (size_t i = 0; i + 1 < kClients; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    clients.push_back(fd);
    const int one = 1;
    ::setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    sockaddr_in from{}, to{};
    from.sin_family = to.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl(0x7f000002u + static_cast<uint32_t>(i % 200));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons(port);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) == 0);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0);
    const Bytes hello = test::v2_hello(static_cast<uint32_t>(i));
    REQUIRE(send_all(fd, hello.data(), hello.size(), Clock::now() + 30s).ok());
  }
  // Every one of them is served: its own PING comes back.
  size_t served = 0;
  for (size_t i = 0; i < clients.size(); ++i) {
    uint8_t nonce[4];
    if (recv_exact(clients[i], nonce, 4, Clock::now() + 60s).ok() &&
        store_protocol::load_u32(nonce) == i)
      ++served;
  }
  CHECK(served == kClients - 1);
  // The 16384th, a collie client, is served too.
  test::check_still_serving(port);
  server.kill(SIGTERM);
  REQUIRE(server.wait(60s).ok());
  INFO(server.err());
  CHECK_THAT(server.err(),
             Catch::Contains("raised the open-files limit (RLIMIT_NOFILE) from 1024"));
}

}  // namespace
}  // namespace collie
