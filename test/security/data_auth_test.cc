// The job secret on the data connections between ranks (collectives/
// peer_auth.h): a job completes while strangers knock on a rank's listening
// port; ranks with different secrets fail fast with the peer's address; the
// handshake's cost.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <thread>
#include <utility>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/collectives/communicator.h"
#include "collie/collectives/transport/peer_auth.h"
#include "collie/collectives/transport/wire.h"
#include "collie/rendezvous/env/job_secret.h"
#include "collie/rendezvous/file_store.h"
#include "collie/test/support/child.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using test::Subprocess;

namespace {

// args: store path, rank, size, timeout ms. Joins the mesh through a
// FileStore (no store authentication in the way), all_reduces rank + 1.
COLLIE_TEST_CHILD(secure_rank) {
  const int rank = std::stoi(args[1]), size = std::stoi(args[2]);
  FileStore store(args[0], size);
  const auto t0 = std::chrono::steady_clock::now();
  // The timeout bounds the join and, since connections are made on first
  // use, the first collective (which is where the handshakes happen).
  const std::chrono::milliseconds timeout(std::stoi(args[3]));
  try {
    auto comm = Communicator::connect(store, rank, size,
                                      CommunicatorOptions::from_env({.timeout = timeout}));
    // With a fifth argument, ranks but 0 hold back their first collective
    // until that store key is set: rank 0 sits in it, serving its listeners.
    if (args.size() > 4 && rank != 0) store.wait({args[4]}, timeout);
    float v[4] = {float(rank + 1), float(rank + 1), float(rank + 1), float(rank + 1)};
    comm->all_reduce(view(v, 4), view(v, 4), ReduceOp::kSum, Deadline(timeout));
    std::printf("rank %d sum %d\n", rank, int(v[0]));
    comm->barrier(Deadline(timeout));
  } catch (const Error& e) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - t0);
    std::printf("rank %d failed after %lld ms: %s\n", rank, (long long)ms.count(), e.what());
    return 3;
  }
  return 0;
}

struct Socket {
  int fd = -1;
  explicit Socket(int f = -1) : fd(f) {}
  Socket(Socket&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
  std::string local() const {
    sockaddr_in sa{};
    socklen_t len = sizeof sa;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    return str_cat("127.0.0.1:", ntohs(sa.sin_port));
  }
};

Socket connect_to(const std::string& address) {
  const auto colon = address.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr);
  Socket s{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  // Not REQUIRE: this also runs on a helper thread, and Catch2 v2's
  // assertions are not thread-safe (TSan reported the race). The exception
  // reaches the test thread (see the cost test) or fails the test directly.
  if (::connect(s.fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    throw std::runtime_error(str_cat("connect to ", address, ": ", std::strerror(errno)));
  return s;
}

void send_bytes(const Socket& s, const std::vector<uint8_t>& b) {
  REQUIRE(::send(s.fd, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size()));
}

// Blocks until the peer closes (recv returns 0) or 60 s pass; true on close.
bool closed_by_peer(const Socket& s) {
  timeval tv{60, 0};
  ::setsockopt(s.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  uint8_t buf[256];
  for (;;) {
    const ssize_t r = ::recv(s.fd, buf, sizeof buf, 0);
    if (r == 0) return true;
    if (r < 0) return errno == ECONNRESET;
  }
}

Socket connect_unix(const std::string& abstract_name) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path + 1, abstract_name.data(), abstract_name.size());
  const auto len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + abstract_name.size());
  Socket s{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (::connect(s.fd, reinterpret_cast<sockaddr*>(&sa), len) != 0)
    throw std::runtime_error(str_cat("connect to @", abstract_name, ": ", std::strerror(errno)));
  return s;
}

// A non-blocking listener on 127.0.0.1 at a port the kernel picks;
// *address is its "127.0.0.1:port".
Socket listen_loopback(std::string* address) {
  Socket listener{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)};
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  REQUIRE(::bind(listener.fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  REQUIRE(::listen(listener.fd, 128) == 0);
  socklen_t len = sizeof sa;
  ::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&sa), &len);
  *address = str_cat("127.0.0.1:", ntohs(sa.sin_port));
  return listener;
}

// A rank's record in the store: "tcp=...\nhost=...\nunix=...\npid=...".
std::string record_field(const std::string& record, const std::string& key) {
  const auto at = record.find(key + "=");
  if (at == std::string::npos) return "";
  const auto start = at + key.size() + 1;
  return record.substr(start, record.find('\n', start) - start);
}

// Every rank of a 3-rank secure_rank job exits 0 with the sum 1 + 2 + 3.
void expect_sum_6(std::vector<Subprocess>& ranks) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    auto st = ranks[r].wait(120s);
    INFO("rank " << r << "\n" << ranks[r].out() << ranks[r].err());
    REQUIRE(st.ok());
    CHECK_THAT(ranks[r].out(), Contains(str_cat("rank ", r, " sum 6")));
  }
}

