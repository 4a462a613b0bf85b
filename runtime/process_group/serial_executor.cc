#include "collie/runtime/process_group/serial_executor.h"

#include <unistd.h>

#include <algorithm>
#include <system_error>

#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"

namespace collie {
namespace {

std::string what_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

bool is_invalid_argument(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const InvalidArgument&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

// What a Work holds (weakly) to reach its executor from a waiting thread.
// The executor detaches it when it is destroyed and waits until no call is
// inside it. No lock is held across a call: help() runs an op and its
// Work's completion callbacks, and a callback may wait for another Work of
// this executor on the same thread (torch futures do), which enters again.
class SerialExecutor::Helper final : public WorkHelper {
 public:
  explicit Helper(SerialExecutor* queue) : queue_(queue) {}
  void begin_help() override {
    Enter enter(this);
    if (enter.queue) enter.queue->begin_help();
  }
  void end_help(bool done) override {
    Enter enter(this);
    if (enter.queue) enter.queue->end_help(done);
  }
  bool help() override {
    Enter enter(this);
    return enter.queue && enter.queue->help();
  }
  // No call enters after this; returns once the calls inside (but this
  // thread's own, when a callback destroys the executor) have left.
  void detach() {
    queue_.store(nullptr, std::memory_order_seq_cst);
    int own = 0;
    for (const Frame* f = t_frames_; f != nullptr; f = f->prev) own += f->helper == this;
    while (active_.load(std::memory_order_seq_cst) > own) std::this_thread::yield();
  }

 private:
  // This thread's calls into helpers, innermost first.
  struct Frame {
    const Helper* helper;
    const Frame* prev;
  };
  // A call inside the helper: counted before the executor is looked up, so
  // that detach() either sees the count or the call sees no executor.
  struct Enter {
    explicit Enter(Helper* h) : helper(h), frame{h, t_frames_} {
      t_frames_ = &frame;
      h->active_.fetch_add(1, std::memory_order_seq_cst);
      queue = h->queue_.load(std::memory_order_seq_cst);
    }
    ~Enter() {
      helper->active_.fetch_sub(1, std::memory_order_seq_cst);
      t_frames_ = frame.prev;
    }
    Enter(const Enter&) = delete;
    Enter& operator=(const Enter&) = delete;
    Helper* const helper;
    const Frame frame;
    SerialExecutor* queue = nullptr;
  };
  static inline thread_local const Frame* t_frames_ = nullptr;
  std::atomic<SerialExecutor*> queue_;
  std::atomic<int> active_{0};
};

SerialExecutor::SerialExecutor(std::string what, CallerPolicy policy, std::function<void()> abort)
    : what_(std::move(what)),
      policy_(policy),
      abort_(std::move(abort)),
      helper_(std::make_shared<Helper>(this)) {
  workers_.emplace_back([this] { run_worker(); });
}

SerialExecutor::~SerialExecutor() {
  shutdown(Timeout(0), [] {});
  helper_->detach();
}

void SerialExecutor::begin_help() {
  std::lock_guard lock(mu_);
  ++helpers_;
}

void SerialExecutor::end_help(bool done) {
  std::lock_guard lock(mu_);
  --helpers_;
  if (!done) {
    // The waiter goes to sleep: the worker goes on now.
    help_ended_ = {};
    if (!queue_.empty()) cv_.notify_all();
    return;
  }
  // What is still queued is the worker's again after kHandBack: a waiter
  // going through Works issued back to back comes back at once for the next
  // one, and waking the worker for it each time (a futex wake, and the
  // worker racing the waiter for the next op) made such a stream 10x slower.
  help_ended_ = std::chrono::steady_clock::now();
  if (stopping_) cv_.notify_all();
}

bool SerialExecutor::help() {
  std::unique_lock lock(mu_);
  if (busy() || queue_.empty() || stopping_) return false;
  run_front(lock, /*on_worker=*/false);
  return true;
}

void SerialExecutor::run_front(std::unique_lock<std::mutex>& lock, bool on_worker) {
  Op op = std::move(queue_.front());
  queue_.pop_front();
  if (broken_error_) {  // kClosed is set: no inline op starts meanwhile
    if (queue_.empty()) state_.fetch_and(~kQueued, std::memory_order_relaxed);
    auto callbacks = op.work->complete(refusal_locked(op.work->description()));
    if (!callbacks.empty()) {  // outside mu_: a callback may call the executor
      lock.unlock();
      op.work->run_callbacks(std::move(callbacks));
      lock.lock();
    }
    return;
  }
  // Busy before not queued: an inline op starts only when neither is set.
  state_.fetch_or(kBusy, std::memory_order_acquire);
  if (queue_.empty()) state_.fetch_and(~kQueued, std::memory_order_relaxed);
  if (on_worker) {
    worker_runs_.store(worker_runs_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  } else {
    inline_runs_.store(inline_runs_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  lock.unlock();
  std::exception_ptr error = run_op(op);
  // Complete outside the lock: a waiter woken here may submit at once.
  std::vector<CompletionWork::Callback> callbacks = op.work->complete(error);
  if (callbacks.empty()) {
    lock.lock();
    return;
  }
  // Rule 8: the callbacks may issue an op and wait for it; if they do,
  // submit_impl has this thread step aside from running the queue.
  CallbackScope scope{this, on_worker, false, t_callbacks_};
  t_callbacks_ = &scope;
  op.work->run_callbacks(std::move(callbacks));
  t_callbacks_ = scope.prev;
  lock.lock();
  if (!scope.aside) return;
  if (on_worker) {
    --workers_in_callbacks_;
  } else {
    ++helpers_;
  }
}

void SerialExecutor::step_aside_locked() {
  for (CallbackScope* scope = t_callbacks_; scope != nullptr; scope = scope->prev) {
    if (scope->executor != this || scope->aside) continue;
    scope->aside = true;
    if (scope->on_worker) {
      ++workers_in_callbacks_;
    } else {
      --helpers_;        // the worker stops standing by
      help_ended_ = {};  // and need not wait kHandBack
    }
  }
}

void SerialExecutor::wake_a_worker_locked() {
  if (!stopping_ && workers_in_callbacks_ >= static_cast<int>(workers_.size()) &&
      static_cast<int>(workers_.size()) < kMaxWorkers) {
    try {
      workers_.emplace_back([this] { run_worker(); });
    } catch (const std::system_error& e) {  // the callbacks' op waits for its deadline
      COLLIE_LOG(kError) << what_ << ": could not start another worker thread: " << e.what();
    }
  }
  cv_.notify_one();
}

std::exception_ptr SerialExecutor::refusal_locked(const std::string& description) const {
  if (broken_error_ && !broken_by_.empty())
    return std::make_exception_ptr(BackendError(
        str_cat(description, " refused: ", what_, " is broken since ", broken_by_,
                " failed: ", what_of(broken_error_), ". Destroy it and create a new group.")));
  if (broken_error_)  // broken by a shutdown that had to abort
    return std::make_exception_ptr(
        BackendError(str_cat(description, " refused: ", what_of(broken_error_))));
  return std::make_exception_ptr(
      BackendError(str_cat(description, " refused: ", what_, " has been shut down")));
}

std::string SerialExecutor::describe(const char* kind, uint64_t seq, const std::string& details) {
  if (details.empty()) return str_cat(kind, " #", seq);
  return str_cat(kind, " #", seq, " (", details, ")");
}

std::shared_ptr<CompletionWork> SerialExecutor::make_work(const char* kind, uint64_t seq,
                                                          Details details, bool helped) {
  auto work = std::make_shared<CompletionWork>([kind, seq, details = std::move(details)] {
    return describe(kind, seq, details ? details() : std::string());
  });
  if (helped) work->set_helper(helper_);
  return work;
}

int SerialExecutor::this_thread_id() {
  static thread_local const int id = static_cast<int>(::gettid());
  return id;
}

void SerialExecutor::check_one_caller(const char* kind, const Details& details) {
  if (policy_ != CallerPolicy::kOneAtATime) return;
  const int self = this_thread_id();
  int other = inline_thread_.load(std::memory_order_acquire);
  // A caller that has just begun an inline op (kCaller set) writes its
  // thread a few instructions later: wait for that, or for its op to end,
  // rather than take the queue behind a call that holds the group (two
  // threads arriving together would then wait for each other until the
  // deadline instead of being refused).
  while (other == 0 && (state_.load(std::memory_order_acquire) & kCaller) != 0) {
    std::this_thread::yield();
    other = inline_thread_.load(std::memory_order_acquire);
  }
  const char* other_kind = nullptr;
  uint64_t other_seq = 0;
  if (other != 0 && other != self) {
    other_kind = inline_kind_.load(std::memory_order_relaxed);
    other_seq = inline_seq_.load(std::memory_order_relaxed);
  } else {
    // Or a blocking call that waits behind queued ops (mark_queued_caller).
    other = queued_thread_.load(std::memory_order_acquire);
    if (other == 0 || other == self) return;
    other_kind = queued_kind_.load(std::memory_order_relaxed);
    other_seq = queued_seq_.load(std::memory_order_relaxed);
  }
  std::string mine;
  try {
    mine = details ? details() : std::string();
  } catch (...) {
  }
  const std::string message = str_cat(
      what_, ": ", kind, mine.empty() ? std::string() : str_cat(" (", mine, ")"),
      " was called on thread ", self, " while ", other_kind ? other_kind : "a collective", " #",
      other_seq, " ran on thread ", other,
      " (a blocking call, which holds the group until it returns). Two threads calling one group's "
      "collectives at once issue them in a different order "
      "on each rank, which mixes the ranks' data, so the group is broken. Call a group from one "
      "thread at a time, or give each thread a group of its own (new_group).");
  {
    std::lock_guard lock(mu_);
    if (broken_error_) return;  // submit refuses the call, naming what broke the queue
    broken_error_ = std::make_exception_ptr(BackendError(message));
    broken_by_.clear();
    calls_met_ = true;
    state_.fetch_or(kClosed, std::memory_order_relaxed);
    cv_.notify_all();
  }
  COLLIE_LOG(kError) << message;
  if (abort_) abort_();
  throw BackendError(message);
}

void SerialExecutor::mark_queued_caller(const char* kind, uint64_t seq, CompletionWork& work) {
  if (policy_ != CallerPolicy::kOneAtATime || seq == 0 || work.is_completed()) return;
  const int self = this_thread_id();
  int none = 0;
  if (!queued_thread_.compare_exchange_strong(none, self, std::memory_order_acq_rel)) {
    // Another thread's blocking call queued between this call's check and
    // now: the calls met. The check refuses this one now, naming that one
    // (this op, queued already, is refused when its turn comes).
    if (none != self) check_one_caller(kind, {});
    return;
  }
  queued_kind_.store(kind, std::memory_order_relaxed);
  queued_seq_.store(seq, std::memory_order_relaxed);
  // Cleared when the op completes (at once if it already has), whoever
  // completes it; the executor completes every Work before it goes.
  work.on_completed([this, self](std::exception_ptr) {
    int mine = self;
    queued_thread_.compare_exchange_strong(mine, 0, std::memory_order_acq_rel);
  });
}

std::shared_ptr<CompletionWork> SerialExecutor::submit_impl(const char* kind, Details details,
                                                            Timeout timeout, OpFn op,
                                                            bool check_caller, uint64_t* seq_out) {
  if (running_here()) {
    auto work = run_nested(kind, std::move(details), timeout, std::move(op));
    return std::static_pointer_cast<CompletionWork>(std::move(work));
  }
  if (check_caller) check_one_caller(kind, details);
  std::exception_ptr refusal;
  std::shared_ptr<CompletionWork> work;
  {
    std::lock_guard lock(mu_);
    const bool take = !broken_error_ && !stopping_;
    // The number and kQueued in one step: an inline op that starts later
    // gets a later number, and one running now holds kBusy.
    uint64_t state = state_.load(std::memory_order_relaxed);
    while (!state_.compare_exchange_weak(state, (state + kSeqOne) | (take ? kQueued : 0),
                                         std::memory_order_acq_rel, std::memory_order_relaxed)) {
    }
    const uint64_t seq = (state >> kSeqShift) + 1;
    if (seq_out) *seq_out = seq;
    if (take) {
      try {
        work = make_work(kind, seq, std::move(details));
        queue_.push_back(Op{work, timeout, std::move(op)});
      } catch (...) {  // kQueued never outlives the ops it announces
        if (queue_.empty()) state_.fetch_and(~kQueued, std::memory_order_relaxed);
        throw;
      }
      // Issued from a completion callback of this executor's op, which may
      // now wait for it: this thread stops running the queue (rule 8).
      if (t_callbacks_ != nullptr) step_aside_locked();
      wake_a_worker_locked();
      return work;
    }
    work = make_work(kind, seq, std::move(details));
    refusal = refusal_locked(work->description());
  }
  work->mark_completed(refusal);
  return work;
}

std::exception_ptr SerialExecutor::refusal_if_broken(const std::string& description) const {
  std::lock_guard lock(mu_);
  // Stopping alone refuses no nested op: the op that makes it was admitted.
  return broken_error_ ? refusal_locked(description) : nullptr;
}

void SerialExecutor::note_failure(const std::exception_ptr& error, const std::string& description) {
  if (!error || is_invalid_argument(error)) return;
  {
    std::lock_guard lock(mu_);
    if (broken_error_) return;
    broken_error_ = error;
    broken_by_ = description;
    state_.fetch_or(kClosed, std::memory_order_relaxed);
    cv_.notify_all();
  }
  COLLIE_LOG(kError) << what_ << ": " << description
                     << " failed, the group is broken: " << what_of(error);
}

void SerialExecutor::drain() {
  // A marker of this rank alone behind everything submitted so far: waiting
  // for it runs what is queued on this thread (rule 3).
  if (running_here()) return;  // everything before the running op has run
  auto marker = submit_local("drain", {}, Timeout(0), [](const Deadline&, CompletionWork&) {});
  try {
    marker->wait();
  } catch (...) {
    // Refused: the executor is broken or shut down, and what is still
    // queued fails at once; wait for that.
    wait_idle_until(std::chrono::steady_clock::time_point::max());
  }
}

bool SerialExecutor::wait_idle_until(std::chrono::steady_clock::time_point deadline) const {
  // Polled: the end of an inline op wakes nobody (that would cost every
  // blocking call a futex wake), and this runs only at shutdown and shrink.
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (queue_.empty() && !busy()) return true;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        deadline - now, std::chrono::milliseconds(1)));
  }
}

bool SerialExecutor::begin_inline(uint64_t* seq, bool caller) {
  // Busy, queued or refusing: the caller takes the ordinary path, which
  // keeps the order and the errors. Otherwise the op is counted and the
  // queue marked busy in one step (the worker starts nothing until this op
  // is done); a submission racing with it makes it fail, which is that path
  // too.
  uint64_t state = state_.load(std::memory_order_relaxed);
  if ((state & kFlags) != 0) return false;
  if (!state_.compare_exchange_strong(state, (state + kSeqOne) | kBusy | (caller ? kCaller : 0),
                                      std::memory_order_acquire, std::memory_order_relaxed))
    return false;
  *seq = (state >> kSeqShift) + 1;
  return true;
}

std::exception_ptr SerialExecutor::run_op(Op& op) {
  std::exception_ptr error;
  {
    Running running(this);
    try {
      op.run(Deadline::from_first_use(op.timeout), *op.work);
    } catch (...) {
      error = std::current_exception();
    }
  }
  std::string description;
  if (error) {
    try {
      description = op.work->description();
    } catch (...) {  // still release the queue below
    }
  }
  return end_inline(error, description);
}

std::exception_ptr SerialExecutor::end_inline(std::exception_ptr error,
                                              const std::string& description) {
  inline_thread_.store(0, std::memory_order_relaxed);
  const bool breaks = error && !is_invalid_argument(error);
  // Nobody to wake and nothing to record: kBusy goes in one
  // compare-exchange, without mu_. Otherwise it goes under mu_, so that
  // shutdown(), which waits under mu_ for kBusy to clear, cannot return
  // (and the executor go) while this thread still has mu_ to take; a
  // kClosed or kQueued set between a look at the word and the change of it
  // fails the exchange.
  if (!breaks) {
    uint64_t state = state_.load(std::memory_order_relaxed);
    while ((state & (kQueued | kClosed)) == 0) {
      if (state_.compare_exchange_weak(state, state & ~(kBusy | kCaller), std::memory_order_release,
                                       std::memory_order_relaxed))
        return error;
    }
  }
  std::lock_guard lock(mu_);
  // Another thread's call met this one: what it returned may be a peer's
  // other call's data, and an error of its own comes from the abort.
  if (calls_met_) error = broken_error_;
  if (breaks && !broken_error_) {
    broken_error_ = error;
    broken_by_ = description;
    state_.fetch_or(kClosed, std::memory_order_relaxed);
    COLLIE_LOG(kError) << what_ << ": " << broken_by_
                       << " failed, the group is broken: " << what_of(error);
  }
  state_.fetch_and(~(kBusy | kCaller), std::memory_order_release);
  wake_locked();
  return error;
}

void SerialExecutor::wake_locked() {
  // Wakes the worker only when it has something to do: ops queued behind an
  // inline one, or a shutdown. An unconditional notify costs a futex wake-up
  // and a context switch of the idle worker on every blocking call, about
  // half of a small all_reduce's latency on 2 cores (docs/performance.md).
  // Nor while a waiter helps: it takes the next one itself.
  // One worker is enough (they are alike), but all of them for a shutdown.
  if (stopping_) {
    cv_.notify_all();
  } else if (!queue_.empty() && helpers_ == 0) {
    wake_a_worker_locked();
  }
  if (queue_.empty() && stopping_) idle_cv_.notify_all();
}

void SerialExecutor::run_worker() {
  std::unique_lock lock(mu_);
  for (;;) {
    // Busy here means a caller is running an op inline.
    if (queue_.empty() || busy()) {
      if (stopping_ && queue_.empty() && !busy()) break;  // stopping and drained
      // Ops queued behind a running one: the end of an inline op wakes us,
      // but an op run by a waiter that helps does not (the waiter takes the
      // next one itself), and that waiter may stop before the rest without
      // waking us either (end_help). Look again after kHandBack.
      if (queue_.empty()) {
        cv_.wait(lock);
      } else {
        cv_.wait_for(lock, kHandBack);
      }
      continue;
    }
    // Waiters run the queued ops while they help, and get kHandBack to
    // come back for more after they stop (a shutdown takes over at once).
    // The worker checks again after that long: an op a waiter left behind
    // starts at most about 2 kHandBack late.
    if (!stopping_ && helpers_ > 0) {
      cv_.wait_for(lock, kHandBack);
      continue;
    }
    if (!stopping_ && std::chrono::steady_clock::now() < help_ended_ + kHandBack) {
      cv_.wait_until(lock, help_ended_ + kHandBack);
      continue;
    }
    run_front(lock, /*on_worker=*/true);
  }
  idle_cv_.notify_all();
}

void SerialExecutor::shutdown(Timeout grace, const std::function<void()>& abort) {
  // A second caller waits for the first to finish, then finds it done.
  std::lock_guard shutdown_lock(shutdown_mu_);
  std::unique_lock lock(mu_);
  if (joined_) return;
  stopping_ = true;
  state_.fetch_or(kClosed, std::memory_order_relaxed);
  cv_.notify_all();
  Deadline deadline(grace);
  bool drained =
      idle_cv_.wait_until(lock, deadline.when(), [&] { return queue_.empty() && !busy(); });
  if (!drained) {
    COLLIE_LOG(kWarn) << what_ << ": shutting down with " << queue_.size() + (busy() ? 1 : 0)
                      << " collective(s) unfinished " << deadline.describe() << "; aborting them";
    if (!broken_error_) {
      broken_error_ = std::make_exception_ptr(BackendError(
          str_cat(what_, " was shut down with collectives still running ", deadline.describe())));
      broken_by_.clear();
    }
    lock.unlock();
    abort();
    lock.lock();
    // The worker fails what is still queued (the queue is broken now).
  }
  joined_ = true;
  lock.unlock();
  // No worker starts once stopping_ is set: the list is final.
  for (auto& worker : workers_)
    if (worker.joinable()) worker.join();
}

void SerialExecutor::abort(std::exception_ptr reason, const std::function<void()>& abort) {
  {
    std::lock_guard lock(mu_);
    if (!broken_error_) {
      broken_error_ = std::move(reason);
      broken_by_.clear();
      state_.fetch_or(kClosed, std::memory_order_relaxed);
    }
    cv_.notify_all();
  }
  abort();
}

bool SerialExecutor::broken() const {
  std::lock_guard lock(mu_);
  return broken_error_ != nullptr;
}

std::exception_ptr SerialExecutor::broken_error() const {
  std::lock_guard lock(mu_);
  return broken_error_;
}

uint64_t SerialExecutor::submitted() const {
  return state_.load(std::memory_order_acquire) >> kSeqShift;
}

}  // namespace collie
