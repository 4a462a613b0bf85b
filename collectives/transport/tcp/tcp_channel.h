// The TCP channel: a Channel over a connected stream socket held as Asio's
// socket type (asio::ip::tcp::socket between hosts; the shared-memory pair's
// Unix socket, asio::local::stream_protocol::socket, when a pair falls
// back). The socket is in Asio's non-blocking mode: read() and write() are
// read_some()/write_some() that answer would_block instead of waiting, and
// the transport's progress loop spins and then poll()s on native_handle().
// No reactor sits in the hot path: the io_context below is never run, it
// only owns the sockets (data_io_context(), sockets.h). This is the
// folder's one public header, for the channel factories (tcp_factory.cc,
// and shm/'s fallback to the pair's socket), tests and benchmarks; the
// factory itself is declared in channel_factory.h.
#pragma once

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <memory>
#include <string>

#include "collie/base/unique_fd.h"
#include "collie/collectives/transport/channel.h"
#include "collie/collectives/transport/sockets.h"

namespace collie {

// `socket` is connected; the channel puts it in Asio's non-blocking mode
// (NetworkError naming `who`, the peer's rank and address, if that fails).
std::unique_ptr<Channel> make_tcp_channel(asio::ip::tcp::socket socket, const std::string& who);
// The same channel over a connected Unix stream socket (the shared-memory
// pair's, when shared memory does not work; a socketpair in the fuzzer).
std::unique_ptr<Channel> make_local_channel(UniqueFd fd, const std::string& who);

}  // namespace collie
