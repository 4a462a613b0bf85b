// ReplyQueue: the bytes a TcpStore server connection has yet to send. It
// holds two kinds of chunk: small encoded fields it owns (lengths, counters,
// CHECK and WAIT answers, small values), and stored values it shares with
// the store. A GET of a 64 MiB value queues an 8-byte length and a reference
// (to the value's first 64 MiB: an APPEND may grow it in place behind the
// reply), never a copy, so a client that asks for gigabytes of replies and
// never reads them costs the server a few bytes per reply, and the
// connection's back-pressure (tcp_store_connection.h) bounds how many it may
// queue.
//
// ReplyLedger: what the server's unsent replies hold that the store does not
// (docs/security.md): buffers the store has let go of while a reply still
// refers to them (a value overwritten or deleted, a key list outdated by a
// new key, a popped queue element), and the replies' own encoded bytes. A
// buffer the store still holds costs nothing extra however many replies
// carry it, so a job's ranks reading one big value together are not
// charged for it; a client that never reads while others change the store
// is. The server drops the worst holders when the total passes its budget
// (TcpStoreServerOptions::max_reply_bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>

#include "collie/rendezvous/store.h"

namespace collie {

// A stored value, shared between the store and the replies that carry it.
using SharedValue = std::shared_ptr<const Bytes>;

class ReplyLedger {
 public:
  // The store lets go of `buffer`: when replies still refer to it, it is
  // theirs alone from now on, and counted until the last of them lets go.
  void retire(SharedValue buffer);
  // A tracked queue dropped its reference to `buffer` (sent or discarded).
  void released(const Bytes* buffer);
  // The bytes of `buffer` when it is retired, else 0.
  size_t retired_size(const Bytes* buffer) const;
  // A connection's own encoded reply bytes grew or shrank.
  void add_owned(size_t n) { owned_bytes_ += n; }
  void remove_owned(size_t n) { owned_bytes_ -= std::min(n, owned_bytes_); }
  // Forgets retired buffers nobody holds any more (a safety net: released()
  // normally does it as it happens).
  void sweep();

  size_t retired_bytes() const { return retired_bytes_; }
  size_t owned_bytes() const { return owned_bytes_; }
  size_t total() const { return retired_bytes_ + owned_bytes_; }
  size_t retired_count() const { return retired_.size(); }

 private:
  struct Entry {
    std::weak_ptr<const Bytes> buffer;
    size_t bytes = 0;
  };
  std::unordered_map<const Bytes*, Entry> retired_;
  size_t retired_bytes_ = 0;
  size_t owned_bytes_ = 0;
};

class ReplyQueue {
 public:
  ReplyQueue() = default;
  ReplyQueue(ReplyQueue&& other) noexcept { *this = std::move(other); }
  ReplyQueue& operator=(ReplyQueue&& other) noexcept;
  ~ReplyQueue() { clear(); }

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

  // Tells `ledger` whenever this queue lets go of a shared buffer
  // (a connection's queue; the ledger outlives it).
  void track(ReplyLedger* ledger) { ledger_ = ledger; }

  // Bytes not yet sent.
  size_t size() const;
  // Unsent bytes of the queue's own chunks (not shared with anyone).
  size_t owned_size() const { return size() - shared_unsent_; }
  // What this queue alone keeps alive: its own unsent bytes, plus the whole
  // of every retired buffer it refers to (each counted once).
  size_t held(const ReplyLedger& ledger) const;
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
    SharedValue shared;  // when set, the chunk is this value's first `length` bytes
    size_t length = 0;   // fixed when queued: the buffer may grow behind it (APPEND)
    size_t sent = 0;     // bytes of the chunk already written
    size_t size() const { return shared ? length : owned.size(); }
    const uint8_t* data() const { return shared ? shared->data() : owned.data(); }
  };
  // Starts a new chunk, first counting the last one's unsent bytes in
  // sealed_ (only the last chunk can still grow).
  Chunk& push();
  // Queues the first `length` bytes of `buffer`.
  void push_shared(SharedValue buffer, size_t length);
  // Lets go of the front chunk, telling the ledger.
  void pop_front();

  std::deque<Chunk> chunks_;
  size_t sealed_ = 0;         // unsent bytes of every chunk but the last
  size_t shared_unsent_ = 0;  // unsent bytes of the shared chunks
  ReplyLedger* ledger_ = nullptr;
};

}  // namespace collie
