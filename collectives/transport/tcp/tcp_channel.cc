#include "collie/collectives/transport/tcp/tcp_channel.h"

#include <poll.h>

#include <array>
#include <cerrno>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie {
namespace {

// What read_some/write_some's error means in the Channel's convention:
// 0 at the end of the stream, else -1 with errno (EAGAIN: nothing moves now).
ssize_t channel_error(const asio::error_code& ec) {
  if (ec == asio::error::eof) return 0;
  errno = ec.category() == asio::system_category() ? ec.value() : EIO;
  return -1;
}

template <typename Socket>
class StreamChannel final : public Channel {
 public:
  explicit StreamChannel(Socket socket)
      : socket_(std::move(socket)), fd_(socket_.native_handle()) {}

  ChannelKind kind() const override { return ChannelKind::kTcp; }

  ssize_t write(const iovec* iov, int count) override {
    // A frame is a header and a payload: at most two buffers, more are
    // written on the next call ("what fits, in order"). One buffer and
    // std::array of two are the shapes Asio hands to sendmsg without a loop.
    if (count <= 0) return 0;
    asio::error_code ec;
    size_t sent = 0;
    if (count == 1) {
      sent = socket_.write_some(asio::const_buffer(iov[0].iov_base, iov[0].iov_len), ec);
    } else {
      const std::array<asio::const_buffer, 2> buffers{
          asio::const_buffer(iov[0].iov_base, iov[0].iov_len),
          asio::const_buffer(iov[1].iov_base, iov[1].iov_len)};
      sent = socket_.write_some(buffers, ec);
    }
    return ec ? channel_error(ec) : static_cast<ssize_t>(sent);
  }
  ssize_t read(void* data, size_t bytes) override {
    asio::error_code ec;
    const size_t got = socket_.read_some(asio::buffer(data, bytes), ec);
    return ec ? channel_error(ec) : static_cast<ssize_t>(got);
  }
  ssize_t peek(void* data, size_t bytes) override {
    asio::error_code ec;
    const size_t got = socket_.receive(asio::buffer(data, bytes), Socket::message_peek, ec);
    return ec ? channel_error(ec) : static_cast<ssize_t>(got);
  }

  int fd() const override { return fd_; }
  short arm(bool want_read, bool want_write, bool* ready) override {
    *ready = false;
    return static_cast<short>((want_read ? POLLIN : 0) | (want_write ? POLLOUT : 0) | POLLRDHUP);
  }
  short disarm(short revents) override { return revents; }

  // shutdown() only calls shutdown(2) on the handle: safe beside a poll()
  // in another thread.
  void shutdown_write() override {
    asio::error_code ignored;
    socket_.shutdown(Socket::shutdown_send, ignored);
  }
  void shutdown_both() override {
    asio::error_code ignored;
    socket_.shutdown(Socket::shutdown_both, ignored);
  }

 private:
  Socket socket_;
  const int fd_;  // socket_'s native handle, for poll()
};

// Asio's own non-blocking mode: with it, read_some/write_some return
// would_block rather than waiting inside Asio with no deadline.
template <typename Socket>
std::unique_ptr<Channel> make_channel(Socket socket, const std::string& who) {
  asio::error_code ec;
  socket.non_blocking(true, ec);
  if (ec) {
    throw NetworkError(
        str_cat("making the connection to ", who, " non-blocking failed: ", ec.message()));
  }
  return std::make_unique<StreamChannel<Socket>>(std::move(socket));
}

}  // namespace

std::unique_ptr<Channel> make_tcp_channel(asio::ip::tcp::socket socket, const std::string& who) {
  return make_channel(std::move(socket), who);
}

std::unique_ptr<Channel> make_local_channel(UniqueFd fd, const std::string& who) {
  asio::local::stream_protocol::socket socket(data_io_context());
  asio::error_code ec;
  socket.assign(asio::local::stream_protocol(), fd.get(), ec);
  if (ec) throw NetworkError(str_cat("adopting the local socket to ", who, ": ", ec.message()));
  fd.release();
  return make_channel(std::move(socket), who);
}

}  // namespace collie