std::map<std::string, std::optional<std::string>> env_with(const std::string& secret) {
  return {{"COLLIE_JOB_SECRET", secret}};
}

}  // namespace

TEST_CASE("a job completes while strangers connect to a rank's listener", "[security][data]") {
  test::TempDir dir;
  const std::string path = dir.file("store");
  const std::string secret = JobSecret::generate().to_hex();
  const int size = 3;
  const auto t0 = std::chrono::steady_clock::now();
  // The job starts; ranks 1 and 2 hold back their first collective until
  // the strangers are done, so rank 0 waits in it (a rank serves its
  // listeners while it is in a call) with strangers at its door.
  std::vector<Subprocess> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.push_back(Subprocess::spawn(
        test::child_argv("secure_rank", {path, std::to_string(r), "3", "120000", "strangers_done"}),
        {.env = env_with(secret)}));
  }
  FileStore store(path, size);
  // Rank 0's record (join round 0): "tcp=<host:port>\nhost=...".
  store.wait({"collie/collectives/0/addr/0"}, 60s);
  const std::string record = to_string(store.get("collie/collectives/0/addr/0"));
  REQUIRE(record.starts_with("tcp="));
  const std::string address = record.substr(4, record.find('\n') - 4);

  // 1. Another job: speaks the protocol with another secret. Its connector
  // side finds that rank 0 cannot prove *its* secret and says so.
  Socket other_job = connect_to(address);
  const JobSecret other = JobSecret::generate();
  try {
    authenticate_to_peer(other_job.fd, other, {group_hash("collie"), size, 1, "stranger"}, 0,
                         Deadline(30s), str_cat("rank 0 (", address, ")"));
    FAIL("a handshake with another job's secret succeeded");
  } catch (const NetworkError& e) {
    CHECK_THAT(e.what(), Contains(address) && Contains("different COLLIE_JOB_SECRET"));
  }
  const std::string other_local = other_job.local();
  other_job = Socket();  // hang up, as a real connector would
  // 2. Random bytes.
  Socket garbage = connect_to(address);
  std::vector<uint8_t> junk(100);
  random_bytes(junk);
  send_bytes(garbage, junk);
  // 3. A well-formed introduction (claiming rank 2) and a forged proof.
  Socket forger = connect_to(address);
  {
    std::vector<uint8_t> auth1(56, 0);
    const uint32_t fields[6] = {kPeerAuthMagic, kPeerAuthVersion, group_hash("collie"), 3, 2, 0};
    std::memcpy(auth1.data(), fields, sizeof fields);
    send_bytes(forger, auth1);
    uint8_t auth2[64];
    REQUIRE(::recv(forger.fd, auth2, sizeof auth2, MSG_WAITALL) == 64);
    std::vector<uint8_t> forged(32);
    random_bytes(forged);
    send_bytes(forger, forged);
  }
  // 4. An unauthenticated collie hello (a rank without the secret).
  Socket plain = connect_to(address);
  send_bytes(plain, {0x31, 0x49, 0x4c, 0x43, 0, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0});
  // 5. Connects and says nothing, for the whole job.
  Socket silent = connect_to(address);

  // Each stranger that said something is refused, which closes it: wait
  // for that before the job may finish.
  CHECK(closed_by_peer(garbage));
  CHECK(closed_by_peer(forger));
  CHECK(closed_by_peer(plain));
  store.set("strangers_done", "1");
  expect_sum_6(ranks);
  const std::string log0 = ranks[0].err();
  INFO(log0);
  CHECK_THAT(log0, Contains(str_cat("refused a data connection from ", other_local,
                                    ": it closed the connection before authenticating")));
  CHECK_THAT(log0, Contains(str_cat("refused a data connection from ", garbage.local(),
                                    ": it is not a collie peer")));
  CHECK_THAT(log0, Contains(str_cat("refused a data connection from ", forger.local(),
                                    ": its proof is wrong: it claims rank 2")));
  CHECK_THAT(log0, Contains(str_cat("refused a data connection from ", plain.local(),
                                    ": it sent an unauthenticated hello")));
  // The silent one was held, never served, and closed when rank 0 ended.
  CHECK(closed_by_peer(silent));
  WARN("3-rank job with 5 strangers: " << std::chrono::duration_cast<std::chrono::milliseconds>(
                                              std::chrono::steady_clock::now() - t0)
                                              .count()
                                       << " ms");
}

