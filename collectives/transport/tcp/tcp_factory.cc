// The TCP channel's factory (channel_factory.h): a listener on the bind
// address, and connections to the address a peer published.
#include <asio/ip/tcp.hpp>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/collectives/transport/channel_factory.h"
#include "collie/collectives/transport/sockets.h"
#include "collie/collectives/transport/tcp/tcp_channel.h"

namespace collie {
namespace {

using asio::ip::tcp;

class TcpFactory final : public ChannelFactory {
 public:
  TcpFactory(const std::string& host, int rank, int size, int buffer_bytes, bool connects)
      : rank_(rank),
        size_(size),
        buffer_bytes_(buffer_bytes),
        connects_(connects),
        listener_(listen_tcp(host, rank, size, buffer_bytes, &address_)),
        listen_fd_(listener_.native_handle()),
        protocol_(listener_.local_endpoint().protocol()) {}

  std::string_view key() const override { return "tcp"; }
  std::string address() const override { return address_; }
  int listen_fd() const override { return listen_fd_; }
  bool wants(const PeerRecord& record) const override { return connects_ && !record.tcp().empty(); }

  std::unique_ptr<Channel> connect(const PeerRecord& record, int peer, const Deadline& deadline,
                                   const Introduce& introduce, std::string*) override {
    tcp::socket socket = connect_tcp_to(record.tcp(), rank_, size_, peer, buffer_bytes_, deadline);
    // Before the handshake: AUTH3 and the hello go out back to back, and
    // Nagle would hold the hello for the acceptor's delayed ACK.
    set_no_delay(socket);
    introduce(socket.native_handle());
    return make_tcp_channel(std::move(socket), str_cat("rank ", peer, " (", record.tcp(), ")"));
  }

  std::unique_ptr<Channel> accept(UniqueFd fd, const Deadline&, const std::string& who) override {
    // The connection as an Asio socket of the listener's protocol (v4 or v6).
    tcp::socket socket(data_io_context());
    asio::error_code ec;
    socket.assign(protocol_, fd.get(), ec);
    if (ec) {
      throw NetworkError(
          str_cat("rank ", rank_, " cannot use the connection from ", who, ": ", ec.message()));
    }
    fd.release();
    set_no_delay(socket);
    return make_tcp_channel(std::move(socket), who);
  }

 private:
  const int rank_, size_, buffer_bytes_;
  const bool connects_;
  std::string address_;  // before listener_, which sets it
  tcp::acceptor listener_;
  const int listen_fd_;
  const tcp protocol_;
};

}  // namespace

std::unique_ptr<ChannelFactory> make_tcp_factory(const std::string& host, int rank, int size,
                                                 int buffer_bytes, bool connects) {
  return std::make_unique<TcpFactory>(host, rank, size, buffer_bytes, connects);
}

}  // namespace collie
