// One direction of a shared-memory pair: a single-producer/single-consumer
// byte ring. `tail` (bytes ever written) belongs to the producer and `head`
// (bytes ever read) to the consumer; each sits on its own cache line, as do
// the two "waiting" flags, so that the two sides never write the same line.
// Positions grow without wrapping (64 bits); offset = position % capacity.
//
// The other side is another process, so nothing it writes is trusted: a
// tail that claims more than `capacity` unread bytes, or that moves
// backwards, is reported as corruption (EPROTO), never used as a length.
// test/fuzz/shm_ring_fuzz.cc drives a ring with hostile control words (it
// found the empty-buffer memcpy(nullptr) the loops below skip).
//
// A side about to sleep sets its "waiting" flag to how it sleeps: kWaitPoll
// (in poll() on the pair's socket: ring the socket's doorbell) or kWaitFutex
// (on its futex word in the segment: bump the word and FUTEX_WAKE it). The
// other side takes the flag back with an exchange and hands its old value
// to the caller, which wakes the sleeper that way (shm_channel.cc).
#pragma once

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <sys/uio.h>

namespace collie {

inline constexpr uint32_t kWaitPoll = 1;
inline constexpr uint32_t kWaitFutex = 2;

struct ShmRingControl {
  alignas(64) std::atomic<uint64_t> tail{0};
  alignas(64) std::atomic<uint64_t> head{0};
  alignas(64) std::atomic<uint32_t> consumer_waiting{0};
  alignas(64) std::atomic<uint32_t> producer_waiting{0};
};
static_assert(sizeof(ShmRingControl) == 256);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// A view of one ring from one side; `data` holds `capacity` bytes.
class ShmRing {
 public:
  ShmRing() = default;
  ShmRing(ShmRingControl* control, uint8_t* data, size_t capacity)
      : ctl_(control), data_(data), capacity_(capacity) {}

  // Producer: copies what fits of the buffers. Returns the bytes written
  // (0 when full); *wake set to how the consumer asked to be woken (0: it
  // did not).
  size_t write(const iovec* iov, int count, uint32_t* wake) {
    const uint64_t tail = tail_;
    size_t want = 0;
    for (int i = 0; i < count; ++i) want += iov[i].iov_len;
    // The consumer's head is loaded only when the last one seen leaves too
    // little room: its line moves between the cores on every load, which
    // costs a small frame more than its copy. A stale head only
    // underestimates the room.
    size_t room = room_after(tail, seen_head_);
    if (room < want) {
      seen_head_ = ctl_->head.load(std::memory_order_acquire);
      room = room_after(tail, seen_head_);
    }
    size_t done = 0;
    for (int i = 0; i < count && room > 0; ++i) {
      const size_t n = std::min(room, iov[i].iov_len);
      if (n == 0) continue;  // an empty buffer may have no address (memcpy's null is UB)
      copy_in(tail + done, static_cast<const uint8_t*>(iov[i].iov_base), n);
      done += n;
      room -= n;
    }
    if (done == 0) return 0;
    tail_ = tail + done;
    ctl_->tail.store(tail_, std::memory_order_seq_cst);
    *wake = ctl_->consumer_waiting.load(std::memory_order_seq_cst) != 0
                ? ctl_->consumer_waiting.exchange(0)
                : 0;
    return done;
  }

  // Consumer: copies up to `bytes` out (consume: advance past them).
  // Returns the bytes read, or -1 with errno EPROTO when the producer's
  // tail is not believable. *wake set to how the producer asked to be
  // woken (0: it did not).
  ssize_t read(void* out, size_t bytes, bool consume, uint32_t* wake) {
    const ssize_t n = available(bytes);
    if (n <= 0) return n;
    copy_out(head_, static_cast<uint8_t*>(out), static_cast<size_t>(n));
    if (consume) advance(static_cast<size_t>(n), wake);
    return n;
  }

  // Consumer: like read() with consume, but hands the bytes to f(p, n)
  // where they lie in the ring (two pieces when they wrap) instead of
  // copying them out; they are consumed when f returns.
  template <typename F>
  ssize_t read_view(size_t bytes, F&& f, uint32_t* wake) {
    const ssize_t n = available(bytes);
    if (n <= 0) return n;
    const size_t off = head_ % capacity_;
    const size_t first = std::min(static_cast<size_t>(n), capacity_ - off);
    f(static_cast<const uint8_t*>(data_ + off), first);
    if (static_cast<size_t>(n) > first) f(static_cast<const uint8_t*>(data_), n - first);
    advance(static_cast<size_t>(n), wake);
    return n;
  }

  // Consumer: asks to be woken (how: kWaitPoll or kWaitFutex) when bytes
  // arrive; true if some already have (then there is no need to sleep).
  bool arm_read(uint32_t how = kWaitPoll) {
    ctl_->consumer_waiting.store(how, std::memory_order_seq_cst);
    return readable();
  }
  // Producer: asks to be woken when room appears; true if there is some.
  bool arm_write(uint32_t how = kWaitPoll) {
    ctl_->producer_waiting.store(how, std::memory_order_seq_cst);
    return writable();
  }
  void disarm_read() { ctl_->consumer_waiting.store(0, std::memory_order_relaxed); }
  void disarm_write() { ctl_->producer_waiting.store(0, std::memory_order_relaxed); }
  bool readable() const { return ctl_->tail.load(std::memory_order_seq_cst) != head_; }
  bool writable() const { return tail_ - ctl_->head.load(std::memory_order_seq_cst) < capacity_; }

 private:
  // Consumer: how many of `bytes` can be read now, or -1 (EPROTO) when the
  // producer's tail is not believable.
  ssize_t available(size_t bytes) const {
    const size_t off = head_ % capacity_;
    __builtin_prefetch(data_ + off);
    __builtin_prefetch(data_ + (off + 64 < capacity_ ? off + 64 : 0));
    const uint64_t avail = ctl_->tail.load(std::memory_order_acquire) - head_;
    if (avail > capacity_) {
      errno = EPROTO;
      return -1;
    }
    return static_cast<ssize_t>(std::min<uint64_t>(avail, bytes));
  }
  // Consumer: past n bytes; *wake set to how the producer asked to be
  // woken (0: it did not).
  void advance(size_t n, uint32_t* wake) {
    head_ += n;
    ctl_->head.store(head_, std::memory_order_seq_cst);
    *wake = ctl_->producer_waiting.load(std::memory_order_seq_cst) != 0
                ? ctl_->producer_waiting.exchange(0)
                : 0;
  }
  size_t room_after(uint64_t tail, uint64_t head) const {
    const uint64_t used = tail - head;
    return used > capacity_ ? 0 : capacity_ - used;
  }
  void copy_in(uint64_t pos, const uint8_t* src, size_t n) {
    const size_t off = pos % capacity_;
    const size_t first = std::min(n, capacity_ - off);
    std::memcpy(data_ + off, src, first);
    std::memcpy(data_, src + first, n - first);
  }
  void copy_out(uint64_t pos, uint8_t* dst, size_t n) const {
    const size_t off = pos % capacity_;
    const size_t first = std::min(n, capacity_ - off);
    std::memcpy(dst, data_ + off, first);
    std::memcpy(dst + first, data_, n - first);
  }

  ShmRingControl* ctl_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
  // Each side's own position, kept here too so that it never loads the
  // shared line for it (only this side writes it): the producer's tail,
  // the consumer's head. Rings start empty, at 0.
  uint64_t tail_ = 0;
  uint64_t head_ = 0;
  uint64_t seen_head_ = 0;  // producer: the consumer's head as last loaded
};

}  // namespace collie
