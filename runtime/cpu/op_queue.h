// OpQueue: the worker thread behind an asynchronous process group. Callers
// submit operations from any thread; one worker runs them one at a time in
// submission order (so every rank runs its collectives in the order it issued
// them) and completes each operation's Work. A thread that waits for one
// of the Works may run the queued operations itself meanwhile (WorkHelper in
// work.h): the worker then takes no new one, so operations issued back to
// back and then waited for run without a hand-off between threads.
//
// Callers: any thread may submit, but with CallerPolicy::kOneAtATime (what a
// process group uses) a call made while another thread runs a blocking op
// inline breaks the queue with an error naming both calls: two threads
// issuing collectives on one group put them in a different order on each
// rank, which mixes the ranks' data silently. The check costs the inline path
// two relaxed stores and a thread-local read.
//
// The first operation that fails with anything but InvalidArgument breaks the
// queue for good, as the error policy asks (docs/architecture.md): operations still queued
// and every later submission fail at once with a BackendError that names the
// operation that broke it and its error.
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

#include "collie/base/deadline.h"
#include "collie/runtime/process_group/work.h"

namespace collie {

class OpQueue {
 public:
  // An operation: runs under the deadline; may set things on its Work (a
  // receive's source rank) before the queue completes it.
  using OpFn = std::function<void(const Deadline&, CompletionWork&)>;
  // An operation's details for its Work's description ("float32 x 1024,
  // sum"), formatted only when something asks (an error, a log line).
  using Details = std::function<std::string()>;

