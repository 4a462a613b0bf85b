// StoreSocket: the TcpStore client's blocking TCP socket, where every call
// takes a deadline. Failures come back as an IoResult (base/socket_io.h)
// so that the client can turn them into one message that names host:port, the
// operation and the time spent.
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "collie/base/deadline.h"
#include "collie/base/socket_io.h"
#include "collie/base/unique_fd.h"

namespace collie {

class StoreSocket {
 public:
  StoreSocket() = default;

  // One connection attempt to host:port that gives up at `until`.
  static IoResult connect(const std::string& host, uint16_t port, Clock::time_point until,
                          StoreSocket* out) {
    return connect_tcp(host, port, until, &out->fd_);
  }

  IoResult send_all(const void* data, size_t n, Clock::time_point until) {
    return collie::send_all(fd_.get(), data, n, until);
  }
  IoResult recv_exact(void* data, size_t n, Clock::time_point until) {
    return collie::recv_exact(fd_.get(), data, n, until);
  }
  // Until there is something to read (or the peer closed), without reading.
  IoResult wait_readable(Clock::time_point until) { return wait_socket(fd_.get(), POLLIN, until); }

  bool is_open() const { return fd_.valid(); }
  void close() { fd_.reset(); }

 private:
  UniqueFd fd_;
};

}  // namespace collie
