// SerialExecutor: runs one process group's operations one at a time, in the
// order they were issued, on a worker thread or on a calling thread. It is
// the one executor behind the cpu backend (CpuProcessGroup) and the torch
// adapter (runtime/torch), which issues its operations on the cpu group's
// executor. Its rules, which the unit tests
// (test/runtime/process_group/serial_executor_test.cc) check one by one:
//
//  1. Order. Operations run one at a time, in submission order, whoever
//     runs them, so every rank's operations reach the wire in the order it
//     issued them. Each gets the number of its submission (1, 2, ...) and a
//     Work described as "kind #seq (details)".
//  2. Inline when idle. run_or_submit runs its operation on the caller's
//     thread when nothing is queued or running (no hand-off, no lock, no
//     allocation for an op taking only the Deadline) and returns a completed
//     Work; the worker holds back anything submitted meanwhile. Otherwise it
//     submits, as submit does.
//  3. The waiting thread runs the queue. A thread that waits for a queued
//     Work (Work::wait without a timeout of its own) runs the queued
//     operations itself, oldest first, up to its own, while the worker
//     stands by (WorkHelper, work.h); the worker takes the queue back
//     kHandBack after the waiter's Work completed, or at once when the
//     waiter goes to sleep.
//  4. Nested calls. A call made on the thread that is running one of this
//     executor's operations, from inside that operation (the torch adapter's
//     operation calls the cpu group), runs at once, as part of it: it cannot
//     queue behind the operation that waits for it.
//  5. One caller at a time (CallerPolicy::kOneAtATime): a call that cannot
//     run inline while another thread runs a blocking (inline) operation
//     breaks the executor with a BackendError naming both calls and
//     threads: two threads issuing collectives on one group put them in a
//     different order on each rank, which mixes the ranks' data. `abort` is
//     called so that the running operation fails promptly; once calls met,
//     an operation that succeeded fails too (its data may be another
//     call's). Calls of kLocal kind (waiting for posted point-to-point ops:
//     work of this rank alone, in no order the ranks share) are exempt, so a
//     thread may wait while another issues calls.
//  6. Failure. The first operation that fails with anything but
//     InvalidArgument breaks the executor for good: operations still
//     queued and every later submission fail at once with a BackendError
//     naming the operation that broke it and its error. A refused argument
//     fails that operation alone.
//  7. Deadlines. Each operation runs under a Deadline of its timeout that
//     starts at its first use (Deadline::from_first_use), and every Work
//     completes: shutdown(grace) waits at most `grace` for what is queued,
//     then aborts the running operation and fails the rest.
//  8. Callbacks. A Work's completion callbacks (CompletionWork::
//     on_completed: torch's futures) run on the thread that ran its op, after
//     the op, and may wait for a later op of this executor (DDP's PowerSGD
//     hook waits for an all_reduce it issues from a callback). Once a
//     callback submits an op, its thread stops running the queue until the
//     callbacks return: a waiter stops standing in for the worker, and when
//     every worker thread has stepped aside, another one starts (at most
//     kMaxWorkers; gloo runs two worker threads). Callbacks that submit
//     nothing keep the queue where it is: handing it to another thread
//     after every op cost an asynchronous stream through torch about half
//     its rate on 2 cores. Ops still run one at a time, in order.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/runtime/process_group/work.h"

namespace collie {

class SerialExecutor {
 public:
  // An operation: runs under the deadline; may set things on its Work (a
  // receive's source rank) before the executor completes it.
  using OpFn = std::function<void(const Deadline&, CompletionWork&)>;
  // An operation's details for its Work's description ("float32 x 1024,
  // sum"), formatted only when something asks (an error, a log line).
  using Details = std::function<std::string()>;

  enum class CallerPolicy {
    kAnyThread,   // callers order their calls themselves
    kOneAtATime,  // a call racing another thread's inline op breaks the executor
  };
  // How long the worker leaves the queue to a waiter that stopped helping.
  static constexpr std::chrono::microseconds kHandBack{500};
  // Worker threads at most (rule 8): callbacks nested that deep wait for
  // each other's ops.
  static constexpr int kMaxWorkers = 16;

