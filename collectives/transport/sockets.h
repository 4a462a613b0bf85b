// The data plane's sockets: addresses as text, descriptors opened
// close-on-exec and non-blocking, and connects and listens bounded by a
// deadline, over TCP (Asio) and abstract Unix sockets. Used by the linker
// (linker.h), the join (join.h) and the channel factories; the channels
// themselves live in tcp/ and shm/, and only the factories name them.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <cstdint>
#include <string>
#include <string_view>

#include "collie/base/deadline.h"
#include "collie/base/unique_fd.h"

namespace collie {

// The io_context every data socket of the process belongs to (Asio's socket
// types need one). Nothing ever runs it: each wait in the data plane is a
// poll() with a deadline. It is never destroyed, so a socket may outlive
// static destruction order.
asio::io_context& data_io_context();

// "host:port", with brackets around an IPv6 host ("[::1]:29500").
std::string join_address(const std::string& host, uint16_t port);
// The numeric host of an AF_INET or AF_INET6 address.
std::string numeric_host(const sockaddr* sa);
// join_address of an AF_INET or AF_INET6 address and its port.
std::string tcp_address(const sockaddr* sa);

// "socket(): Too many open files (RLIMIT_NOFILE is 64; ...)": why `call`,
// which creates a descriptor, failed with `err` on a rank of a `size`-rank
// world. Running out of descriptors is the usual cause at scale, so that case
// names the limit and what a rank needs.
std::string describe_fd_failure(std::string_view call, int err, int size);

// Writes all of data[0, n) to the connection to `who` (a hello) within the
// deadline; TimeoutError or NetworkError naming `who`.
void write_all(int fd, const void* data, size_t n, const Deadline& deadline,
               const std::string& who);

// TCP_NODELAY; only costs latency if it fails.
void set_no_delay(asio::ip::tcp::socket& socket);

// Connects to rank `peer` at `address` ("host:port", a name or an IPv4/IPv6
// literal, each resolved address in turn), retrying refusals and names that
// do not resolve yet (DNS may lag a new node) until the deadline. `rank` and
// `size` are this rank's, for the errors.
asio::ip::tcp::socket connect_tcp_to(const std::string& address, int rank, int size, int peer,
                                     int buffer_bytes, const Deadline& deadline);

// Listens on `host` (a name or a literal: its first address) at a port the
// kernel picks, and sets *address to "host:port" as bound. The acceptor's
// socket stays non-blocking: PeerGate accepts on its native handle when
// poll() says a peer is waiting.
asio::ip::tcp::acceptor listen_tcp(const std::string& host, int rank, int size, int buffer_bytes,
                                   std::string* address);

// Connects to a peer's abstract Unix socket `name` (no file anywhere: the
// name lives in the network namespace and dies with the listener). An empty
// fd and *err_out on failure.
UniqueFd connect_unix_to(const std::string& name, const Deadline& deadline, int* err_out);

// Listens on the abstract Unix socket `name`; an empty fd (and a WARN: the
// peers on this host then use TCP) when it cannot.
UniqueFd listen_unix(const std::string& name);

}  // namespace collie
