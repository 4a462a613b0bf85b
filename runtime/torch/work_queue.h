// WorkQueue: runs the torch backend's CPU operations one at a time, in the
// order they were issued: on a worker thread, or on the thread that waits.
//
// torch 2.x tells a backend whether its caller waits at once: every option
// struct carries asyncOp (false for torch.distributed.all_reduce(t) without
// async_op=True). So:
//
//  * A blocking call (run) runs on the caller's thread as soon as everything
//    issued before it has run. When the queue is idle that is at once: no
//    thread hand-off at all. When asynchronous operations are still queued,
//    the caller runs them too rather than wait for the worker to get to them,
//    and the worker leaves the blocking call itself to its caller (it would
//    otherwise often get there first, right after finishing the one before,
//    and cost the caller a wake-up).
//  * An asynchronous call (submit) is queued and the worker is woken; DDP's
//    gradient buckets and FSDP's prefetches overlap with the caller's
//    computation this way. A thread that waits for one of them
//    (help_until) runs the queue's front operations itself when the worker
//    is not already running one.
//
// Only one task runs at a time, whoever runs it, so the tasks of one queue
// reach collie's process group in issue order (the order every rank shares)
// and that group is never busy when a task calls it.
//
// That serialisation also hid what the C++ API refuses
// (runtime/cpu/op_queue.h, CallerPolicy::kOneAtATime): two threads that
// issue calls on one group at once put them in a different order on each
// rank, and the ranks then reduce each other's wrong tensors, silently
// (two Python threads doing 300 blocking all_reduces each got 37-149 wrong
// sums per thread). The queue applies the same rule: a call issued (run or
// submit) by one thread while another thread's blocking call (run) is in
// progress, from its issue to its return, breaks the queue. The late call
// throws BackendError naming both calls and threads, `on_calls_met` is told
// (the backend aborts its group, so that the call in progress and the
// peers' matching calls fail too), and calls_met() says so to the tasks
// that finish afterwards, which then fail rather than report data that may
// be another call's. Waiting for a Work from another thread (help_until),
// the worker, and calls issued one after another from different threads
// stay allowed: only an overlap is a race the queue can see.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace collie::torch_adapter {

class WorkQueue {
 public:
  // A task records its own outcome; it must not throw.
  using Task = std::function<void()>;

  // Told (once, with no lock held, on the thread whose call met another
  // thread's) the message naming both calls when two threads' calls meet.
  using OnCallsMet = std::function<void(const std::string& message)>;

  // `what` names the owner in messages: "process group \"0\" (collie, rank
  // 1 of 2)".
  explicit WorkQueue(std::string what = "the work queue", OnCallsMet on_calls_met = {});
  // Runs what is still queued, then joins the worker.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `task`, wakes the worker, and returns its ticket (1, 2, ... in
  // issue order). `op` (a string literal) names the call in messages.
  // Throws BackendError, queuing nothing, when another thread's blocking
  // call is in progress.
  uint64_t submit(const char* op, Task task);
  // Runs `task` on this thread once every task issued before it has run
  // (running those here too when nobody else is); returns after it ran.
  // Used for blocking calls. Returns the ticket it took. Throws as submit
  // does, running nothing.
  template <typename Fn>
  uint64_t run(const char* op, Fn&& task) {
    std::unique_lock lock(mu_);
    const int self = check_caller_locked(lock, op);
    if (queue_.empty() && !running_) {
      const uint64_t ticket = ++last_ticket_;
      ++inline_runs_;
      running_ = true;
      started_ = ticket;
      blocking_ = Caller{self, op, ticket};
      lock.unlock();
      task();  // must not throw
      finish_inline(ticket);
      return ticket;
    }
    // Reserved: the worker leaves it to this thread, which waits for it.
    const uint64_t ticket = push_locked(Task(std::forward<Fn>(task)), /*reserved=*/true);
    blocking_ = Caller{self, op, ticket};
    help_locked(lock, ticket, /*wait_for_it=*/true);
    blocking_ = Caller{};
    return ticket;
  }
  // Whether two threads' calls have met (the message), or empty. A task
  // that succeeded reads it before it reports success: once calls met, its
  // data may be another call's.
  std::string calls_met() const;
  // Runs queued tasks on this thread, oldest first, while nothing is running
  // elsewhere, until the task of `ticket` has started (here or on the
  // worker). The caller then waits for that task's outcome.
  void help_until(uint64_t ticket);
  // Returns once every task queued so far has run.
  void drain();
  // Waits until nothing is queued or running, at most until `deadline`;
  // returns whether that happened (the caller helps nothing meanwhile).
  bool wait_idle_until(std::chrono::steady_clock::time_point deadline);

  // How many tasks ran on a calling thread (blocking calls and helping
  // waiters) and how many on the worker: the share of calls that saved the
  // hand-off, for the benchmarks.
  uint64_t inline_runs() const;
  uint64_t worker_runs() const;

 private:
  struct Entry {
    uint64_t ticket;
    Task task;
    bool reserved;  // a blocking call's: run by its caller, not the worker
  };
  // A blocking call in progress: its caller's thread (0: none), op, ticket.
  struct Caller {
    int thread = 0;
    const char* op = nullptr;
    uint64_t ticket = 0;
  };

  // The one-at-a-time rule: returns this thread's id, or, when another
  // thread's blocking call is in progress, breaks the queue and throws
  // BackendError naming both calls (`lock` released then).
  int check_caller_locked(std::unique_lock<std::mutex>& lock, const char* op);
  static int this_thread_id();

  // Queues `task`; an unreserved one wakes the worker.
  uint64_t push_locked(Task task, bool reserved);
  // Helps until `ticket` started; with wait_for_it, until it finished.
  void help_locked(std::unique_lock<std::mutex>& lock, uint64_t ticket, bool wait_for_it);
  // Runs the front task with mu_ released; `lock` holds mu_ before and after.
  void run_front_locked(std::unique_lock<std::mutex>& lock, bool on_worker);
  void finish_inline(uint64_t ticket);
  void run_worker();

  const std::string what_;
  const OnCallsMet on_calls_met_;
  mutable std::mutex mu_;
  std::condition_variable worker_cv_;  // wakes the worker: work queued, or stopping
  std::condition_variable idle_cv_;    // a task finished (helpers, drain)
  std::deque<Entry> queue_;
  uint64_t last_ticket_ = 0;
  uint64_t started_ = 0;  // tickets start in order: every ticket <= started_ has started
  uint64_t finished_ = 0;
  bool running_ = false;
  bool stopping_ = false;
  uint64_t inline_runs_ = 0;
  uint64_t worker_runs_ = 0;
  Caller blocking_;               // the blocking call in progress, if any
  std::string calls_met_;         // set once two threads' calls met
  std::atomic<bool> met_{false};  // calls_met_ is set (read without mu_)
  std::thread worker_;            // last: started once the members above exist
};

}  // namespace collie::torch_adapter
