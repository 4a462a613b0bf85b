// The shared-memory channel: two single-producer/single-consumer byte rings
// in one memfd segment per pair of ranks on a host, plus the pair's Unix
// socket, which carried the segment's fd (SCM_RIGHTS) and stays open as the
// liveness signal (the kernel closes it when a process dies, SIGKILL too)
// and as the doorbell a sleeping reader is woken by. The folder's one public
// header, for its factory (local_factory.cc), tests and benchmarks; the
// factory itself is declared in channel_factory.h. The design, and why a doorbell rather than a
// futex, is in docs/algorithms.md ("Channels").
#pragma once

#include <memory>
#include <string>

#include "collie/base/deadline.h"
#include "collie/base/unique_fd.h"
#include "collie/collectives/transport/channel.h"

namespace collie {

// Default bytes of each of a pair's two rings (COLLIE_SHM_BYTES overrides).
inline constexpr size_t kDefaultShmRingBytes = size_t{1} << 20;

// The segment bytes a pair with rings of `ring_bytes` maps.
size_t shm_segment_bytes(size_t ring_bytes);

// The two halves of a pair's set-up on its connected Unix socket (after the
// hello). The connector creates the segment and sends it (or, when the
// segment would not fit under its memory cgroup's limit or the machine's
// available memory, memory_headroom.h, sends none and says so); the
// acceptor maps it and proves it by writing the connector's nonce back into
// it; both probe cross-memory attach. Each returns the channel (which takes the
// socket), or null with *why set when shared memory does not work for this
// pair: the caller then keeps the socket as a socket channel and logs why.
// Throws only on a failure of the socket itself (the peer died).
std::unique_ptr<Channel> shm_connect(UniqueFd& socket, size_t ring_bytes, const Deadline& deadline,
                                     const std::string& who, std::string* why);
std::unique_ptr<Channel> shm_accept(UniqueFd& socket, const Deadline& deadline,
                                    const std::string& who, std::string* why);

}  // namespace collie
