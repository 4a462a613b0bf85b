// Futex waits on words in shared memory, for the shared-memory channel's
// sleeping side (shm_channel.cc) and the transport's one wait over several
// channels (poll_connections in waiting.cc). The words live in a segment
// two processes map, so these are shared futexes (no FUTEX_PRIVATE_FLAG):
// the kernel keys them by the page, not the address space.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

namespace collie {

// One word to wait on and the value it had when the waiter decided to sleep:
// the wait returns at once if the word no longer holds it.
struct FutexWaiter {
  const std::atomic<uint32_t>* word;
  uint32_t value;
};

// At most this many words in one futex_wait_any() (the kernel's
// FUTEX_WAITV_MAX).
inline constexpr size_t kMaxFutexWaiters = 128;

// Whether this kernel has futex_waitv (Linux 5.16+); one probe per process.
// One word is waited on with FUTEX_WAIT, which every kernel has.
bool futex_waitv_available();

// Sleeps until one of the words changes (or is woken), or timeout_ms passes.
// Returns 0 when woken, or -1 with errno: ETIMEDOUT, EAGAIN (a word had
// already changed), EINTR.
int futex_wait_any(std::span<const FutexWaiter> waiters, int timeout_ms);

// Wakes every process sleeping on `word`.
void futex_wake_all(std::atomic<uint32_t>* word);

}  // namespace collie