// A job without a secret (workers under torchrun or mpirun): strangers at
// rank 0's TCP port and at its abstract Unix socket (which any local user
// can reach) while the other ranks are still to connect: a port scan's
// connect-and-close, an HTTP request, bytes that are not a hello, and a
// flood of idle connections past the pool's 64 at each listener. The job
// completes; each stranger is refused and logged, not the job failed.
TEST_CASE("without a secret, strangers and a flood at both listeners never fail the job",
          "[security][data]") {
  test::TempDir dir;
  const std::string path = dir.file("store");
  const int size = 3;
  std::vector<Subprocess> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.push_back(Subprocess::spawn(
        test::child_argv("secure_rank", {path, std::to_string(r), "3", "120000", "strangers_done"}),
        {.env = {{"COLLIE_JOB_SECRET", std::nullopt},
                 {"COLLIE_JOB_SECRET_FILE", std::nullopt},
                 {"COLLIE_TRANSPORT", std::nullopt}}}));
  }
  FileStore store(path, size);
  store.wait({"collie/collectives/0/addr/0"}, 60s);
  const std::string record = to_string(store.get("collie/collectives/0/addr/0"));
  const std::string address = record_field(record, "tcp");
  const std::string unix_name = record_field(record, "unix");
  REQUIRE(!address.empty());
  REQUIRE(!unix_name.empty());

  { Socket scan = connect_to(address); }  // nc -z
  { Socket scan = connect_unix(unix_name); }
  Socket http = connect_to(address);
  const std::string get = "GET / HTTP/1.1\r\nHost: collie\r\n\r\n";
  send_bytes(http, std::vector<uint8_t>(get.begin(), get.end()));
  Socket local_garbage = connect_unix(unix_name);
  send_bytes(local_garbage, std::vector<uint8_t>(64, 0xab));
  CHECK(closed_by_peer(http));
  CHECK(closed_by_peer(local_garbage));
  std::vector<Socket> idle;
  for (int i = 0; i < 70; ++i) {
    idle.push_back(connect_to(address));
    idle.push_back(connect_unix(unix_name));
  }
  // The other ranks connect now, behind 70 idle strangers at each door.
  store.set("strangers_done", "1");
  expect_sum_6(ranks);
  const std::string log0 = ranks[0].err();
  INFO(log0);
  CHECK_THAT(log0, Contains(str_cat("refused a data connection from ", http.local(),
                                    ": its hello does not fit rank 0")));
  CHECK_THAT(log0, Contains("closed to make room"));
}

TEST_CASE("ranks with different secrets fail fast, naming the peer", "[security][data]") {
  test::TempDir dir;
  const std::string path = dir.file("store");
  // Rank 0 waits 6 s for a peer that can authenticate; rank 1 learns at once.
  auto r0 = Subprocess::spawn(test::child_argv("secure_rank", {path, "0", "2", "6000"}),
                              {.env = env_with(JobSecret::generate().to_hex())});
  auto r1 = Subprocess::spawn(test::child_argv("secure_rank", {path, "1", "2", "60000"}),
                              {.env = env_with(JobSecret::generate().to_hex())});
  auto s1 = r1.wait(60s);
  auto s0 = r0.wait(60s);
  INFO("rank 0:\n" << r0.out() << r0.err() << "\nrank 1:\n" << r1.out() << r1.err());
  CHECK(s1.exit_code == 3);
  CHECK(s0.exit_code == 3);
  // The connector: names rank 0 and the cause, well inside its 60 s.
  CHECK_THAT(r1.out(), Contains("rank 0 (") &&
                           Contains(") failed to prove knowledge of the job secret: it runs with a "
                                    "different COLLIE_JOB_SECRET"));
  const auto ms1 = std::stoll(r1.out().substr(r1.out().find("after ") + 6));
  CHECK(ms1 < 20000);
  // The acceptor cannot tell a misconfigured rank from a stranger, so it
  // waits out its timeout, then names the missing rank and the refusal.
  CHECK_THAT(r0.out(), Contains("still waiting to accept a connection from rank 1 (") &&
                           Contains("last refused: ") && Contains("before authenticating"));
  CHECK_THAT(r0.err(), Contains("refused a data connection from "));
}

