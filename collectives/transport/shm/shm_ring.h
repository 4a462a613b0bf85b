// One direction of a shared-memory pair: a single-producer/single-consumer
// byte stream in a ring of records. Positions grow without wrapping (64
// bits); offset = position % capacity. Every record starts on a cache line
// with an 8-byte header word, (tag << 32) | length, holds `length` (> 0)
// bytes of the stream after it and is padded to whole lines, so a frame of
// up to 56 bytes is one line and no record wraps past the ring's end. The
// tag is the low 32 bits of position / 64 + 1, so it differs between laps.
//
// The header word is the only signal: the producer copies the bytes in,
// zeroes the word where the *next* record will start, and then publishes
// the record by storing its header (release). The consumer polls the word
// at its position and reads the bytes next to it, one cache line for a
// small frame where a separate tail word would move a second line between
// the cores first (vader's "fast box" works this way). Because every
// record zeroes the next header before it is published, the word at the
// consumer's position is always either 0 or a published header, never a
// stale byte of an earlier lap. `head` (where the consumer has read up to)
// stays a control word on its own cache line; the producer keeps the last
// value it loaded and loads the consumer's line again only when that leaves
// too little room. The "waiting" flags sit on their own lines too.
//
// The other side is another process, so nothing it writes is trusted: a
// header with the right tag but a length of 0 or one that runs past the
// ring's end is reported as corruption (EPROTO), never used to index; a head
// that claims the consumer read past the producer leaves no room. test/fuzz/
// shm_ring_fuzz.cc drives a ring with hostile stores to the records and to
// head (it found the empty-buffer memcpy(nullptr) the copies below skip).
//
// A side about to sleep sets its "waiting" flag to how it sleeps: kWaitPoll
// (in poll() on the pair's socket: ring the socket's doorbell) or kWaitFutex
// (on its futex word in the segment: bump the word and FUTEX_WAKE it). The
// other side takes the flag back with an exchange and hands its old value
// to the caller, which wakes the sleeper that way (shm_channel.cc).
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace collie {

inline constexpr uint32_t kWaitPoll = 1;
inline constexpr uint32_t kWaitFutex = 2;

// The unit of the ring: records start on a line, and the control words
// each have one of their own.
inline constexpr size_t kShmLineBytes = 64;
// A record's header word, in front of its bytes.
inline constexpr size_t kShmHeaderBytes = 8;

struct ShmRingControl {
  alignas(kShmLineBytes) std::atomic<uint64_t> head{0};
  alignas(kShmLineBytes) std::atomic<uint32_t> consumer_waiting{0};
  alignas(kShmLineBytes) std::atomic<uint32_t> producer_waiting{0};
};
static_assert(sizeof(ShmRingControl) == 3 * kShmLineBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free);

// A ring's data must hold at least this many bytes, in whole lines: the
// smallest record and the line of the next header.
inline constexpr size_t kShmRingMinBytes = 2 * kShmLineBytes;

// A view of one ring from one side; `data` holds `capacity` bytes, 64-byte
// aligned (capacity: a multiple of 64, at least kShmRingMinBytes).
class ShmRing {
 public:
  ShmRing() = default;
  ShmRing(ShmRingControl* control, uint8_t* data, size_t capacity)
      : ctl_(control), data_(data), capacity_(capacity & ~(kShmLineBytes - 1)) {}

  // Producer: copies what fits of the buffers, in order. Returns the bytes
  // of the stream written (0 when there is no room); *wake set to how the
  // consumer asked to be woken (0: it did not).
  size_t write(const iovec* iov, int count, uint32_t* wake) {
    size_t want = 0;
    for (int i = 0; i < count; ++i) want += iov[i].iov_len;
    size_t done = 0;
    int buf = 0;      // the buffer the next byte comes from,
    size_t used = 0;  // and how much of it is already in
    bool reloaded = false;
    while (done < want) {
      size_t room = room_after(tail_, seen_head_);
      // A record of the rest and the line of the next header must fit:
      // load the consumer's head again when they do not.
      if (!reloaded && room < record_bytes(want - done) + kShmLineBytes) {
        seen_head_ = ctl_->head.load(std::memory_order_acquire);
        room = room_after(tail_, seen_head_);
        reloaded = true;
      }
      if (room < kShmRingMinBytes) break;
      const size_t to_end = capacity_ - tail_ % capacity_;  // whole lines
      // Its bytes: what is left, up to the ring's end and up to the room
      // that leaves one line for the next header.
      const size_t n = std::min({want - done, to_end - kShmHeaderBytes,
                                 room - kShmLineBytes - kShmHeaderBytes, kMaxRecord});
      uint8_t* dst = data_ + tail_ % capacity_ + kShmHeaderBytes;
      for (size_t copied = 0; copied < n;) {
        const size_t piece = std::min(n - copied, iov[buf].iov_len - used);
        // An empty buffer may have no address (memcpy's null is UB).
        if (piece > 0)
          std::memcpy(dst + copied, static_cast<const uint8_t*>(iov[buf].iov_base) + used, piece);
        copied += piece;
        used += piece;
        if (used == iov[buf].iov_len) ++buf, used = 0;
      }
      const uint64_t end = tail_ + record_bytes(n);
      publish(tail_, n, end);
      tail_ = end;
      done += n;
    }
    if (done == 0) return 0;
    // Dekker order with arm_read(): the header before the flag.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    *wake = ctl_->consumer_waiting.load(std::memory_order_relaxed) != 0
                ? ctl_->consumer_waiting.exchange(0)
                : 0;
    return done;
  }

  // Consumer: copies up to `bytes` out (consume: advance past them).
  // Returns the bytes read, or -1 with errno EPROTO when a header is not
  // believable. *wake set to how the producer asked to be woken (0: it
  // did not).
  ssize_t read(void* out, size_t bytes, bool consume, uint32_t* wake) {
    auto* dst = static_cast<uint8_t*>(out);
    return walk(bytes, consume, wake, [&](const uint8_t* p, size_t n) {
      std::memcpy(dst, p, n);
      dst += n;
    });
  }

  // Consumer: like read() with consume, but hands the bytes to f(p, n)
  // where they lie in the ring (one piece per record) instead of copying
  // them out; they are consumed when the call returns.
  template <typename F>
  ssize_t read_view(size_t bytes, F&& f, uint32_t* wake) {
    return walk(bytes, true, wake, f);
  }

  // Consumer: when the next `bytes` of the stream are all there in one
  // record, hands their address to accept(p), which looks at them (and
  // copies what it wants) before anything is consumed, and consumes them
  // if it returns true. Returns `bytes` (taken), 0 (not all there in one
  // record: nothing yet, a frame still arriving, or one split at the
  // ring's end), -2 (accept refused them; nothing consumed), or -1 with
  // errno EPROTO (a header not believable). The express exchange takes a
  // frame this way: its header compared and its payload copied where they
  // lie, once (Transport::exchange).
  template <typename F>
  ssize_t take_whole(size_t bytes, F&& accept, uint32_t* wake) {
    Cursor c = cur_;
    if (c.left == 0) {
      const int r = open(c);
      if (r <= 0) return r;
    }
    if (bytes == 0 || c.left < bytes) return 0;
    if (!accept(static_cast<const uint8_t*>(data_ + c.data % capacity_))) return -2;
    c.data += bytes;
    c.left -= bytes;
    consumed(c, wake);
    return static_cast<ssize_t>(bytes);
  }

  // Consumer: asks to be woken (how: kWaitPoll or kWaitFutex) when bytes
  // arrive; true if some already have (then there is no need to sleep).
  bool arm_read(uint32_t how = kWaitPoll) {
    ctl_->consumer_waiting.store(how, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return readable();
  }
  // Producer: asks to be woken when room appears; true if there is some.
  bool arm_write(uint32_t how = kWaitPoll) {
    ctl_->producer_waiting.store(how, std::memory_order_seq_cst);
    return writable();
  }
  void disarm_read() { ctl_->consumer_waiting.store(0, std::memory_order_relaxed); }
  // Producer: how the consumer asked to be woken (0: it did not), taking
  // the request, after a change the consumer waits for outside the ring
  // (Dekker order with arm_read(): the change, a fence, then the flag).
  uint32_t take_consumer_waiting() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return ctl_->consumer_waiting.load(std::memory_order_relaxed) != 0
               ? ctl_->consumer_waiting.exchange(0)
               : 0;
  }
  void disarm_write() { ctl_->producer_waiting.store(0, std::memory_order_relaxed); }
  // Consumer: a read would return bytes (or fail with EPROTO).
  bool readable() const {
    if (cur_.left > 0) return true;
    Cursor c = cur_;
    return open(c) != 0;
  }
  // Producer: a write would take at least one byte.
  bool writable() const {
    return room_after(tail_, ctl_->head.load(std::memory_order_seq_cst)) >= kShmRingMinBytes;
  }

 private:
  // One record's bytes at most: the header's length field has 32 bits.
  static constexpr size_t kMaxRecord = size_t{1} << 30;

  // Where the consumer is: the next unread byte of the stream and how many
  // of the current record's bytes are left from there; `next`: where the
  // next record's header is.
  struct Cursor {
    uint64_t data;
    uint64_t left;
    uint64_t next;
  };

  // A record of n bytes with its header, in whole cache lines: a small
  // frame never straddles two.
  static size_t record_bytes(size_t n) {
    return (kShmHeaderBytes + n + kShmLineBytes - 1) & ~(kShmLineBytes - 1);
  }
  static uint64_t tag(uint64_t pos) { return static_cast<uint32_t>(pos / kShmLineBytes + 1); }
  std::atomic_ref<uint64_t> word(uint64_t pos) const {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(data_ + pos % capacity_));
  }

  // Producer: the record at `pos` with `n` bytes is in; zero the header
  // where the next one will start, then publish this one's.
  void publish(uint64_t pos, size_t n, uint64_t end) {
    word(end).store(0, std::memory_order_relaxed);
    word(pos).store(tag(pos) << 32 | n, std::memory_order_release);
  }

  // Consumer: steps c onto the next record. 1: c has bytes left; 0:
  // nothing has been published yet; -1: a corrupt header (EPROTO).
  int open(Cursor& c) const {
    const uint64_t w = word(c.next).load(std::memory_order_acquire);
    if (w >> 32 != tag(c.next)) return 0;
    const uint64_t n = w & 0xffffffffu;
    if (n == 0 || n > capacity_ - c.next % capacity_ - kShmHeaderBytes) {
      errno = EPROTO;
      return -1;
    }
    c.data = c.next + kShmHeaderBytes;
    c.left = n;
    c.next += record_bytes(n);
    return 1;
  }

  // Consumer: hands up to `bytes` to f, record by record; with consume,
  // moves past them and publishes the new head.
  template <typename F>
  ssize_t walk(size_t bytes, bool consume, uint32_t* wake, F&& f) {
    Cursor c = cur_;
    size_t done = 0;
    while (done < bytes) {
      if (c.left == 0) {
        const int r = open(c);
        if (r < 0) return -1;
        if (r == 0) break;
      }
      const size_t n = std::min<uint64_t>(bytes - done, c.left);
      f(static_cast<const uint8_t*>(data_ + c.data % capacity_), n);
      c.data += n;
      c.left -= n;
      done += n;
    }
    if (!consume || done == 0) return static_cast<ssize_t>(done);
    consumed(c, wake);
    return static_cast<ssize_t>(done);
  }

  // Consumer: moves to `c` (past what was read) and publishes the new head.
  void consumed(const Cursor& c, uint32_t* wake) {
    cur_ = c;
    // The producer may reuse every line before the first unread byte.
    ctl_->head.store(c.left > 0 ? c.data & ~uint64_t{kShmLineBytes - 1} : c.next,
                     std::memory_order_seq_cst);
    *wake = ctl_->producer_waiting.load(std::memory_order_seq_cst) != 0
                ? ctl_->producer_waiting.exchange(0)
                : 0;
  }

  size_t room_after(uint64_t tail, uint64_t head) const {
    const uint64_t used = tail - head;
    return used > capacity_ ? 0 : capacity_ - used;
  }

  ShmRingControl* ctl_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
  // Each side's own state, kept here so that it never loads a shared line
  // for it. Producer: where its next record starts, and the consumer's
  // head as last loaded. Consumer: its cursor. Rings start empty, at 0.
  uint64_t tail_ = 0;
  uint64_t seen_head_ = 0;
  Cursor cur_{};
};

}  // namespace collie
