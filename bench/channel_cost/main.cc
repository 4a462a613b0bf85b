// channel_cost: what the TCP channel's write and read cost on the calling
// thread, Asio's socket (collectives/transport/tcp/tcp_channel.h, read_some and
// write_some in non-blocking mode) against the raw calls the channel made
// before (c41bdef: sendmsg and recv with MSG_DONTWAIT on the descriptor).
//
// One thread plays both ends of a loopback TCP connection: it writes a
// frame (header and payload) on one end and reads it on the other, then
// back. Loopback delivers
// within the write, so there is no wake-up and no scheduling in the loop,
// only the calls: the figure is the channel's own cost plus the kernel's,
// which a busy machine disturbs far less than a ping-pong between processes.
// Blocks of round trips alternate between the two kinds, so load falls on
// both alike; it prints the median (min-max) ns per round trip of each.
//
// A third row registers raw sockets with an epoll nobody waits on, as Asio
// does when it adopts a socket: the kernel's share of the difference.
//
//   channel_cost [payload bytes=4] [round trips per block=20000] [blocks=21] [only]
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collie/collectives/transport/tcp/tcp_channel.h"

using namespace collie;
using asio::ip::tcp;

namespace {

// c41bdef's TcpChannel, the calls the channel made before Asio.
class RawChannel final : public Channel {
 public:
  explicit RawChannel(int fd) : fd_(fd) {}
  ~RawChannel() override { ::close(fd_); }
  ChannelKind kind() const override { return ChannelKind::kTcp; }
  ssize_t write(const iovec* iov, int count) override {
    msghdr msg{};
    msg.msg_iov = const_cast<iovec*>(iov);
    msg.msg_iovlen = static_cast<size_t>(count);
    return ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  ssize_t read(void* data, size_t bytes) override { return ::recv(fd_, data, bytes, MSG_DONTWAIT); }
  ssize_t peek(void* data, size_t bytes) override {
    return ::recv(fd_, data, bytes, MSG_PEEK | MSG_DONTWAIT);
  }
  int fd() const override { return fd_; }
  short arm(bool, bool, bool* ready) override {
    *ready = true;
    return 0;
  }
  short disarm(short revents) override { return revents; }
  void shutdown_write() override { ::shutdown(fd_, SHUT_WR); }
  void shutdown_both() override { ::shutdown(fd_, SHUT_RDWR); }

 private:
  const int fd_;
};

// One frame from `from` to `to`, as the transport moves it
// (collectives/transport/connection.cc): one write of the 40-byte header and the
// payload together, then a read of the header on its own and one of the
// payload into place, each repeated until all of it moved.
void move_frame(Channel& from, Channel& to, const std::vector<char>& payload,
                std::vector<char>& into) {
  constexpr size_t kHeader = 40;  // sizeof(WireHeader)
  char header_out[kHeader] = {}, header_in[kHeader];
  const size_t total = kHeader + payload.size();
  size_t sent = 0, got = 0;
  while (got < total) {
    if (sent < total) {
      iovec iov[2];
      int n = 0;
      if (sent < kHeader) iov[n++] = {header_out + sent, kHeader - sent};
      const size_t done = sent > kHeader ? sent - kHeader : 0;
      if (done < payload.size())
        iov[n++] = {const_cast<char*>(payload.data()) + done, payload.size() - done};
      const ssize_t r = from.write(iov, n);
      if (r < 0 && errno != EAGAIN) std::abort();
      if (r > 0) sent += static_cast<size_t>(r);
    }
    const ssize_t r = got < kHeader ? to.read(header_in + got, kHeader - got)
                                    : to.read(into.data() + (got - kHeader), total - got);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r == 0 || errno != EAGAIN) {
      std::abort();
    }
  }
}

// One connected pair over loopback.
std::pair<tcp::socket, tcp::socket> connected_pair() {
  tcp::acceptor acceptor(data_io_context(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  tcp::socket a(data_io_context());
  a.connect(acceptor.local_endpoint());
  tcp::socket b = acceptor.accept();
  a.set_option(tcp::no_delay(true));
  b.set_option(tcp::no_delay(true));
  return {std::move(a), std::move(b)};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 4;
  const int trips = argc > 2 ? std::atoi(argv[2]) : 20000;
  const int blocks = argc > 3 ? std::atoi(argv[3]) : 21;

  struct Kind {
    const char* name;
    std::unique_ptr<Channel> a, b;
    std::vector<double> ns;
  };
  // Raw descriptors of a fresh pair, non-blocking; with `epoll`, also
  // registered the way Asio registers a socket it adopts (epoll_reactor.ipp:
  // edge-triggered EPOLLIN), on an epoll nobody waits on: what that alone
  // costs the kernel on each arrival.
  auto raw_kind = [](const char* name, int epoll) {
    auto [a, b] = connected_pair();
    const int fa = a.release(), fb = b.release();
    for (int fd : {fa, fb}) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLPRI | EPOLLET;
      if (epoll >= 0) ::epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &ev);
    }
    return Kind{name, std::make_unique<RawChannel>(fa), std::make_unique<RawChannel>(fb), {}};
  };
  const int epoll = ::epoll_create1(EPOLL_CLOEXEC);
  std::vector<Kind> kinds;
  kinds.push_back(raw_kind("raw sockets (c41bdef)", -1));
  kinds.push_back(raw_kind("raw + epoll registration", epoll));
  {
    auto [a, b] = connected_pair();
    kinds.push_back({"asio channel (this tree)",
                     make_tcp_channel(std::move(a), "a"),
                     make_tcp_channel(std::move(b), "b"),
                     {}});
  }
  const std::string only = argc > 4 ? argv[4] : "";  // to profile one kind alone

  std::vector<char> out(bytes, 'x'), in(bytes);
  for (int block = -1; block < blocks; ++block) {  // block -1 warms up
    for (Kind& k : kinds) {
      if (std::string_view(k.name).find(only) == std::string_view::npos) continue;
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < trips; ++i) {
        move_frame(*k.a, *k.b, out, in);
        move_frame(*k.b, *k.a, out, in);
      }
      const std::chrono::duration<double, std::nano> took =
          std::chrono::steady_clock::now() - start;
      if (block >= 0) k.ns.push_back(took.count() / trips);
    }
  }
  std::printf(
      "# channel_cost: %zu-byte payloads, %d round trips per block, %d blocks, one thread\n", bytes,
      trips, blocks);
  std::printf("# ns per round trip (two frames): median (min-max) over blocks\n");
  for (const Kind& k : kinds) {
    if (k.ns.empty()) continue;
    std::printf("%-26s %10.0f (%.0f-%.0f)  x%.3f of raw\n", k.name, median(k.ns),
                *std::min_element(k.ns.begin(), k.ns.end()),
                *std::max_element(k.ns.begin(), k.ns.end()),
                kinds[0].ns.empty() ? 0.0 : median(k.ns) / median(kinds[0].ns));
  }
  return 0;
}
