// The Channel contract (collectives/transport/channel.h), one suite run over
// every channel: TCP over loopback, the local Unix-socket channel, and
// shared memory. Each case builds a connected pair the way the linker does
// (a connected socket, or the shared-memory set-up over a socketpair) and
// drives it only through the Channel interface, with poll() waits bounded
// by a deadline, the way Connection does.
#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio/ip/tcp.hpp>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/base/unique_fd.h"
#include "collie/collectives/transport/channel.h"
#include "collie/collectives/transport/shm/shm_channel.h"
#include "collie/collectives/transport/tcp/tcp_channel.h"

using namespace collie;
using namespace std::chrono_literals;

namespace {

struct Pair {
  std::unique_ptr<Channel> a, b;
};

UniqueFd socketpair_end(UniqueFd* other) {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds) == 0);
  *other = UniqueFd(fds[1]);
  return UniqueFd(fds[0]);
}

// The shared-memory set-up of one end (connector or acceptor) on `fd`.
std::unique_ptr<Channel> shm_end(UniqueFd& fd, bool connector, std::string* why) {
  const Deadline deadline(std::chrono::seconds(30));
  return connector ? shm_connect(fd, size_t{64} << 10, deadline, "connector", why)
                   : shm_accept(fd, deadline, "acceptor", why);
}

Pair make_pair(const std::string& kind) {
  Pair p;
  if (kind == "tcp") {
    using asio::ip::tcp;
    tcp::acceptor acceptor(data_io_context(),
                           tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    tcp::socket client(data_io_context());
    client.connect(acceptor.local_endpoint());
    tcp::socket server = acceptor.accept();
    p.a = make_tcp_channel(std::move(client), "tcp a");
    p.b = make_tcp_channel(std::move(server), "tcp b");
  } else if (kind == "local") {
    UniqueFd other;
    UniqueFd fd = socketpair_end(&other);
    p.a = make_local_channel(std::move(fd), "local a");
    p.b = make_local_channel(std::move(other), "local b");
  } else {
    UniqueFd other;
    UniqueFd fd = socketpair_end(&other);
    std::string why_b;
    std::thread acceptor([&] { p.b = shm_end(other, false, &why_b); });
    std::string why_a;
    p.a = shm_end(fd, true, &why_a);
    acceptor.join();
    INFO(why_a << " / " << why_b);
    REQUIRE(p.a != nullptr);
    REQUIRE(p.b != nullptr);
  }
  return p;
}

// Waits as Connection does until `c` can read (want_read) or write, or its
// peer is gone: arm, poll, disarm. Returns disarm's readiness; 0 at the
// deadline.
short wait_for(Channel& c, bool want_read, bool want_write, const Deadline& deadline) {
  for (;;) {
    bool ready = false;
    const short events = c.arm(want_read, want_write, &ready);
    short revents = 0;
    if (!ready) {
      pollfd pfd{c.fd(), static_cast<short>(events | POLLRDHUP), 0};
      const int ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline.remaining()).count());
      if (ms <= 0) return 0;
      const int n = ::poll(&pfd, 1, std::min(ms, 100));
      if (n < 0 && errno == EINTR) continue;
      revents = n > 0 ? pfd.revents : 0;
    }
    const short got = c.disarm(revents);
    if ((want_read && (got & POLLIN)) || (want_write && (got & POLLOUT)) ||
        (got & (POLLHUP | POLLRDHUP)))
      return got;
    if (deadline.expired()) return 0;
  }
}

// Writes all of `data` (several buffers at once) through `c`.
void write_all(Channel& c, const std::vector<std::span<const uint8_t>>& buffers,
               const Deadline& deadline) {
  std::vector<iovec> iov;
  for (const auto& b : buffers) iov.push_back({const_cast<uint8_t*>(b.data()), b.size()});
  size_t first = 0;
  while (first < iov.size()) {
    const ssize_t n = c.write(iov.data() + first, static_cast<int>(iov.size() - first));
    if (n < 0) {
      REQUIRE(errno == EAGAIN);
      REQUIRE(wait_for(c, false, true, deadline) != 0);
      continue;
    }
    size_t left = static_cast<size_t>(n);
    while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (left > 0) {
      iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
    while (first < iov.size() && iov[first].iov_len == 0) ++first;
  }
}

// Reads until EOF (read() == 0), waiting whenever nothing is there.
std::vector<uint8_t> read_to_eof(Channel& c, const Deadline& deadline) {
  std::vector<uint8_t> out;
  uint8_t buf[4096];
  for (;;) {
    const ssize_t n = c.read(buf, sizeof buf);
    if (n == 0) return out;
    if (n > 0) {
      out.insert(out.end(), buf, buf + n);
      continue;
    }
    REQUIRE(errno == EAGAIN);
    REQUIRE(wait_for(c, true, false, deadline) != 0);
  }
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed);
  return v;
}

}  // namespace

