// Waiting: how a rank waits for its peers, apart from what it waits for.
// Two pieces, both concrete and inline where the hot path calls them:
//
// SpinPolicy, the adaptive spin. Transport::progress() first busy-polls its
// connections for `spin` (a blocking wake-up costs tens of microseconds, more
// than a small message's whole round trip), yielding the CPU between polls
// so that oversubscribed ranks still run, then sleeps. A yield that gives the
// core away for long (to another program) makes the next waits sleep at once,
// so a busy machine is not made worse. The policy only keeps the state and
// decides; the loop that polls is the Transport's (transport.cc). Owned by
// one Transport, touched by its calling thread only.
//
// poll_connections(), the sleep: one poll() over several connections, or,
// when every one of them is shared memory, a futex wait on their words in
// bounded slices followed by a poll() that does not sleep (a peer that died
// without waking us is noticed within one slice). Connection::arm() and
// disarm() (defined in waiting.cc) translate between a connection's stream
// and the fd or futex word it is waited on with.
#pragma once

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>

#include "collie/base/deadline.h"
#include "collie/collectives/transport/connection.h"

namespace collie {

// A spin-wait hint: lets the sibling hyperthread run and saves power.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Moves the calling thread to `cpu` now and gives it its CPU mask back at
// once: a placement, not a binding (the scheduler stays free to move it,
// and threads it starts later inherit the full mask). False when `cpu` is
// not in the thread's mask or the kernel refused.
bool move_to_cpu(int cpu);
// The CPU of slot `local_index` of `local_ranks` among the calling thread's
// allowed CPUs, spread evenly; -1 when there are fewer CPUs than ranks or a
// single rank.
int home_cpu(int local_index, int local_ranks);

// Adaptive spinning. A spin pays when the peer is running and answers
// within microseconds. When the core is shared with another program, the
// spinner's sched_yield() hands that program a whole time slice while the
// spinner's peer may be waiting behind yet another program on the other
// core: on a busy 2-core machine a fixed spin turned 25 us calls into 1-3 ms
// ones (docs/algorithms.md, "Spinning"). So a yield that returns later than
// kLongYield stops spinning for a while: 2 ms after the first such yield,
// twice as long after each further one, up to 1 s; a run of kSpinStreak
// waits completed while spinning halves the pause again. A spin that merely
// runs out (the peer is late) changes nothing: it wastes at most `spin` of
// CPU and never a time slice. Pauses are timed, not counted in waits, so a
// hiccup at start-up (ranks still arriving) costs milliseconds of not
// spinning, not the next thousand calls; a loaded machine risks one late
// yield a second.
//
// Invariant: while paused (quiet()), busy_polling() is false, so neither the
// clockless polls nor the express path's spin run; only a timed wait
// (begin_wait()) that finds the pause over lifts it.
class SpinPolicy {
 public:
  // A yield that came back later than this gave the core to something that
  // runs whole time slices.
  static constexpr std::chrono::microseconds kLongYield{1000};
  // progress()'s polls without reading the clock, while busy-polling.
  static constexpr int kClocklessPolls = 32;

  // A yield that came back later than this (and sooner than kLongYield)
  // let another task run on this CPU: a rank's own peer when the data it
  // waits for is there right after.
  static constexpr std::chrono::microseconds kSharedYield{2};
  // Waits in a row that ended right after such a yield before a rank moves
  // to its home CPU.
  static constexpr uint32_t kSharedStreak = 2;

  // `spin`: how long a wait spins before it sleeps (0: never). `busy_poll`:
  // the first part of it that polls memory without sched_yield(); only for
  // ranks that have a core each. `home_cpu`: TransportOptions::home_cpu.
  SpinPolicy(std::chrono::microseconds spin, std::chrono::microseconds busy_poll, int home_cpu = -1)
      : spin_(spin), busy_poll_(busy_poll), home_cpu_(home_cpu) {}

