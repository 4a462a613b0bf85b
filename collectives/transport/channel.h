// Channel: the byte stream under one Connection, whatever carries it. A
// Connection owns the frame format (wire.h) and writes and reads frames
// through its Channel without knowing whether the bytes cross a TCP socket
// (collectives/transport/tcp/) or a pair of rings in shared memory (collectives/transport/shm/).
// So every frame kind, data, abort, goodbye, probe or any later one, travels
// over every channel unchanged, and so do the failure protocols built on
// them (transport_failure.cc).
//
// The calls follow the non-blocking socket calls' conventions: they never
// block, return the bytes moved, or -1 with errno set (EAGAIN: nothing can
// move now). read() returns 0 once the peer is gone and every byte it sent
// before has been read: bytes written before a crash are still delivered,
// as a socket delivers them before its EOF.
//
// Waiting is poll()-based so that one poll() covers every channel of a
// transport: arm() says which events on fd() wake this channel for the
// wanted direction (a shared-memory channel sets its "waiting" flag in the
// segment, so that the peer rings a doorbell on that fd); disarm() turns
// what poll() returned into stream readiness (POLLIN: read() will not say
// EAGAIN; POLLOUT: write() will take bytes; POLLRDHUP/POLLHUP: the peer is
// gone). A hang-up is always watched: it is how a dead peer is noticed.
//
// What only a channel in shared memory can do (the express take, a futex to
// sleep on, the peer's memory to read with CMA) is not on this interface:
// such a channel hands out a SharedMemoryAbilities, which callers ask for
// once (shared_memory()). When every channel a wait covers has one, the
// wait arms them with arm_futex() and sleeps in futex_waitv on their words
// (bounded slices), then polls the fds once without sleeping for hang-ups
// (waiting.cc). Every channel keeps the contract that
// test/collectives/transport/channel_contract_test.cc checks.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>

namespace collie {

enum class ChannelKind { kTcp, kShm };
std::string_view to_string(ChannelKind kind);

class SharedMemoryAbilities {
 public:
  // The express receive (Connection::take_now): takes the next
  // header_bytes + payload_bytes of the stream if all of them are there
  // and they start with `header`, the payload copied to `payload`. 1: taken;
  // 0: not all there yet; -1: something else is next (nothing consumed:
  // read() and its checks take over).
  virtual int take_frame(const void* header, size_t header_bytes, void* payload,
                         size_t payload_bytes) = 0;
  // The word the peer bumps and FUTEX_WAKEs when this side armed with
  // arm_futex().
  virtual std::atomic<uint32_t>* futex_word() = 0;
  // Like Channel::arm(), but asks the peer to wake futex_word() instead of
  // ringing fd(); *value: the word's value before arming (what to
  // futex-wait on).
  virtual void arm_futex(bool want_read, bool want_write, bool* ready, uint32_t* value) = 0;
  // > 0: the peer's pid, when its memory may be read with process_vm_readv
  // (the pair's probe at connect showed that cross-memory attach is
  // allowed); 0 otherwise.
  virtual pid_t peer_pid() const = 0;
  // Wakes the peer if it sleeps armed for reads on this channel (as a write
  // would, by its futex word or its fd's doorbell) without writing to the
  // stream: after changing memory of its that it waits on (a single-copy
  // send's done word, process_vm_writev).
  virtual void wake_peer() = 0;

 protected:
  ~SharedMemoryAbilities() = default;
};

class Channel {
 public:
  virtual ~Channel() = default;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  virtual ChannelKind kind() const = 0;
  // Writes what fits of the `count` buffers, in order.
  virtual ssize_t write(const iovec* iov, int count) = 0;
  virtual ssize_t read(void* data, size_t bytes) = 0;
  // Like read() without consuming (MSG_PEEK).
  virtual ssize_t peek(void* data, size_t bytes) = 0;
  // Like read(), but hands what arrived to sink(p, n), in order, possibly
  // in several pieces, instead of copying it into a buffer of the
  // caller's: a shared-memory ring passes its own memory (no copy), a
  // socket a bounce buffer. Returns what read() would.
  using ReadSink = std::function<void(const uint8_t*, size_t)>;
  virtual ssize_t read_to(size_t bytes, const ReadSink& sink);

  virtual int fd() const = 0;
  // The poll() events to wait for on fd(); *ready set when the channel can
  // already do what is wanted (the caller must not sleep).
  virtual short arm(bool want_read, bool want_write, bool* ready) = 0;
  virtual short disarm(short revents) = 0;

  // The shared-memory abilities of this channel; null for a socket.
  virtual SharedMemoryAbilities* shared_memory() { return nullptr; }

  // The peer reads EOF after the bytes already written.
  virtual void shutdown_write() = 0;
  // Thread-safe: wakes a poll() on fd() in another thread for good.
  virtual void shutdown_both() = 0;

 protected:
  Channel() = default;
};

}  // namespace collie