TEST_CASE("channel contract: bytes written before the peer shuts down arrive, then EOF",
          "[channel]") {
  const std::string kind = GENERATE("tcp", "local", "shm");
  INFO(kind);
  Pair p = make_pair(kind);
  CHECK(p.a->kind() == (kind == "shm" ? ChannelKind::kShm : ChannelKind::kTcp));
  const Deadline deadline(30s);
  const auto data = pattern(1000, 7);
  write_all(*p.a, {data}, deadline);
  p.a->shutdown_write();
  CHECK(read_to_eof(*p.b, deadline) == data);
  // The other direction still works after a half close.
  const auto back = pattern(10, 1);
  write_all(*p.b, {back}, deadline);
  p.b->shutdown_write();
  CHECK(read_to_eof(*p.a, deadline) == back);
}

TEST_CASE("channel contract: nothing to read is EAGAIN; peek does not consume", "[channel]") {
  const std::string kind = GENERATE("tcp", "local", "shm");
  INFO(kind);
  Pair p = make_pair(kind);
  const Deadline deadline(30s);
  char buf[8];
  errno = 0;
  CHECK(p.b->read(buf, sizeof buf) == -1);
  CHECK(errno == EAGAIN);
  const std::vector<uint8_t> hello{'h', 'e', 'l', 'l', 'o'};
  write_all(*p.a, {hello}, deadline);
  REQUIRE((wait_for(*p.b, true, false, deadline) & POLLIN) != 0);
  CHECK(p.b->peek(buf, 5) == 5);
  CHECK(std::string(buf, 5) == "hello");
  CHECK(p.b->peek(buf, 3) == 3);  // still there
  CHECK(p.b->read(buf, 5) == 5);
  CHECK(std::string(buf, 5) == "hello");
  errno = 0;
  CHECK(p.b->read(buf, sizeof buf) == -1);
  CHECK(errno == EAGAIN);
}

TEST_CASE("channel contract: read_to hands the bytes over in order, in pieces", "[channel]") {
  const std::string kind = GENERATE("tcp", "local", "shm");
  INFO(kind);
  Pair p = make_pair(kind);
  const Deadline deadline(30s);
  const auto a = pattern(3000, 1), b = pattern(5000, 2);
  std::thread writer([&] { write_all(*p.a, {a, b}, deadline); });
  std::vector<uint8_t> got;
  int pieces = 0;
  while (got.size() < a.size() + b.size()) {
    const ssize_t n =
        p.b->read_to(a.size() + b.size() - got.size(), [&](const uint8_t* d, size_t k) {
          got.insert(got.end(), d, d + k);
          ++pieces;
        });
    if (n < 0) {
      REQUIRE(errno == EAGAIN);
      REQUIRE(wait_for(*p.b, true, false, deadline) != 0);
    }
  }
  writer.join();
  std::vector<uint8_t> want = a;
  want.insert(want.end(), b.begin(), b.end());
  CHECK(got == want);
  CHECK(pieces >= 1);
}