  // `what` names the owner in messages: "process group \"0\" (cpu, rank 1
  // of 4)". `abort` (kOneAtATime) must make a running op fail promptly; it is
  // called when two threads' calls overlap.
  explicit SerialExecutor(std::string what, CallerPolicy policy = CallerPolicy::kAnyThread,
                          std::function<void()> abort = {});
  // Calls shutdown with a zero grace period if nobody did.
  ~SerialExecutor();
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  // Queues `op` and returns its Work (rule 1). When the executor is broken
  // or shut down, the returned Work has already failed; from inside a
  // running op it runs at once (rule 4).
  std::shared_ptr<CompletionWork> submit(const char* kind, Details details, Timeout timeout,
                                         OpFn op) {
    return submit_impl(kind, std::move(details), timeout, std::move(op), true);
  }
  // submit for an op of this rank alone (rule 5's kLocal).
  std::shared_ptr<CompletionWork> submit_local(const char* kind, Details details, Timeout timeout,
                                               OpFn op) {
    return submit_impl(kind, std::move(details), timeout, std::move(op), false);
  }
  // Rule 2: runs `op` here when idle, else submits it; rule 4 when called
  // from inside a running op. A Work that is not completed on return is the
  // CompletionWork that submit returned.
  //
  // `op` is an OpFn, or a callable taking only the Deadline (an op that
  // sets nothing on its Work). The latter runs inline as it is: nothing is
  // type-erased or allocated, a success returns completed_work(), and
  // `details` is formatted only if the op fails. Queued, both become OpFns.
  template <bool kLocal = false, typename DetailsFn, typename Fn>
  std::shared_ptr<Work> run_or_submit(const char* kind, DetailsFn&& details, Timeout timeout,
                                      Fn&& op) {
    uint64_t seq = 0;
    if (!begin_inline(&seq, !kLocal && policy_ == CallerPolicy::kOneAtATime)) {
      if (running_here())
        return run_nested(kind, std::forward<DetailsFn>(details), timeout, std::forward<Fn>(op));
      uint64_t queued_seq = 0;
      auto work = submit_impl(kind, Details(std::forward<DetailsFn>(details)), timeout,
                              to_op_fn(std::forward<Fn>(op)), !kLocal, &queued_seq);
      // Rule 5 holds while this blocking call waits behind queued ops too.
      if constexpr (!kLocal) mark_queued_caller(kind, queued_seq, *work);
      return work;
    }
    if constexpr (!kLocal) mark_inline_caller(kind, seq);
    inline_runs_.store(inline_runs_.load(std::memory_order_relaxed) + 1,
                       std::memory_order_relaxed);  // one writer: the op holds kBusy
    if constexpr (std::is_invocable_v<Fn&, const Deadline&>) {
      std::exception_ptr error;
      {
        Running running(this);
        try {
          op(Deadline::from_first_use(timeout));
        } catch (...) {
          error = std::current_exception();
        }
      }
      bool released = false;
      if (!error) {
        error = end_inline(nullptr, {});
        if (!error) return completed_work();
        released = true;  // it met another thread's call: failed after all
      }
      // The executor is released before anything here may throw (an
      // allocation): one left marked busy would never run another op.
      std::string description = kind;
      try {
        description = describe(kind, seq, details());
      } catch (...) {
      }
      if (!released) error = end_inline(error, description);
      auto work = std::make_shared<CompletionWork>(std::move(description));
      work->mark_completed(error);
      return work;
    } else {
      std::shared_ptr<CompletionWork> work;
      OpFn fn;
      try {
        work = make_work(kind, seq, Details(std::forward<DetailsFn>(details)));
        fn = OpFn(std::forward<Fn>(op));
      } catch (...) {
        end_inline(nullptr, {});  // release the executor, then report the failure
        throw;
      }
      Op inline_op{work, timeout, std::move(fn)};
      work->mark_completed(run_op(inline_op));
      return work;
    }
  }
  // An op taking only the Deadline as an OpFn (an OpFn as itself).
  template <typename Fn>
  static OpFn to_op_fn(Fn&& op) {
    if constexpr (std::is_invocable_v<Fn&, const Deadline&>) {
      return [op = std::forward<Fn>(op)](const Deadline& d, CompletionWork&) mutable { op(d); };
    } else {
      return OpFn(std::forward<Fn>(op));
    }
  }

  // Runs the queued operations on this thread (rule 3) until everything
  // submitted before the call has run, or failed.
  void drain();
  // Waits until nothing is queued or running, at most until `deadline`,
  // running nothing itself; returns whether that happened.
  bool wait_idle_until(std::chrono::steady_clock::time_point deadline) const;
  // Waits up to `grace` for the queued operations; if some are left, calls
  // `abort` (which must make a running op return promptly), fails the rest
  // and joins the worker. Later submissions fail. Idempotent.
  void shutdown(Timeout grace, const std::function<void()>& abort);
  // Breaks the executor with `reason` (unless it is broken already), then
  // calls `abort`, which must make a running op fail promptly: the op
  // running now and everything queued or submitted later fail. Does not
  // wait. Thread-safe.
  void abort(std::exception_ptr reason, const std::function<void()>& abort);

