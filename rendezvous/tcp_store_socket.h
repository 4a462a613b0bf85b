// StoreSocket: the TcpStore client's blocking TCP socket, where every call
// takes a deadline. Failures come back as an IoResult (a kind and an errno)
// rather than exceptions, so the client can turn them into one message that
// names host:port, the operation and the time spent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/base/deadline.h"

namespace collie {

struct IoResult {
  enum class Kind { kOk, kTimeout, kClosed, kError };
  Kind kind = Kind::kOk;
  int error = 0;  // errno for kError
  bool ok() const { return kind == Kind::kOk; }
  // "timed out", "connection closed by the server", "Connection refused".
  std::string describe() const;
};

// Deadline-bounded I/O on any connected socket, blocking or not: the
// store's, and the data connections' hello and handshake (collectives/).
// kClosed carries the errno of a reset (0 for an orderly close).
IoResult wait_socket(int fd, short events, Clock::time_point until);
IoResult send_all(int fd, const void* data, size_t n, Clock::time_point until);
IoResult recv_exact(int fd, void* data, size_t n, Clock::time_point until);

class StoreSocket {
 public:
  StoreSocket() = default;
  ~StoreSocket() { close(); }
  StoreSocket(StoreSocket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  StoreSocket& operator=(StoreSocket&& other) noexcept;
  StoreSocket(const StoreSocket&) = delete;
  StoreSocket& operator=(const StoreSocket&) = delete;

  // One connection attempt to host:port (each resolved address in turn)
  // that gives up at `until`.
  static IoResult connect(const std::string& host, uint16_t port, Clock::time_point until,
                          StoreSocket* out);

  IoResult send_all(const void* data, size_t n, Clock::time_point until);
  IoResult recv_exact(void* data, size_t n, Clock::time_point until);
  // Until there is something to read (or the peer closed), without reading.
  IoResult wait_readable(Clock::time_point until);

  bool is_open() const { return fd_ >= 0; }
  void close();

 private:
  explicit StoreSocket(int fd) : fd_(fd) {}

  int fd_ = -1;
};

}  // namespace collie