TEST_CASE("channel contract: arm and disarm: a full channel waits for room, an empty one for data",
          "[channel]") {
  const std::string kind = GENERATE("tcp", "local", "shm");
  INFO(kind);
  Pair p = make_pair(kind);
  const Deadline deadline(30s);
  // Armed for reading with nothing sent: poll() sees nothing that disarm()
  // turns into readability.
  bool ready = true;
  const short events = p.b->arm(true, false, &ready);
  CHECK_FALSE(ready);
  pollfd pfd{p.b->fd(), events, 0};
  const int n = ::poll(&pfd, 1, 20);
  CHECK((p.b->disarm(n > 0 ? pfd.revents : 0) & POLLIN) == 0);
  // Fill a's direction until write() refuses.
  const auto chunk = pattern(64 << 10, 3);
  size_t written = 0;
  for (;;) {
    iovec v{const_cast<uint8_t*>(chunk.data()), chunk.size()};
    const ssize_t w = p.a->write(&v, 1);
    if (w < 0) {
      REQUIRE(errno == EAGAIN);
      break;
    }
    written += static_cast<size_t>(w);
    REQUIRE(written < (size_t{256} << 20));  // some buffer must fill
  }
  // The reader is woken, and reading makes room that wakes the writer.
  REQUIRE((wait_for(*p.b, true, false, deadline) & POLLIN) != 0);
  std::vector<uint8_t> sink(written);
  size_t got = 0;
  std::thread reader([&] {
    while (got < written) {
      const ssize_t r = p.b->read(sink.data() + got, written - got);
      if (r > 0) {
        got += static_cast<size_t>(r);
      } else if (r < 0 && errno == EAGAIN) {
        if (wait_for(*p.b, true, false, deadline) == 0) return;
      } else {
        return;
      }
    }
  });
  CHECK((wait_for(*p.a, false, true, deadline) & POLLOUT) != 0);
  reader.join();
  CHECK(got == written);
}

TEST_CASE("channel contract: shutdown_both from another thread ends a wait at once", "[channel]") {
  const std::string kind = GENERATE("tcp", "local", "shm");
  INFO(kind);
  Pair p = make_pair(kind);
  const auto start = std::chrono::steady_clock::now();
  short got = 0;
  std::thread waiter([&] { got = wait_for(*p.b, true, false, Deadline(30s)); });
  std::this_thread::yield();
  p.b->shutdown_both();
  waiter.join();
  CHECK(got != 0);  // woken: readable (EOF) or hung up, not the deadline
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  char c;
  CHECK(p.b->read(&c, 1) <= 0);
}

TEST_CASE("channel contract: a peer that is killed: its bytes arrive, then EOF and a hang-up",
          "[channel]") {
  const std::string kind = GENERATE("tcp", "local", "shm");
  INFO(kind);
  const auto data = pattern(100000, 9);
  // The peer is another process that builds its end, writes, and dies of
  // SIGKILL without closing anything.
  UniqueFd child_fd;
  UniqueFd parent_fd;
  std::unique_ptr<asio::ip::tcp::acceptor> acceptor;
  if (kind == "tcp") {
    acceptor = std::make_unique<asio::ip::tcp::acceptor>(
        data_io_context(), asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  } else {
    parent_fd = socketpair_end(&child_fd);
  }
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::unique_ptr<Channel> c;
    if (kind == "tcp") {
      asio::ip::tcp::socket s(data_io_context());
      asio::error_code ec;
      s.connect(acceptor->local_endpoint(), ec);
      if (ec) _exit(2);
      c = make_tcp_channel(std::move(s), "child");
    } else if (kind == "local") {
      parent_fd.reset();
      c = make_local_channel(std::move(child_fd), "child");
    } else {
      parent_fd.reset();
      std::string why;
      c = shm_end(child_fd, false, &why);
      if (!c) _exit(3);
    }
    size_t off = 0;
    while (off < data.size()) {
      iovec v{const_cast<uint8_t*>(data.data() + off), data.size() - off};
      const ssize_t w = c->write(&v, 1);
      if (w > 0) {
        off += static_cast<size_t>(w);
      } else if (errno != EAGAIN || wait_for(*c, false, true, Deadline(30s)) == 0) {
        _exit(4);
      }
    }
    ::raise(SIGKILL);
    _exit(5);
  }
  std::unique_ptr<Channel> c;
  if (kind == "tcp") {
    c = make_tcp_channel(acceptor->accept(), "parent");
  } else if (kind == "local") {
    child_fd.reset();
    c = make_local_channel(std::move(parent_fd), "parent");
  } else {
    child_fd.reset();
    std::string why;
    c = shm_end(parent_fd, true, &why);
    INFO(why);
    REQUIRE(c != nullptr);
  }
  int status = 0;
  const Deadline deadline(30s);
  const auto got = read_to_eof(*c, deadline);
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFSIGNALED(status));
  CHECK(got == data);
  // Gone for good: waiting again reports the hang-up at once, and a write
  // fails rather than vanishing.
  CHECK((wait_for(*c, true, false, deadline) & (POLLHUP | POLLRDHUP)) != 0);
  const uint8_t byte = 1;
  iovec v{const_cast<uint8_t*>(&byte), 1};
  ssize_t w = 0;
  for (int i = 0; i < 1000 && w >= 0; ++i) w = c->write(&v, 1);  // a socket may take a few
  CHECK(w == -1);
}

