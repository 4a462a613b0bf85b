#include "collie/collectives/transport/sockets.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "collie/base/backoff.h"
#include "collie/base/error.h"
#include "collie/base/host_port.h"
#include "collie/base/logging.h"
#include "collie/base/socket_io.h"
#include "collie/base/str_cat.h"

namespace collie {
namespace {

using asio::ip::tcp;

// SO_ERROR, the result of a non-blocking connect (Asio has no option type
// for it): a GettableSocketOption.
struct PendingError {
  int value = 0;
  int level(const tcp&) const { return SOL_SOCKET; }
  int name(const tcp&) const { return SO_ERROR; }
  int* data(const tcp&) { return &value; }
  size_t size(const tcp&) const { return sizeof value; }
  void resize(const tcp&, size_t) {}
};

// On a socket or an acceptor (which passes them on to what it accepts).
template <typename Socket>
void set_buffers(Socket& socket, int bytes) {
  if (bytes <= 0) return;
  asio::error_code ignored;  // the kernel's default size is no error
  socket.set_option(asio::socket_base::send_buffer_size(bytes), ignored);
  socket.set_option(asio::socket_base::receive_buffer_size(bytes), ignored);
}

// A peer's published "host:port" (join_address wrote it) -> host, port.
HostPort split_address(const std::string& address, int peer) {
  try {
    return split_host_port(address, PortRule::kRequired);
  } catch (const InvalidArgument& e) {
    throw StoreError(str_cat("rank ", peer, " published a malformed address: ", e.what()));
  }
}

// A socket or an acceptor of the data plane for `protocol`, opened
// close-on-exec and non-blocking (Asio's open() sets neither: a process
// started meanwhile would inherit the descriptor) and handed to Asio.
template <typename Socket>
Socket new_socket(const tcp& protocol, std::string_view purpose, int rank, int size) {
  const int fd = ::socket(protocol.family(), protocol.type() | SOCK_CLOEXEC | SOCK_NONBLOCK,
                          protocol.protocol());
  if (fd < 0) {
    const int err = errno;
    throw NetworkError(str_cat("rank ", rank, " cannot open a socket ", purpose, ": ",
                               describe_fd_failure("socket()", err, size)));
  }
  Socket socket(data_io_context());
  asio::error_code ec;
  socket.assign(protocol, fd, ec);
  if (ec) {
    ::close(fd);
    throw NetworkError(
        str_cat("rank ", rank, " cannot use its socket ", purpose, ": ", ec.message()));
  }
  return socket;
}

// One connect within the deadline. Asio's connect() waits for the handshake
// without a limit, so the socket's native handle connects and poll() waits,
// as every wait in the data plane does; TimeoutError at the deadline.
asio::error_code connect_within(tcp::socket& socket, const tcp::endpoint& to,
                                const Deadline& deadline, const std::string& what) {
  if (::connect(socket.native_handle(), to.data(), static_cast<socklen_t>(to.size())) == 0)
    return {};
  if (errno != EINPROGRESS) return {errno, asio::system_category()};
  if (wait_socket(socket.native_handle(), POLLOUT, deadline.when()).kind ==
      IoResult::Kind::kTimeout) {
    throw TimeoutError(str_cat(what, " timed out ", deadline.describe()));
  }
  PendingError pending;
  asio::error_code ec;
  socket.get_option(pending, ec);
  return ec ? ec : asio::error_code(pending.value, asio::system_category());
}

sockaddr_un abstract_address(const std::string& name, socklen_t* len) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof sa.sun_path - 1);
  std::memcpy(sa.sun_path + 1, name.data(), n);  // sun_path[0] = 0: the abstract namespace
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return sa;
}

}  // namespace

asio::io_context& data_io_context() {
  static auto* context = new asio::io_context();
  return *context;
}

std::string join_address(const std::string& host, uint16_t port) {
  return host.find(':') != std::string::npos ? str_cat("[", host, "]:", port)
                                             : str_cat(host, ":", port);
}

std::string numeric_host(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  } else {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  }
  return buf;
}

std::string tcp_address(const sockaddr* sa) {
  const uint16_t port =
      ntohs(sa->sa_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(sa)->sin6_port
                                      : reinterpret_cast<const sockaddr_in*>(sa)->sin_port);
  return join_address(numeric_host(sa), port);
}

std::string describe_fd_failure(std::string_view call, int err, int size) {
  std::string text = str_cat(call, ": ", std::strerror(err));
  if (err == EMFILE || err == ENFILE) {
    rlimit rl{};
    const std::string limit = ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                                  ? std::to_string(static_cast<unsigned long long>(rl.rlim_cur))
                                  : std::string("unknown");
    text +=
        str_cat(" (RLIMIT_NOFILE is ", limit, "; a rank of a world of ", size,
                " holds two listeners and one descriptor per peer it talks to, up to ", size - 1,
                " when its algorithms talk to every peer, on top of what the "
                "process already holds: raise `ulimit -n`)");
  }
  return text;
}