  bool broken() const;
  // The error that broke the executor, or nullptr.
  std::exception_ptr broken_error() const;
  // Number of operations submitted so far (nested ones included).
  uint64_t submitted() const;
  // Whether this thread runs one of this executor's ops now (rule 4).
  bool running_here() const { return t_running_ == this; }
  // Operations run on a calling thread (inline or by a waiter) and on the
  // worker: the share of calls that saved the hand-off, for the benchmarks.
  // Nested calls are part of the op that made them and count for nothing.
  uint64_t inline_runs() const { return inline_runs_.load(std::memory_order_relaxed); }
  uint64_t worker_runs() const { return worker_runs_.load(std::memory_order_relaxed); }

 private:
  struct Op {
    std::shared_ptr<CompletionWork> work;
    Timeout timeout;
    OpFn run;
  };
  // Marks this thread as running one of the executor's ops while it lives.
  class Running {
   public:
    explicit Running(const SerialExecutor* executor) : saved_(t_running_) { t_running_ = executor; }
    ~Running() { t_running_ = saved_; }
    Running(const Running&) = delete;
    Running& operator=(const Running&) = delete;

   private:
    const SerialExecutor* const saved_;
  };

  class Helper;

  // *seq_out, when given, gets the op's number (0 when it ran nested).
  std::shared_ptr<CompletionWork> submit_impl(const char* kind, Details details, Timeout timeout,
                                              OpFn op, bool check_caller,
                                              uint64_t* seq_out = nullptr);
  // kOneAtATime: records that this thread waits for its blocking call
  // `kind #seq`, queued as `work`, until `work` completes: check_one_caller
  // refuses another thread's call meanwhile, as while an op runs inline.
  void mark_queued_caller(const char* kind, uint64_t seq, CompletionWork& work);
  // Rule 4: runs `op` here and now, under its own number.
  template <typename DetailsFn, typename Fn>
  std::shared_ptr<Work> run_nested(const char* kind, DetailsFn&& details, Timeout timeout,
                                   Fn&& op) {
    const uint64_t seq = begin_nested();
    if constexpr (std::is_invocable_v<Fn&, const Deadline&>) {
      std::exception_ptr error;
      if (closed()) error = refusal_if_broken(describe(kind, seq, details()));
      if (!error) {
        try {
          op(Deadline::from_first_use(timeout));
          return completed_work();
        } catch (...) {
          error = std::current_exception();
        }
        note_failure(error, describe(kind, seq, details()));
      }
      auto work = std::make_shared<CompletionWork>(describe(kind, seq, details()));
      work->mark_completed(error);
      return work;
    } else {
      auto work = make_work(kind, seq, Details(std::forward<DetailsFn>(details)), false);
      std::exception_ptr error = closed() ? refusal_if_broken(work->description()) : nullptr;
      if (!error) {
        try {
          op(Deadline::from_first_use(timeout), *work);
        } catch (...) {
          error = std::current_exception();
          note_failure(error, work->description());
        }
      }
      work->mark_completed(error);
      return work;
    }
  }
  // A nested op's number.
  uint64_t begin_nested() {
    return (state_.fetch_add(kSeqOne, std::memory_order_relaxed) >> kSeqShift) + 1;
  }
  bool closed() const { return (state_.load(std::memory_order_acquire) & kClosed) != 0; }
  // The error a nested op is refused with when the executor is broken, or
  // nullptr.
  std::exception_ptr refusal_if_broken(const std::string& description) const;
  // A failed op that is not an InvalidArgument breaks the executor, unless
  // something broke it already.
  void note_failure(const std::exception_ptr& error, const std::string& description);
  void run_worker();
  // The Work of submission number `seq`, described lazily; `helped`: a
  // waiter may run the executor's queue (not for a nested op's).
  std::shared_ptr<CompletionWork> make_work(const char* kind, uint64_t seq, Details details,
                                            bool helped = true);
  // WorkHelper's calls (through Helper, which outlives the executor safely).
  void begin_help();
  void end_help(bool done);
  bool help();
  // Takes the oldest queued op and runs it (or refuses it, when the executor
  // is broken), completing its Work; `lock` holds mu_ before and after, not
  // while the op runs. Requires a queued op and none running.
  void run_front(std::unique_lock<std::mutex>& lock, bool on_worker);
  // Starts another worker thread when every one stepped aside (rule 8),
  // unless stopping; then wakes one. Requires mu_.
  void wake_a_worker_locked();
  // Rule 8: this thread runs the completion callbacks of an op it ran (as
  // the worker, or as a waiter running the queue) while the scope lives.
  struct CallbackScope {
    const SerialExecutor* executor;
    bool on_worker;
    bool aside;  // stepped aside from running the queue
    CallbackScope* prev;
  };
  static inline thread_local CallbackScope* t_callbacks_ = nullptr;
  // An op was submitted from this executor's callbacks on this thread: the
  // thread stops running the queue until they return. Requires mu_.
  void step_aside_locked();
  // Runs op (mu_ not held) and records a failure; returns its error.
  std::exception_ptr run_op(Op& op);
  // run_or_submit's inline path: true (and the op's number in *seq, the
  // executor marked busy) when nothing is queued or running and the
  // executor takes ops; then end_inline(error, the op's description if it
  // failed) when the op is done. end_inline returns the op's error: `error`,
  // or, for an op that succeeded while two threads' calls met, the error
  // that broke the executor (its data may be another call's).
  // With `caller` (a kOneAtATime call that is not kLocal) it also sets
  // kCaller, which tells check_one_caller that inline_thread_ is about to
  // name this thread.
  bool begin_inline(uint64_t* seq, bool caller);
  std::exception_ptr end_inline(std::exception_ptr error, const std::string& description);
  // kOneAtATime: records that this thread runs op `kind #seq` inline.
  void mark_inline_caller(const char* kind, uint64_t seq) {
    if (policy_ != CallerPolicy::kOneAtATime) return;
    inline_kind_.store(kind, std::memory_order_relaxed);
    inline_seq_.store(seq, std::memory_order_relaxed);
    inline_thread_.store(this_thread_id(), std::memory_order_relaxed);
  }
  // kOneAtATime, on a call that could not run inline: when another thread
  // runs an op inline, breaks the executor and throws BackendError naming
  // both.
  void check_one_caller(const char* kind, const Details& details);
  static int this_thread_id();
  // "kind #seq (details)": a Work's description ("kind #seq" without
  // details).
  static std::string describe(const char* kind, uint64_t seq, const std::string& details);
  // The error a refused or skipped op fails with; requires mu_.
  std::exception_ptr refusal_locked(const std::string& description) const;