TEST_CASE("channel contract: 64 MiB of frames from 1 B to 1 MiB, and zero-length writes",
          "[channel]") {
  const std::string kind = GENERATE("tcp", "local", "shm");
  INFO(kind);
  Pair p = make_pair(kind);
  const Deadline deadline(120s);
  const size_t total = size_t{64} << 20;
  const auto header = pattern(24, 5);
  uint64_t sent_sum = 0, got_sum = 0;
  size_t sent = 0, got = 0;
  std::atomic<ssize_t> zero_write{0};
  std::thread writer([&] {
    const auto payload = pattern(1 << 20, 11);
    for (size_t i = 0; sent < total; ++i) {
      const size_t n = 1 + (i * 7919 + i * i * 104729) % payload.size();  // 1 B to 1 MiB
      // A zero-length write moves nothing and is no error.
      iovec none{const_cast<uint8_t*>(header.data()), 0};
      if (const ssize_t z = p.a->write(&none, 1); z != 0) {
        zero_write = z == -1 ? -1000 - errno : z;
        break;
      }
      const std::span<const uint8_t> frame(payload.data(), n);
      write_all(*p.a, {header, frame}, deadline);
      for (uint8_t b : header) sent_sum = sent_sum * 31 + b;
      for (uint8_t b : frame) sent_sum = sent_sum * 31 + b;
      sent += header.size() + n;
    }
    p.a->shutdown_write();
  });
  std::vector<uint8_t> buf(1 << 20);
  for (;;) {
    const ssize_t n = p.b->read(buf.data(), buf.size());
    if (n == 0) break;
    if (n < 0) {
      REQUIRE(errno == EAGAIN);
      REQUIRE(wait_for(*p.b, true, false, deadline) != 0);
      continue;
    }
    for (ssize_t k = 0; k < n; ++k) got_sum = got_sum * 31 + buf[static_cast<size_t>(k)];
    got += static_cast<size_t>(n);
  }
  writer.join();
  CHECK(zero_write == 0);  // -1000 - errno when it failed
  CHECK(sent >= total);
  CHECK(got == sent);
  CHECK(got_sum == sent_sum);
}

namespace {

// Size and Rss (kB) of each mapping of this process whose name contains
// `name`, from /proc/self/smaps.
std::vector<std::pair<long, long>> mapped_kb(const std::string& name) {
  std::vector<std::pair<long, long>> out;
  FILE* f = std::fopen("/proc/self/smaps", "r");
  REQUIRE(f != nullptr);
  char line[512];
  bool in = false;
  while (std::fgets(line, sizeof line, f)) {
    const std::string s(line);
    // A mapping's first line starts with its address range, in hex.
    if (!s.empty() && std::isxdigit(static_cast<unsigned char>(s[0])) &&
        s.find('-') < s.find(' ')) {
      in = s.find(name) != std::string::npos;
      if (in) out.emplace_back(-1, -1);
      continue;
    }
    if (!in) continue;
    long kb = 0;
    if (std::sscanf(line, "Size: %ld kB", &kb) == 1) out.back().first = kb;
    if (std::sscanf(line, "Rss: %ld kB", &kb) == 1) out.back().second = kb;
  }
  std::fclose(f);
  return out;
}

}  // namespace

TEST_CASE("shm: both ends' rings are mapped at set-up, not page by page at first touch",
          "[channel]") {
  // Otherwise each side faults on every 4 KiB page of a ring the first time
  // it writes or reads there: a small message in every 32 to 64 of a job's
  // first pass through the rings pays a page fault (shm_channel.cc).
  Pair p = make_pair("shm");
  const auto maps = mapped_kb("collie-shm");
  REQUIRE(maps.size() >= 2);  // one mapping per end
  for (const auto& [size_kb, rss_kb] : maps) {
    INFO("mapping of " << size_kb << " kB, " << rss_kb << " kB resident");
    CHECK(size_kb >= 128);  // the two 64 KiB rings at least
    CHECK(rss_kb == size_kb);
  }
}