  enum class CallerPolicy {
    kAnyThread,   // callers order their calls themselves
    kOneAtATime,  // a call racing another thread's inline op breaks the queue
  };
  // `what` names the owner in messages: "process group \"0\" (cpu, rank 1
  // of 4)". `abort` (kOneAtATime) must make a running op fail promptly; it is
  // called when two threads' calls overlap.
  explicit OpQueue(std::string what, CallerPolicy policy = CallerPolicy::kAnyThread,
                   std::function<void()> abort = {});
  // Calls shutdown with a zero grace period if nobody did.
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // Queues `op` and returns its Work, described as "kind #seq (details)",
  // e.g. "all_reduce #3 (float32 x 1024, sum)", where seq counts this
  // queue's submissions from 1. The worker runs it under a Deadline of
  // `timeout` that starts when the op first waits for the clock's sake:
  // its first timed wait, or the end of its first step when more follow
  // (Deadline::from_first_use; a one-step op that never waits long reads
  // no clock). When the queue is broken or
  // shut down, the returned Work has already failed.
  std::shared_ptr<Work> submit(const char* kind, Details details, Timeout timeout, OpFn op) {
    return submit_impl(kind, std::move(details), timeout, std::move(op), true);
  }
  // submit for an op of this rank alone (see run_or_submit's kLocal).
  std::shared_ptr<Work> submit_local(const char* kind, Details details, Timeout timeout, OpFn op) {
    return submit_impl(kind, std::move(details), timeout, std::move(op), false);
  }
  // Like submit, but when nothing is queued or running it runs `op` right
  // here on the caller's thread (the worker holds back anything submitted
  // meanwhile, so issue order is kept) and returns a completed Work. For
  // callers that would wait at once: it saves the hand-off to the worker and
  // the wake-up back, the bulk of a small collective's latency.
  //
  // `op` is an OpFn, or a callable taking only the Deadline (an op that
  // sets nothing on its Work). The latter runs inline as it is: nothing is
  // type-erased or allocated, a success returns completed_work(), and
  // `details` is formatted only if the op fails. Queued, both become OpFns.
  //
  // kLocal: an op of this rank alone, in no order the ranks share (waiting
  // for posted point-to-point ops): exempt from kOneAtATime's check, so a
  // thread may wait while another issues calls.
  template <bool kLocal = false, typename DetailsFn, typename Fn>
  std::shared_ptr<Work> run_or_submit(const char* kind, DetailsFn&& details, Timeout timeout,
                                      Fn&& op) {
    uint64_t seq = 0;
    if (!begin_inline(&seq)) {
      return submit_impl(kind, Details(std::forward<DetailsFn>(details)), timeout,
                         to_op_fn(std::forward<Fn>(op)), !kLocal);
    }
    if constexpr (!kLocal) mark_inline_caller(kind, seq);
    if constexpr (std::is_invocable_v<Fn&, const Deadline&>) {
      std::exception_ptr error;
      try {
        op(Deadline::from_first_use(timeout));
      } catch (...) {
        error = std::current_exception();
      }
      bool released = false;
      if (!error) {
        error = end_inline(nullptr, {});
        if (!error) return completed_work();
        released = true;  // it met another thread's call: failed after all
      }
      // The queue is released before anything here may throw (an
      // allocation): a queue left marked busy would never run another op.
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
        end_inline(nullptr, {});  // release the queue, then report the failure
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

  // Waits up to `grace` for the queued operations; if some are left, calls
  // `abort` (which must make a running op return promptly), fails the rest
  // and joins the worker. Later submissions fail. Idempotent.
  void shutdown(Timeout grace, const std::function<void()>& abort);
  // Breaks the queue with `reason` (unless it is broken already), then calls
  // `abort`, which must make a running op fail promptly: the op running now
  // and everything queued or submitted later fail. Does not wait. Thread-safe.
  void abort(std::exception_ptr reason, const std::function<void()>& abort);

  bool broken() const;
  // The error that broke the queue, or nullptr.
  std::exception_ptr broken_error() const;
  // Number of operations submitted so far.
  uint64_t submitted() const;

 private:
  struct Op {
    std::shared_ptr<CompletionWork> work;
    Timeout timeout;
    OpFn run;
  };

  class Helper;
  // How long the worker leaves the queue to a waiter that stopped helping.
  static constexpr std::chrono::microseconds kHandBack{500};

  std::shared_ptr<Work> submit_impl(const char* kind, Details details, Timeout timeout, OpFn op,
                                    bool check_caller);
  void run_worker();
  // The Work of submission number `seq`, described lazily.
  std::shared_ptr<CompletionWork> make_work(const char* kind, uint64_t seq, Details details);
  // WorkHelper's calls (through Helper, which outlives the queue safely).
  void begin_help();
  void end_help(bool done);
  bool help();
  // Takes the oldest queued op and runs it (or refuses it, when the queue
  // is broken), completing its Work; `lock` holds mu_ before and after, not
  // while the op runs. Requires a queued op and none running.
  void run_front(std::unique_lock<std::mutex>& lock);
  // Runs op (mu_ not held) and records a failure; returns its error.
  std::exception_ptr run_op(Op& op);
  // run_or_submit's inline path: true (and the op's number in *seq, the
  // queue marked busy) when nothing is queued or running and the queue
  // takes ops; then end_inline(error, the op's description if it failed)
  // when the op is done. end_inline returns the op's error: `error`, or,
  // for an op that succeeded while two threads' calls met, the error that
  // broke the queue (its data may be another call's).
  bool begin_inline(uint64_t* seq);
  std::exception_ptr end_inline(std::exception_ptr error, const std::string& description);
  // kOneAtATime: records that this thread runs op `kind #seq` inline.
  void mark_inline_caller(const char* kind, uint64_t seq) {
    if (policy_ != CallerPolicy::kOneAtATime) return;
    inline_kind_.store(kind, std::memory_order_relaxed);
    inline_seq_.store(seq, std::memory_order_relaxed);
    inline_thread_.store(this_thread_id(), std::memory_order_relaxed);
  }
  // kOneAtATime, on a call that could not run inline: when another thread
  // runs an op inline, breaks the queue and throws BackendError naming both.
  void check_one_caller(const char* kind, const Details& details);
  static int this_thread_id();
  // "kind #seq (details)": a Work's description.
  static std::string describe(const char* kind, uint64_t seq, const std::string& details);
  // The error a refused or skipped op fails with; requires mu_.
  std::exception_ptr refusal_locked(const std::string& description) const;

  // What the inline path needs to know, in one word it reads and changes
  // without taking mu_: kBusy (an op runs, inline or from the queue),
  // kQueued (queue_ holds ops), kClosed (broken or stopping), and above
  // kSeqShift the number of submissions so far. The inline path's begin
  // goes from no flag set to kBusy in one compare-exchange, and its end
  // clears kBusy; every other change is made under mu_. An end that finds
  // kQueued or kClosed set takes mu_ to wake whoever waits (wake_locked).
  // A mutex here cost two lock/unlock pairs on every blocking call.
  static constexpr uint64_t kBusy = 1, kQueued = 2, kClosed = 4, kFlags = 0xff;
  static constexpr int kSeqShift = 8;
  static constexpr uint64_t kSeqOne = uint64_t{1} << kSeqShift;
  bool busy() const { return (state_.load(std::memory_order_acquire) & kBusy) != 0; }
  // Wakes the worker when ops wait and no waiter helps, or on shutdown;
  // shutdown itself once drained. Requires mu_.
  void wake_locked();

  const std::string what_;
  const CallerPolicy policy_;
  const std::function<void()> abort_;
  std::atomic<uint64_t> state_{0};
  // The op running inline (kOneAtATime): its caller's thread id (0: none),
  // kind and number. Read only to name it when another thread's call meets it.
  std::atomic<int> inline_thread_{0};
  std::atomic<const char*> inline_kind_{nullptr};
  std::atomic<uint64_t> inline_seq_{0};
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
  std::string broken_by_;  // the description of the op that broke the queue
  std::exception_ptr broken_error_;
  std::shared_ptr<Helper> helper_;
  std::thread worker_;
};

}  // namespace collie