TEST_CASE("a rank without the secret is refused by one that has it", "[security][data]") {
  test::TempDir dir;
  const std::string path = dir.file("store");
  auto r0 = Subprocess::spawn(test::child_argv("secure_rank", {path, "0", "2", "5000"}),
                              {.env = env_with(JobSecret::generate().to_hex())});
  auto r1 = Subprocess::spawn(test::child_argv("secure_rank", {path, "1", "2", "60000"}),
                              {.env = {{"COLLIE_JOB_SECRET", std::nullopt}}});
  auto s0 = r0.wait(60s);
  auto s1 = r1.wait(60s);
  INFO("rank 0:\n" << r0.out() << r0.err() << "\nrank 1:\n" << r1.out() << r1.err());
  CHECK(s0.exit_code == 3);
  CHECK(s1.exit_code == 3);
  CHECK_THAT(r0.out(),
             Contains("it sent an unauthenticated hello (that rank has no COLLIE_JOB_SECRET"));
}

TEST_CASE("the data-connection handshake costs one round trip and a few HMACs",
          "[security][data][cost]") {
  // Over loopback in one process: a thread connects and authenticates, the
  // test thread accepts through the gate; the same without a secret.
  auto measure = [](const JobSecret& secret, int n) {
    std::string address;
    Socket listener = listen_loopback(&address);
    const PeerIdentity acceptor{group_hash("bench"), 2, 0, address};
    const auto t0 = std::chrono::steady_clock::now();
    std::exception_ptr connector_error;
    std::thread connector([&] {
      try {
        for (int i = 0; i < n; ++i) {
          Socket s = connect_to(address);
          const int one = 1;  // as the connector's data sockets: no Nagle wait for the hello
          ::setsockopt(s.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          authenticate_to_peer(s.fd, secret, {acceptor.group, 2, 1, "c"}, 0, Deadline(30s),
                               "rank 0");
          const char hello[4] = {'h', 'e', 'l', 'o'};  // what the gate reads next
          ::send(s.fd, hello, sizeof hello, MSG_NOSIGNAL);
          uint8_t done;
          ::recv(s.fd, &done, 1, 0);  // wait until the acceptor is through
        }
      } catch (...) {
        connector_error = std::current_exception();
      }
    });
    PeerGate gate(listener.fd, secret, acceptor,
                  {4, [](std::span<const uint8_t>, int, std::string*) -> std::optional<size_t> {
                     return 0;
                   }});
    for (int i = 0; i < n; ++i) {
      auto admitted = gate.accept(Deadline(30s));
      REQUIRE(admitted);
      CHECK(admitted->rank == (secret ? 1 : -1));
      ::close(admitted->fd);
    }
    connector.join();
    if (connector_error) std::rethrow_exception(connector_error);
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
               .count() /
           n;
  };
  const int n = 200;
  const double plain_us = measure(JobSecret(), n);
  const double auth_us = measure(JobSecret::generate(), n);
  const auto h0 = std::chrono::steady_clock::now();
  const JobSecret s = JobSecret::generate();
  std::vector<uint8_t> t(88, 7);
  for (int i = 0; i < 1000; ++i) t[0] = s.prove("collie data acceptor v1", t)[0];
  const double hmac_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count() /
      1000;
  WARN("connect+accept over loopback: " << plain_us << " us without a secret, " << auth_us
                                        << " us with the handshake; one HMAC-SHA256 proof: "
                                        << hmac_us << " us");
  CHECK(auth_us < 20000);  // a loose bound: milliseconds at most per connection, even loaded
}

TEST_CASE("a peer whose hello is in is admitted, not closed, when strangers fill the gate's pool",
          "[security][data]") {
  // Without a secret (a job under torchrun or mpirun): the peer connects and
  // says its hello while the gate is not looking (its rank is busy); then
  // more idle strangers arrive than the pool holds. The pool makes room by
  // closing silent strangers, never the peer. (A 3-rank job failed this way
  // under load: rank 0 evicted rank 1's waiting connection and then waited
  // for it until its timeout.)
  std::string address;
  Socket listener = listen_loopback(&address);
  PeerGate gate(
      listener.fd, JobSecret(), {group_hash("pool"), 2, 0, address},
      {4, [](std::span<const uint8_t>, int, std::string*) -> std::optional<size_t> { return 0; }},
      {.max_pending = 4, .handshake = std::chrono::milliseconds(30'000)});
  Socket peer = connect_to(address);
  const char hello[4] = {'h', 'e', 'l', 'o'};
  REQUIRE(::send(peer.fd, hello, sizeof hello, MSG_NOSIGNAL) == 4);
  std::vector<Socket> idle;
  for (int i = 0; i < 12; ++i) idle.push_back(connect_to(address));
  auto admitted = gate.accept(Deadline(30s));
  REQUIRE(admitted);
  CHECK(std::string(admitted->hello.begin(), admitted->hello.end()) == "helo");
  ::close(admitted->fd);
  CHECK(gate.refused() >= 8);  // strangers made room
  CHECK_THAT(gate.last_refusal(), Contains("closed to make room") && Contains("sent nothing"));
}
