// Waiting (waiting.h): the spin policy's back-off, a connection's poll
// support (arm(), disarm()) and the one wait over several connections,
// poll() or futex.
#include "collie/collectives/transport/waiting.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <vector>

#include "collie/collectives/transport/shm/futex.h"

namespace collie {

bool move_to_cpu(int cpu) {
  cpu_set_t original;
  if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof original, &original) != 0 ||
      !CPU_ISSET(cpu, &original))
    return false;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(0, sizeof one, &one) != 0) return false;  // migrates before it returns
  sched_setaffinity(0, sizeof original, &original);
  return true;
}

int home_cpu(int local_index, int local_ranks) {
  cpu_set_t allowed;
  if (local_index < 0 || local_ranks < 2 || sched_getaffinity(0, sizeof allowed, &allowed) != 0)
    return -1;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  if (static_cast<int>(cpus.size()) < local_ranks) return -1;
  return cpus[static_cast<size_t>(local_index) * cpus.size() / static_cast<size_t>(local_ranks)];
}

void SpinPolicy::failed() {
  quiet_ = true;
  streak_ = 0;
  quiet_until_ = Clock::now() + penalty_;
  penalty_ = std::min(penalty_ * 2, kMaxPenalty);
}

Connection::PollRequest Connection::arm(bool want_read, bool want_write, bool* ready,
                                        uint32_t* futex_value) {
  *ready = false;
  if (!channel_) return {-1, 0};
  PollRequest req{channel_->fd(), 0};
  if (futex_value) {
    shm_->arm_futex(want_read, want_write, ready, futex_value);
    // Polled afterwards without sleeping, for the hang-up only: the data
    // wakes the futex.
    req.events = POLLRDHUP;
  } else {
    req.events = channel_->arm(want_read, want_write, ready);
  }
  if (want_read && stash_pos_ < stash_.size()) *ready = true;
  return req;
}

short Connection::disarm(short revents) {
  if (!channel_) return 0;
  short r = channel_->disarm(revents);
  if (stash_pos_ < stash_.size()) r |= POLLIN;
  return r;
}

int poll_connections(std::span<PollEntry> entries, int timeout_ms, std::span<pollfd> extra,
                     std::span<const DoneWord> done) {
  const size_t total = entries.size() + extra.size();
  pollfd small[64];
  std::vector<pollfd> big;
  pollfd* fds = small;
  if (total > 64) {
    big.resize(total);
    fds = big.data();
  }
  // Every channel has a futex word (all shared memory): sleep on the words,
  // which the peers wake with one light syscall and no socket traffic. The
  // fds are polled afterwards, without sleeping, for what only they carry:
  // a peer's hang-up (SIGKILL included), an abort's shutdown, a listener's
  // arrival. The sleep is cut into slices of kFutexSliceMs so that a peer
  // that died without waking us is noticed within one.
  bool futex =
      !entries.empty() && timeout_ms != 0 &&
      (entries.size() == 1 || (entries.size() <= kMaxFutexWaiters && futex_waitv_available()));
  for (size_t i = 0; futex && i < entries.size(); ++i)
    futex = entries[i].c->futex_word() != nullptr;
  FutexWaiter small_waiters[64];
  std::vector<FutexWaiter> big_waiters;
  FutexWaiter* waiters = small_waiters;
  if (futex && entries.size() > 64) {
    big_waiters.resize(entries.size());
    waiters = big_waiters.data();
  }
  bool ready = false;
  for (size_t i = 0; i < entries.size(); ++i) {
    bool r = false;
    if (futex) waiters[i].word = entries[i].c->futex_word();
    const auto req = entries[i].c->arm(entries[i].want_read, entries[i].want_write, &r,
                                       futex ? &waiters[i].value : nullptr);
    fds[i] = pollfd{req.fd, req.events, 0};
    ready |= r;
  }
  for (size_t i = 0; i < extra.size(); ++i) fds[entries.size() + i] = extra[i];
  // After arming: a word set before the futex values were read is seen
  // here; one set after changes a futex word (or rings the fd) in time.
  for (const DoneWord& d : done) ready |= d.word->load(std::memory_order_seq_cst) == d.value;
  if (futex && !ready) {
    const int slice = timeout_ms < 0 ? kFutexSliceMs : std::min(timeout_ms, kFutexSliceMs);
    (void)futex_wait_any({waiters, entries.size()}, slice);
  }
  const int n = ::poll(fds, total, ready || futex ? 0 : timeout_ms);
  for (size_t i = 0; i < entries.size(); ++i) {
    entries[i].ready = entries[i].c->disarm(n > 0 ? fds[i].revents : 0);
  }
  for (size_t i = 0; i < extra.size(); ++i)
    extra[i].revents = n > 0 ? fds[entries.size() + i].revents : 0;
  return n;
}

}  // namespace collie