void write_all(int fd, const void* data, size_t n, const Deadline& deadline,
               const std::string& who) {
  const IoResult r = send_all(fd, data, n, deadline.when());
  if (r.kind == IoResult::Kind::kTimeout)
    throw TimeoutError(str_cat("sending the hello to ", who, " timed out ", deadline.describe()));
  if (!r.ok())
    throw NetworkError(str_cat("sending the hello to ", who, " failed: ", std::strerror(r.error)));
}

// The channel sets the non-blocking mode, which is essential
// (make_tcp_channel).
void set_no_delay(tcp::socket& socket) {
  asio::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
}

tcp::socket connect_tcp_to(const std::string& address, int rank, int size, int peer,
                           int buffer_bytes, const Deadline& deadline) {
  const auto [host, port] = split_address(address, peer);
  const std::string what = str_cat("connecting to rank ", peer, " at ", address);
  tcp::resolver resolver(data_io_context());
  Backoff backoff({.initial = std::chrono::milliseconds(1), .max = std::chrono::milliseconds(200)});
  for (;;) {
    asio::error_code ec;
    const tcp::resolver::results_type endpoints =
        resolver.resolve(host, port, tcp::resolver::numeric_service, ec);
    const bool resolved = !ec;
    for (const auto& entry : endpoints) {
      tcp::socket socket = new_socket<tcp::socket>(
          entry.endpoint().protocol(), str_cat("to connect to rank ", peer, " at ", address), rank,
          size);
      set_buffers(socket, buffer_bytes);
      ec = connect_within(socket, entry.endpoint(), deadline, what);
      if (!ec) return socket;
    }
    if (resolved && endpoints.empty()) ec = asio::error::host_not_found;
    const bool retry = !resolved || ec == asio::error::connection_refused ||
                       ec == asio::error::timed_out || ec == asio::error::try_again ||
                       ec == asio::error::host_unreachable;
    if (deadline.expired() || !retry) {
      throw NetworkError(str_cat(what, " failed: ", ec.message(), " ", deadline.describe()));
    }
    backoff.sleep(deadline);
  }
}

tcp::acceptor listen_tcp(const std::string& host, int rank, int size, int buffer_bytes,
                         std::string* address) {
  tcp::resolver resolver(data_io_context());
  asio::error_code ec;
  const tcp::resolver::results_type endpoints =
      resolver.resolve(host, "0", tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) {
    throw InvalidArgument(str_cat("rank ", rank, " cannot listen on '", host,
                                  "': ", ec ? ec.message() : "it has no address"));
  }
  const tcp::endpoint at = endpoints.begin()->endpoint();
  tcp::acceptor acceptor = new_socket<tcp::acceptor>(at.protocol(), "to listen on", rank, size);
  set_buffers(acceptor, buffer_bytes);
  if (acceptor.bind(at, ec); ec) {
    throw NetworkError(
        str_cat("rank ", rank, " cannot listen on ", host, ":0: bind(): ", ec.message()));
  }
  if (acceptor.listen(asio::socket_base::max_listen_connections, ec); ec) {
    throw NetworkError(
        str_cat("rank ", rank, " cannot listen on ", host, ":0: listen(): ", ec.message()));
  }
  const tcp::endpoint bound = acceptor.local_endpoint(ec);
  if (ec) {
    throw NetworkError(str_cat("rank ", rank, " cannot read its listening port on ", host,
                               ": getsockname(): ", ec.message()));
  }
  *address = join_address(bound.address().to_string(), bound.port());
  return acceptor;
}

UniqueFd connect_unix_to(const std::string& name, const Deadline& deadline, int* err_out) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) {
    *err_out = errno;
    return fd;
  }
  socklen_t len;
  const sockaddr_un sa = abstract_address(name, &len);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&sa), len) == 0) return fd;
  int err = errno;
  if (err == EINPROGRESS || err == EAGAIN) {
    // A full backlog: wait for room (the listener accepts as it progresses).
    if (wait_socket(fd.get(), POLLOUT, deadline.when()).kind == IoResult::Kind::kOk) {
      socklen_t l = sizeof err;
      if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &l) != 0) err = errno;
      if (err == 0) return fd;
    }
  }
  *err_out = err;
  return UniqueFd();
}

UniqueFd listen_unix(const std::string& name) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return fd;
  socklen_t len;
  const sockaddr_un sa = abstract_address(name, &len);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&sa), len) != 0 ||
      ::listen(fd.get(), SOMAXCONN) != 0) {
    COLLIE_LOG(kWarn) << "cannot listen on the local socket @" << name << ": "
                      << std::strerror(errno) << "; peers on this host will use TCP";
    return UniqueFd();
  }
  return fd;
}

}  // namespace collie
