#include "collie/collectives/transport/shm/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

namespace collie {
namespace {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
static_assert(std::atomic<uint32_t>::is_always_lock_free);

long futex(const std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), op, value, timeout, nullptr,
                   0);
}

}  // namespace

bool futex_waitv_available() {
  // No waiters is EINVAL on a kernel that has the call, ENOSYS on one that
  // does not (seccomp profiles may also answer EPERM).
  static const bool available = [] {
    const long r = ::syscall(SYS_futex_waitv, nullptr, 0, 0, nullptr, CLOCK_MONOTONIC);
    return r < 0 && errno == EINVAL;
  }();
  return available;
}

int futex_wait_any(std::span<const FutexWaiter> waiters, int timeout_ms) {
  if (waiters.empty() || waiters.size() > kMaxFutexWaiters) {
    errno = EINVAL;
    return -1;
  }
  if (waiters.size() == 1) {
    const timespec rel{timeout_ms / 1000, (timeout_ms % 1000) * 1'000'000L};
    return futex(waiters[0].word, FUTEX_WAIT, waiters[0].value, &rel) == 0 ? 0 : -1;
  }
  futex_waitv v[kMaxFutexWaiters] = {};
  for (size_t i = 0; i < waiters.size(); ++i) {
    v[i].val = waiters[i].value;
    v[i].uaddr = reinterpret_cast<uintptr_t>(waiters[i].word);
    v[i].flags = FUTEX_32;  // shared: no FUTEX_PRIVATE_FLAG
  }
  timespec abs{};
  ::clock_gettime(CLOCK_MONOTONIC, &abs);
  abs.tv_sec += timeout_ms / 1000;
  abs.tv_nsec += (timeout_ms % 1000) * 1'000'000L;
  if (abs.tv_nsec >= 1'000'000'000L) {
    abs.tv_sec += 1;
    abs.tv_nsec -= 1'000'000'000L;
  }
  // Returns the index of the word that woke us; any index is "woken".
  return ::syscall(SYS_futex_waitv, v, waiters.size(), 0, &abs, CLOCK_MONOTONIC) >= 0 ? 0 : -1;
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  (void)futex(word, FUTEX_WAKE, INT_MAX, nullptr);
}

}  // namespace collie