  std::chrono::microseconds spin() const { return spin_; }
  // Whether a wait may spin on memory without yielding the core now.
  bool busy_polling() const { return busy_poll_.count() > 0 && spin_.count() > 0 && !quiet_; }

  // A timed wait starts at `now`: how long it spins (0 while paused), and
  // how much of that it busy-polls. Records whether the pause still holds.
  std::chrono::microseconds begin_wait(Clock::time_point now) {
    const bool paused = spin_.count() == 0 || now < quiet_until_;
    quiet_ = spin_.count() > 0 && paused;
    return paused ? std::chrono::microseconds(0) : spin_;
  }
  std::chrono::microseconds busy_poll_for(std::chrono::microseconds spin) const {
    return std::min(busy_poll_, spin);
  }
  // A wait that spun completed: a streak of these shortens the next pause.
  void succeeded() {
    if (++streak_ < kSpinStreak) return;
    streak_ = 0;
    penalty_ = std::max(penalty_ / 2, kMinPenalty);
  }
  // A yield came back late: stop spinning for the current penalty.
  void failed();
  // A wait ended; `after_shared_yield`: right after a yield in which
  // another task ran on this CPU. Two ranks that spin on each other from
  // one CPU look to the scheduler like one busy task, and it may take it
  // tens of milliseconds to part them (wake-ups pull a woken task to its
  // waker's CPU): meanwhile every exchange costs two busy-poll periods and
  // two switches, ~20 us for a 0.5 us all_reduce. So a streak of such waits
  // moves this thread once to its home CPU (move_to_cpu), which parts the
  // pair at once. Returns whether it moved.
  bool note_wait(bool after_shared_yield) {
    if (!after_shared_yield) {
      shared_streak_ = 0;
      return false;
    }
    if (++shared_streak_ < kSharedStreak || home_cpu_ < 0) return false;
    shared_streak_ = 0;
    const bool moved = move_to_cpu(home_cpu_);
    moves_ += moved;
    return moved;
  }
  // How many times note_wait() moved this rank (tests, debug logs).
  uint64_t moves() const { return moves_; }

 private:
  static constexpr uint32_t kSpinStreak = 64;
  static constexpr std::chrono::milliseconds kMinPenalty{2}, kMaxPenalty{1000};

  const std::chrono::microseconds spin_;
  const std::chrono::microseconds busy_poll_;
  Clock::time_point quiet_until_{};  // no spin before this
  // A pause seen by the last timed wait (quiet_until_ not yet passed then).
  bool quiet_ = false;
  std::chrono::milliseconds penalty_ = kMinPenalty;  // the next pause
  uint32_t streak_ = 0;                              // successful spins since the last failure
  const int home_cpu_;
  uint32_t shared_streak_ = 0;  // waits in a row that ended after a shared yield
  uint64_t moves_ = 0;
};

// When every entry is a shared-memory channel the wait sleeps on the
// channels' futex words instead of poll(), in slices of at most this many
// milliseconds, each followed by a poll() that does not sleep: a peer that
// died without waking us (SIGKILL) is noticed within one slice.
inline constexpr int kFutexSliceMs = 10;

// One poll() over several connections. Each entry says which directions it
// waits for; on return `ready` holds the stream readiness (disarm()). Does
// not sleep when one is ready already. `extra` fds (listeners) are polled
// alongside, their revents filled in. Returns poll()'s result
// (of the poll() after the futex wait, in that case). Nor does it sleep
// when one of the `done` words, read after every entry is armed, already
// holds its value: a word that a peer sets in this process's memory
// (process_vm_writev) and then wakes the connection's futex word and fd
// for (Connection::wake_peer).
struct PollEntry {
  Connection* c;
  bool want_read;
  bool want_write;
  short ready = 0;
};
struct DoneWord {
  const std::atomic<uint64_t>* word;
  uint64_t value;
};
int poll_connections(std::span<PollEntry> entries, int timeout_ms, std::span<pollfd> extra = {},
                     std::span<const DoneWord> done = {});

}  // namespace collie
