// kDetect against a server that holds the dialect probe without a word, as
// torch 2.x's libuv server (the 2.x default) does: the client must find it
// through a second connection, and must never send more bytes on the
// probe's connection (libuv would then run the probe as a 2.x ADD).
// torch2_interop_test.cc does the same against the real torch.
#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "collie/rendezvous/tcp_store/store_protocol.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/rendezvous/tcp_store/tcp_store_socket.h"

namespace collie {
namespace {

using namespace std::chrono_literals;

// torch's libuv server in miniature. A connection whose first read does not
// start with VALIDATE is held: nothing is answered until another read
// brings more bytes, and then everything received is run as 2.x from the
// start (here: PINGs are echoed, anything else is recorded as a probe that
// ran, then the connection closes). A validated connection gets its PING
// echoed and GETNUMKEYS answered with 42.
class HoldingServer {
 public:
  HoldingServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(fd_, 16) == 0);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~HoldingServer() {
    stop_ = true;
    acceptor_.join();
    {
      std::lock_guard lock(mu_);
      for (int c : clients_) ::shutdown(c, SHUT_RDWR);
    }
    for (auto& t : handlers_) t.join();
    for (int c : clients_) ::close(c);
    ::close(fd_);
  }
  uint16_t port() const { return port_; }
  bool probe_ran() const { return probe_ran_; }
  int held() const { return held_; }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::lock_guard lock(mu_);
      clients_.push_back(c);
      handlers_.emplace_back([this, c] { serve(c); });
    }
  }
  static void reply(int c, const Bytes& b) { ::send(c, b.data(), b.size(), MSG_NOSIGNAL); }
  // Reads what has arrived (one read, as libuv does); false at EOF.
  static bool read_some(int c, Bytes& into) {
    uint8_t buf[4096];
    const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    into.insert(into.end(), buf, buf + n);
    return true;
  }
  void serve(int c) {
    Bytes in;
    if (!read_some(c, in)) return;
    if (in[0] != 0) {
      ++held_;
      if (!read_some(c, in)) return;  // held until more comes, or the client leaves
      for (size_t at = 0; at < in.size(); at += 5) {
        if (in[at] != 13 || at + 5 > in.size()) {
          probe_ran_ = true;  // libuv would now run the probe as a 2.x ADD
          return;
        }
        reply(c, Bytes(in.begin() + static_cast<ptrdiff_t>(at) + 1,
                       in.begin() + static_cast<ptrdiff_t>(at) + 5));
      }
      while (read_some(c, in)) {
      }
      return;
    }
    while (in.size() < 10 && read_some(c, in)) {
    }
    if (in.size() < 10 ||
        store_protocol::load_u32(in.data() + 1) != store_protocol::kValidationMagic || in[5] != 13)
      return;
    reply(c, Bytes(in.begin() + 6, in.begin() + 10));
    in.erase(in.begin(), in.begin() + 10);
    for (;;) {
      while (in.empty() && read_some(c, in)) {
      }
      if (in.empty() || in[0] != 7) return;
      in.erase(in.begin());
      Bytes answer;
      store_protocol::Writer(answer).i64(42);
      reply(c, answer);
    }
  }

  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> probe_ran_{false};
  std::atomic<int> held_{0};
  std::mutex mu_;
  std::vector<int> clients_;
  std::vector<std::thread> handlers_;
  std::thread acceptor_;
};

TEST_CASE("TcpStore: kDetect finds a server that holds the probe, as torch's libuv one does",
          "[tcp_store]") {
  HoldingServer server;
  TcpStoreOptions options;
  options.timeout = 60s;
  auto store = TcpStore::connect("127.0.0.1", server.port(), options);
  CHECK(store->protocol() == StoreProtocol::kV2);
  CHECK(store->num_keys() == 42);
  CHECK(server.held() >= 2);   // the probe, and the PINGs' connection
  CHECK(!server.probe_ran());  // nothing followed the probe on its connection
  // Reconnects keep the dialect found: no probe again.
  auto again = TcpStore::connect("127.0.0.1", server.port(), options);
  CHECK(again->num_keys() == 42);
}

TEST_CASE("TcpStore server: a PING before VALIDATE is answered, the dialect left open",
          "[tcp_store]") {
  // What the detection's second connection sends; collie's server echoes it
  // (instead of dropping a stray client) and then serves either dialect.
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  auto dialect = GENERATE(StoreProtocol::kV2, StoreProtocol::kV1_13);
  StoreSocket s;
  REQUIRE(StoreSocket::connect("127.0.0.1", server->port(), Clock::now() + 10s, &s).ok());
  Bytes b;
  store_protocol::Writer(b).u8(13).u32(0xABCD0123u);
  REQUIRE(s.send_all(b.data(), b.size(), Clock::now() + 10s).ok());
  uint8_t echo[4];
  REQUIRE(s.recv_exact(echo, 4, Clock::now() + 10s).ok());
  CHECK(store_protocol::load_u32(echo) == 0xABCD0123u);
  b.clear();
  if (dialect == StoreProtocol::kV2) {
    store_protocol::Writer(b).u8(0).u32(store_protocol::kValidationMagic).u8(7);  // GETNUMKEYS
  } else {
    store_protocol::Writer(b).u8(6);  // 1.13 GETNUMKEYS
  }
  REQUIRE(s.send_all(b.data(), b.size(), Clock::now() + 10s).ok());
  uint8_t count[8];
  REQUIRE(s.recv_exact(count, 8, Clock::now() + 10s).ok());
  CHECK(store_protocol::load_u64(count) == 0);
}

}  // namespace
}  // namespace collie
