// ReplyQueue: the bytes a TcpStore server connection has yet to send. It
// holds two kinds of chunk: small encoded fields it owns (lengths, counters,
// CHECK and WAIT answers, small values), and stored values it shares with
// the store. A GET of a 64 MiB value queues an 8-byte length and a reference,
// never a copy, so a client that asks for gigabytes of replies and never
// reads them costs the server a few bytes per reply, and the connection's
// back-pressure (tcp_store_connection.h) bounds how many it may queue.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>

#include "rendezvous/store.h"

namespace collie {

// A stored value, shared between the store and the replies that carry it.
using SharedValue = std::shared_ptr<const Bytes>;

class ReplyQueue {
 public:
  // Values up to this size are copied into the owned bytes: for them a
  // reference would cost more than the copy.
  static constexpr size_t kInlineValueBytes = 64;

  // The owned buffer at the end of the queue, for a Writer to append
  // encoded fields to.
  Bytes& fields();
  void append(std::span<const uint8_t> bytes);
  // A value as TCPStore encodes it: a u64 length, then the bytes (shared
  // unless small).
  void value(SharedValue v);
  // Bytes encoded once and shared by several replies (LIST_KEYS's list),
  // sent as they are (shared unless small).
  void encoded(SharedValue bytes);
  // Moves every chunk of `other` to the end of this queue.
  void splice(ReplyQueue&& other);

  // Bytes not yet sent.
  size_t size() const;
  bool empty() const { return size() == 0; }
  // Fills `out` with the unsent bytes at the front, one span per chunk (at
  // most out.size() of them); returns how many spans it filled.
  size_t front(std::span<std::span<const uint8_t>> out) const;
  // Drops the first n unsent bytes (they were written).
  void consume(size_t n);
  void clear();

 private:
  struct Chunk {
    Bytes owned;
    SharedValue shared;  // when set, the chunk is this value
    size_t sent = 0;     // bytes of the chunk already written
    size_t size() const { return shared ? shared->size() : owned.size(); }
    const uint8_t* data() const { return shared ? shared->data() : owned.data(); }
  };
  // Starts a new chunk, first counting the last one's unsent bytes in
  // sealed_ (only the last chunk can still grow).
  Chunk& push();

  std::deque<Chunk> chunks_;
  size_t sealed_ = 0;  // unsent bytes of every chunk but the last
};

}  // namespace collie
