// WorkQueue: runs the torch backend's operations one at a time, in the order
// they were issued, on a worker thread -- or on the thread that waits for one.
//
// c10d gives a backend no hint whether its caller will wait at once
// (torch.distributed.all_reduce(t) calls allreduce() and then wait()) or
// much later (async_op=True, DDP's gradient buckets). A worker thread must
// therefore be able to run every operation, or one that nobody waits for
// would never make progress. But handing a blocking call to a worker and
// back costs two thread wake-ups, which on a loaded host are most of a small
// collective's latency (docs/performance.md, "collie-bench: back-to-back
// versus blocking"). So:
//
//  * An operation issued while the queue is idle is not handed to the worker
//    at once: it is *due* a grace period later (kDefaultInlineGrace). A thread that waits for it
//    before then takes it out of the queue and runs it itself (run_inline),
//    with no hand-off at all. This is torch.distributed's blocking call.
//  * At the due time, a timer (timerfd) wakes the worker, which runs it: an
//    operation nobody waits for starts at most one grace period late. A
//    blocking call does not wake the worker: the timer is armed only when
//    none is and never cancelled (system calls that cost microseconds on a
//    virtual machine), so a stream of blocking calls sees one expiry, one
//    wake-up of the worker, per grace period. Measured: with a grace of
//    100 us those wake-ups doubled the CPU time of a 4-byte all_reduce
//    between two ranks on 2 loaded cores; with 1 ms they cost nothing
//    measurable (docs/torch.md).
//  * expedite() makes an operation due now: for getFuture() (DDP waits on
//    the future, not on the Work), for waits with a timeout, and for the
//    group's destructor. An operation issued while another is queued or
//    running is due at once: its caller is not waiting for each in turn.
//
// Only one task runs at a time, whoever runs it, so the tasks of one queue
// reach collie's process group in issue order -- the order every rank must
// share -- and that group is never busy when a task calls it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "runtime/base/unique_fd.h"

namespace collie {

class WorkQueue {
 public:
  // A task records its own outcome; it must not throw.
  using Task = std::function<void()>;
  using Clock = std::chrono::steady_clock;

  // How long an operation issued to an idle queue waits for its caller to
  // run it inline before the worker does: far longer than the microseconds
  // between torch's allreduce() and wait() calls, short against the
  // computation an asynchronous caller overlaps with the operation.
  static constexpr std::chrono::microseconds kDefaultInlineGrace{1000};

  // A zero grace hands every operation to the worker at once (a waiter may
  // still run it when it gets there first). Throws Error naming the system
  // call when the eventfd or the timerfd cannot be made.
  explicit WorkQueue(std::chrono::microseconds inline_grace = kDefaultInlineGrace);
  // Runs what is still queued, then joins the worker.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `task` and returns its ticket (1, 2, ... in issue order).
  uint64_t push(Task task);
  // Runs the task of `ticket` on this thread when it is next in line and no
  // task is running; returns whether it did. False also when the task has
  // already run or is running (the caller then waits for its outcome).
  bool run_inline(uint64_t ticket);
  // Makes the task of `ticket` due now (nothing when it already ran).
  void expedite(uint64_t ticket);
  // Returns once every task queued so far has run (they are all made due).
  void drain();

  // How many tasks ran on a waiting thread and how many on the worker (for
  // the benchmarks: the share of blocking calls that saved the hand-off).
  uint64_t inline_runs() const;
  uint64_t worker_runs() const;

 private:
  struct Entry {
    uint64_t ticket;
    Task task;
    Clock::time_point due;
  };

  void run_worker();
  // Runs `task` with mu_ released; `lock` holds mu_ before and after.
  void run_unlocked(std::unique_lock<std::mutex>& lock, Task& task);
  // Wakes the worker if it sleeps; requires mu_.
  void wake_worker_locked();
  // Arms the timer for the head's due time unless it is armed already (for
  // an earlier time: the worker then arms it again). Requires mu_.
  void arm_timer_locked(Clock::time_point now);

  const std::chrono::microseconds inline_grace_;
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;  // wakes drain(): a task finished
  std::deque<Entry> queue_;
  uint64_t last_ticket_ = 0;
  bool running_ = false;
  bool stopping_ = false;
  bool worker_sleeping_ = false;  // in poll(); a wake needs the eventfd
  bool timer_armed_ = false;
  uint64_t inline_runs_ = 0;
  uint64_t worker_runs_ = 0;
  UniqueFd wake_fd_;    // eventfd: "look at the queue"
  UniqueFd timer_fd_;   // timerfd: the head's due time
  std::thread worker_;  // last: started once the members above exist
};

}  // namespace collie
