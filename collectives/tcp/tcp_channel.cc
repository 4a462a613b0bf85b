#include "collectives/tcp/tcp_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace collie {
namespace {

class TcpChannel final : public Channel {
 public:
  explicit TcpChannel(UniqueFd fd) : fd_(std::move(fd)) {}

  ChannelKind kind() const override { return ChannelKind::kTcp; }

  ssize_t write(const iovec* iov, int count) override {
    msghdr msg{};
    msg.msg_iov = const_cast<iovec*>(iov);
    msg.msg_iovlen = static_cast<size_t>(count);
    return ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  ssize_t read(void* data, size_t bytes) override {
    return ::recv(fd_.get(), data, bytes, MSG_DONTWAIT);
  }
  ssize_t peek(void* data, size_t bytes) override {
    return ::recv(fd_.get(), data, bytes, MSG_PEEK | MSG_DONTWAIT);
  }

  int fd() const override { return fd_.get(); }
  short arm(bool want_read, bool want_write, bool* ready) override {
    *ready = false;
    return static_cast<short>((want_read ? POLLIN : 0) | (want_write ? POLLOUT : 0) | POLLRDHUP);
  }
  short disarm(short revents) override { return revents; }

  void shutdown_write() override { ::shutdown(fd_.get(), SHUT_WR); }
  void shutdown_both() override { ::shutdown(fd_.get(), SHUT_RDWR); }

 private:
  UniqueFd fd_;
};

}  // namespace

std::unique_ptr<Channel> make_tcp_channel(UniqueFd fd) {
  return std::make_unique<TcpChannel>(std::move(fd));
}

}  // namespace collie
