// Work: the handle a collective returns (c10d's shape). Every collective is
// asynchronous; wait() blocks until it finishes and rethrows its error.
//
// The contract, for host work (the cpu backend) and device work (nccl)
// alike; the contract suite (test/runtime/contract) checks it on both:
//  * is_completed() never blocks. True once the operation finished (for
//    device work: on the device) or failed.
//  * is_success(): completed without error.
//  * wait(timeout) blocks the host until is_completed(), then rethrows the
//    operation's error, which carries its cause (the peer's or NCCL's error
//    string, the CUDA error, or the deadline that passed). On return,
//    is_success() is true. A timeout of its own that passes first throws
//    TimeoutError and leaves the operation running.
//  * synchronize(): device work: the caller's current stream waits for the
//    operation and the host goes on (what torch's Work.wait() does on CUDA);
//    an error already known is rethrown. Host work: wait().
//  * A blocking call (async_op = false) returns what synchronize() gives:
//    host work is complete; device work is ordered before everything the
//    caller's stream runs next, and may still be running on the device.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collie/base/deadline.h"

namespace collie {

class Work {
 public:
  virtual ~Work() = default;

  virtual bool is_completed() const = 0;
  // True when completed without error.
  virtual bool is_success() const = 0;
  // Waits until completion; kUnsetTimeout waits up to the collective's own
  // deadline. Rethrows the collective's error; throws TimeoutError if this
  // wait's own timeout passes first (the collective keeps running).
  virtual void wait(Timeout timeout = kUnsetTimeout) = 0;
  // See above: the caller's stream waits (device work), or wait().
  virtual void synchronize() { wait(); }
  // The stored error, or nullptr.
  virtual std::exception_ptr exception() const = 0;
  // For a receive: the group rank whose message it took (a receive from any
  // source learns it only when the message arrives; valid once completed).
  // -1 for everything else (torch's Work._source_rank()).
  virtual int source_rank() const { return -1; }
};

// A Work that completed successfully, one instance shared by every caller:
// a blocking call that ran on the caller's thread and succeeded has nothing
// of its own to keep (is_success, wait returns, source_rank -1), so it
// allocates nothing.
std::shared_ptr<Work> completed_work();
// The same for a receive whose message came from group rank `source`
// (source_rank() says so): one shared instance per source rank, made on
// first use and never freed; a fresh completed Work past the first 65,536
// ranks.
std::shared_ptr<Work> completed_work(int source);

// Runs queued operations on a thread that waits for one of them, instead of
// leaving them to the backend's worker thread (SerialExecutor, rule 3).
// While a waiter helps, the worker takes no new operation, so operations
// issued back to back run on the waiting thread with no hand-off between
// threads.
class WorkHelper {
 public:
  virtual ~WorkHelper() = default;
  // A waiter starts or stops helping (each begin_help has its end_help):
  // `done` when what it waited for completed (it may soon wait for the next
  // one), false when it goes to sleep until then (the worker must go on).
  virtual void begin_help() = 0;
  virtual void end_help(bool done) = 0;
  // Runs the oldest queued operation here; false when it cannot now (one is
  // running on another thread, or none is queued).
  virtual bool help() = 0;
};

// A Work completed by whoever runs the operation (a backend's worker thread)
// through mark_completed(). Thread-safe.
class CompletionWork : public Work {
 public:
  // How long wait() polls before it sleeps (see work.cc).
  static constexpr std::chrono::microseconds kWaitSpin{50};

  explicit CompletionWork(std::string description) : description_(std::move(description)) {}
  // Described on demand (errors and logs only): formatting a description on
  // every call cost about a microsecond of a small collective's latency.
  explicit CompletionWork(std::function<std::string()> describe) : describe_(std::move(describe)) {}

  bool is_completed() const override;
  bool is_success() const override;
  void wait(Timeout timeout = kUnsetTimeout) override;
  std::exception_ptr exception() const override;

  int source_rank() const override;

  using Callback = std::function<void(std::exception_ptr)>;
  // Completes the work (error == nullptr for success) and wakes waiters,
  // then runs the callbacks of on_completed(). Only the first call counts.
  void mark_completed(std::exception_ptr error = nullptr) {
    run_callbacks(complete(std::move(error)));
  }
  // mark_completed in two steps, for a caller that does something between
  // (the executor steps aside from running its queue while callbacks run):
  // complete() completes the work and wakes waiters, and returns the
  // callbacks to pass to run_callbacks() (none when it was completed before).
  std::vector<Callback> complete(std::exception_ptr error);
  void run_callbacks(std::vector<Callback> callbacks) const;
  // Runs `callback(error)` once the work completes: here and now if it has,
  // else on the thread that completes it (which must not wait for long; it
  // may wait for another Work of the same executor). An exception from it is
  // logged, not thrown (the other callbacks still run).
  void on_completed(Callback callback);
  // For a receive: who sent the message; set before mark_completed().
  void set_source_rank(int rank);
  // Who may run this Work's operation on a thread that waits for it (set
  // before the Work is handed out). Held weakly: the queue may go first.
  void set_helper(std::weak_ptr<WorkHelper> helper) { helper_ = std::move(helper); }
  std::string description() const { return describe_ ? describe_() : description_; }

 private:
  const std::string description_;                // "all_reduce #17 (float32, 1024)"
  const std::function<std::string()> describe_;  // or this, when set
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Set once, under mu_ (so that cv_'s waiters see it); read without it too
  // (is_completed, wait's spin).
  std::atomic<bool> completed_{false};
  std::exception_ptr error_;
  int source_rank_ = -1;
  std::vector<Callback> callbacks_;  // guarded by mu_
  std::weak_ptr<WorkHelper> helper_;
};

}  // namespace collie
