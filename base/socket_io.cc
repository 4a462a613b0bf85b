#include "collie/base/socket_io.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace collie {
namespace {

int poll_timeout_ms(Clock::time_point until) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
  // Round up so that a sub-millisecond remainder still waits, and cap so the
  // int never overflows on a 30-minute deadline.
  return static_cast<int>(std::clamp<int64_t>(left + 1, 0, 60'000));
}

IoResult io_error(int err) { return {IoResult::Kind::kError, err}; }

}  // namespace

std::string IoResult::describe() const {
  switch (kind) {
    case Kind::kOk: return "ok";
    case Kind::kTimeout: return "timed out";
    case Kind::kClosed: return "connection closed by the peer";
    case Kind::kError: return std::strerror(error);
  }
  return "?";
}

IoResult wait_socket(int fd, short events, Clock::time_point until) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, poll_timeout_ms(until));
    if (rc > 0) return {};
    if (rc < 0 && errno != EINTR) return io_error(errno);
    if (rc == 0 && Clock::now() >= until) return {IoResult::Kind::kTimeout, 0};
  }
}

IoResult send_all(int fd, const void* data, size_t n, Clock::time_point until) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      p += sent;
      n -= static_cast<size_t>(sent);
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (IoResult r = wait_socket(fd, POLLOUT, until); !r.ok()) return r;
      continue;
    }
    if (sent < 0 && (errno == EPIPE || errno == ECONNRESET))
      return {IoResult::Kind::kClosed, errno};
    return io_error(errno);
  }
  return {};
}

IoResult recv_exact(int fd, void* data, size_t n, Clock::time_point until) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t got = ::recv(fd, p, n, MSG_DONTWAIT);
    if (got > 0) {
      p += got;
      n -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0) return {IoResult::Kind::kClosed, 0};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (IoResult r = wait_socket(fd, POLLIN, until); !r.ok()) return r;
      continue;
    }
    if (errno == ECONNRESET) return {IoResult::Kind::kClosed, errno};
    return io_error(errno);
  }
  return {};
}

IoResult connect_tcp(const std::string& host, uint16_t port, Clock::time_point until,
                     UniqueFd* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &list) != 0)
    return io_error(EHOSTUNREACH);
  IoResult last = io_error(ECONNREFUSED);
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd) {
      last = io_error(errno);
      continue;
    }
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last = io_error(errno);
        continue;
      }
      last = wait_socket(fd.get(), POLLOUT, until);
      if (!last.ok()) continue;
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last = io_error(err);
        continue;
      }
    }
    int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    *out = std::move(fd);
    ::freeaddrinfo(list);
    return {};
  }
  ::freeaddrinfo(list);
  return last;
}

}  // namespace collie
