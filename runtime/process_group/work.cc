#include "collie/runtime/process_group/work.h"

#include <sched.h>

#include <atomic>
#include <chrono>

#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"

namespace collie {

namespace {
class CompletedWork final : public Work {
 public:
  explicit CompletedWork(int source = -1) : source_(source) {}
  bool is_completed() const override { return true; }
  bool is_success() const override { return true; }
  void wait(Timeout) override {}
  std::exception_ptr exception() const override { return nullptr; }
  int source_rank() const override { return source_; }

 private:
  const int source_;
};

constexpr int kSharedSources = 1 << 16;
}  // namespace

std::shared_ptr<Work> completed_work() {
  // Owned by nobody (the aliasing constructor with an empty owner): it
  // lives as long as the program, and copies of the pointer touch no
  // reference count, which would be two atomic operations on every call.
  // Never destroyed: a copy may outlive static destruction (a Work kept by a
  // global, or by a thread still running at exit).
  static CompletedWork& work = *new CompletedWork;
  return std::shared_ptr<Work>(std::shared_ptr<Work>(), &work);
}

std::shared_ptr<Work> completed_work(int source) {
  if (source < 0 || source >= kSharedSources) return std::make_shared<CompletedWork>(source);
  // Made on first use, lock-free; a thread that loses the race frees its
  // copy. Never destroyed, like completed_work()'s.
  static auto* table = new std::atomic<CompletedWork*>[kSharedSources]();
  CompletedWork* w = table[source].load(std::memory_order_acquire);
  if (w == nullptr) {
    auto* made = new CompletedWork(source);
    if (table[source].compare_exchange_strong(w, made, std::memory_order_acq_rel)) {
      w = made;
    } else {
      delete made;
    }
  }
  return std::shared_ptr<Work>(std::shared_ptr<Work>(), w);
}

bool CompletionWork::is_completed() const { return completed_.load(std::memory_order_acquire); }

bool CompletionWork::is_success() const {
  std::lock_guard lock(mu_);
  return completed_ && !error_;
}

std::exception_ptr CompletionWork::exception() const {
  std::lock_guard lock(mu_);
  return error_;
}

void CompletionWork::wait(Timeout timeout) {
  // Works issued back to back complete one after another on the backend's
  // worker: a waiter that slept on each would be woken (a futex wake and two
  // context switches) once per Work, which cost more than a small
  // collective itself on 2 cores. So first, while the wait is not bounded by
  // its own timeout, the waiter runs queued operations itself (the helper:
  // the worker takes no new one meanwhile), up to and including this one;
  // otherwise, or while another thread runs one, it spins briefly, yielding
  // the core to that thread or a peer rank; then it sleeps.
  if (!completed_.load(std::memory_order_acquire)) {
    const std::shared_ptr<WorkHelper> helper =
        timeout == kUnsetTimeout ? helper_.lock() : std::shared_ptr<WorkHelper>();
    // Ends the help however the loop is left: an op's completion callback
    // may throw, and a helper left counted would keep the worker standing
    // by for good.
    struct Helping {
      WorkHelper* helper;
      const std::atomic<bool>& completed;
      ~Helping() {
        if (helper) helper->end_help(completed.load(std::memory_order_acquire));
      }
    };
    if (helper) helper->begin_help();
    Helping helping{helper.get(), completed_};
    auto spin_until = std::chrono::steady_clock::now() + kWaitSpin;
    while (!completed_.load(std::memory_order_acquire)) {
      if (helper && helper->help()) {
        spin_until = std::chrono::steady_clock::now() + kWaitSpin;
        continue;
      }
      if (std::chrono::steady_clock::now() >= spin_until) break;
      sched_yield();
    }
  }
  std::unique_lock lock(mu_);
  if (timeout == kUnsetTimeout) {
    // The backend bounds every operation by its own deadline and always
    // completes the work, so this wait is bounded too.
    cv_.wait(lock, [&] { return completed_.load(); });
  } else {
    Deadline deadline(timeout);
    if (!cv_.wait_until(lock, deadline.when(), [&] { return completed_.load(); }))
      throw TimeoutError(
          str_cat("Work::wait on ", description(), " timed out ", deadline.describe()));
  }
  if (error_) std::rethrow_exception(error_);
}

int CompletionWork::source_rank() const {
  std::lock_guard lock(mu_);
  return source_rank_;
}

void CompletionWork::set_source_rank(int rank) {
  std::lock_guard lock(mu_);
  source_rank_ = rank;
}

std::vector<CompletionWork::Callback> CompletionWork::complete(std::exception_ptr error) {
  std::vector<Callback> callbacks;
  {
    std::lock_guard lock(mu_);
    if (completed_) return callbacks;
    error_ = std::move(error);
    completed_.store(true, std::memory_order_release);
    callbacks.swap(callbacks_);
  }
  cv_.notify_all();
  return callbacks;
}

void CompletionWork::run_callbacks(std::vector<Callback> callbacks) const {
  // A callback that throws cannot undo the completion, nor may it skip the
  // callbacks after it or unwind the executor's worker: it is logged.
  // error_ is set once, before completed_, and never changes after.
  for (auto& callback : callbacks) {
    try {
      callback(error_);
    } catch (const std::exception& e) {
      COLLIE_LOG(kError) << description() << ": a completion callback threw: " << e.what();
    } catch (...) {
      COLLIE_LOG(kError) << description() << ": a completion callback threw a non-exception";
    }
  }
}

void CompletionWork::on_completed(Callback callback) {
  {
    std::lock_guard lock(mu_);
    if (!completed_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback(error_);
}

}  // namespace collie
