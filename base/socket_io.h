// Deadline-bounded I/O on a connected socket, blocking or not: the store
// client's, and the data connections' hello and handshake. Failures come back
// as an IoResult (a kind and an errno) rather than exceptions, so each caller
// can turn them into one message that names its peer, the operation and the
// time spent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collie/base/deadline.h"
#include "collie/base/unique_fd.h"

namespace collie {

struct IoResult {
  enum class Kind { kOk, kTimeout, kClosed, kError };
  Kind kind = Kind::kOk;
  int error = 0;  // errno for kError; for kClosed the errno of a reset (0: orderly close)
  bool ok() const { return kind == Kind::kOk; }
  // "timed out", "connection closed by the peer", "Connection refused".
  std::string describe() const;
};

// Waits until `fd` is ready for `events` (POLLIN/POLLOUT) or `until`.
IoResult wait_socket(int fd, short events, Clock::time_point until);
IoResult send_all(int fd, const void* data, size_t n, Clock::time_point until);
IoResult recv_exact(int fd, void* data, size_t n, Clock::time_point until);

// One TCP connection attempt to host:port (a name or an IPv4/IPv6 literal;
// each resolved address in turn) that gives up at `until`. The socket is
// non-blocking, close-on-exec, with TCP_NODELAY. A name that does not resolve
// is reported as EHOSTUNREACH: worth retrying, as DNS may lag a new node.
IoResult connect_tcp(const std::string& host, uint16_t port, Clock::time_point until,
                     UniqueFd* out);

}  // namespace collie