  // What the inline path needs to know, in one word it reads and changes
  // without taking mu_: kBusy (an op runs, inline or from the queue),
  // kCaller (that op runs inline for a kOneAtATime caller, which
  // mark_inline_caller names right after), kQueued (queue_ holds ops),
  // kClosed (broken or stopping), and above
  // kSeqShift the number of submissions so far. The inline path's begin
  // goes from no flag set to kBusy in one compare-exchange, and its end
  // clears kBusy in another while neither kQueued nor kClosed is set; every
  // other change is made under mu_ (but a nested op's number, taken while
  // kBusy is held). An end that finds kQueued or kClosed set clears kBusy
  // under mu_ and wakes whoever waits (wake_locked). A mutex here cost two
  // lock/unlock pairs on every blocking call.
  static constexpr uint64_t kBusy = 1, kQueued = 2, kClosed = 4, kCaller = 8, kFlags = 0xff;
  static constexpr int kSeqShift = 8;
  static constexpr uint64_t kSeqOne = uint64_t{1} << kSeqShift;
  bool busy() const { return (state_.load(std::memory_order_acquire) & kBusy) != 0; }
  // Wakes the worker when ops wait and no waiter helps, or on shutdown;
  // shutdown itself once drained. Requires mu_.
  void wake_locked();

  // The executor whose op this thread runs now (rule 4), or null.
  static inline thread_local const SerialExecutor* t_running_ = nullptr;

  const std::string what_;
  const CallerPolicy policy_;
  const std::function<void()> abort_;
  std::atomic<uint64_t> state_{0};
  // The op running inline (kOneAtATime): its caller's thread id (0: none),
  // kind and number. Read only to name it when another thread's call meets it.
  std::atomic<int> inline_thread_{0};
  std::atomic<const char*> inline_kind_{nullptr};
  std::atomic<uint64_t> inline_seq_{0};
  // The same for a blocking call that had to queue, until its op completes.
  std::atomic<int> queued_thread_{0};
  std::atomic<const char*> queued_kind_{nullptr};
  std::atomic<uint64_t> queued_seq_{0};
  // Written only by whoever holds kBusy (inline_runs_) or mu_ (worker_runs_).
  std::atomic<uint64_t> inline_runs_{0};
  std::atomic<uint64_t> worker_runs_{0};
  bool calls_met_ = false;  // two threads' calls met (requires mu_)
  std::mutex shutdown_mu_;  // serialises shutdown() callers
  mutable std::mutex mu_;
  std::condition_variable cv_;       // wakes the worker
  std::condition_variable idle_cv_;  // wakes shutdown when the queue drains
  std::deque<Op> queue_;
  int helpers_ = 0;  // waiters running queued operations: the worker stands by
  std::chrono::steady_clock::time_point help_ended_{};
  bool stopping_ = false;
  bool joined_ = false;
  std::string broken_by_;  // the description of the op that broke the executor
  std::exception_ptr broken_error_;
  std::shared_ptr<Helper> helper_;
  // The worker threads (rule 8: the first from the start, others when every
  // one stepped aside); how many stepped aside.
  std::vector<std::thread> workers_;
  int workers_in_callbacks_ = 0;
};

}  // namespace collie
