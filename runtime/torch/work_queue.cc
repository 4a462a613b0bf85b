#include "collie/runtime/torch/work_queue.h"

#include <unistd.h>

#include <utility>

#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"

namespace collie::torch_adapter {

WorkQueue::WorkQueue(std::string what, OnCallsMet on_calls_met)
    : what_(std::move(what)),
      on_calls_met_(std::move(on_calls_met)),
      worker_([this] { run_worker(); }) {}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  worker_cv_.notify_one();
  worker_.join();
}

uint64_t WorkQueue::push_locked(Task task, bool reserved) {
  const uint64_t ticket = ++last_ticket_;
  queue_.push_back(Entry{ticket, std::move(task), reserved});
  if (!reserved) worker_cv_.notify_one();
  return ticket;
}

uint64_t WorkQueue::submit(const char* op, Task task) {
  std::unique_lock lock(mu_);
  check_caller_locked(lock, op);
  return push_locked(std::move(task), /*reserved=*/false);
}

int WorkQueue::this_thread_id() {
  // The kernel's id: Python's threading.get_native_id(), what ps and gdb show.
  static thread_local const int id = static_cast<int>(::gettid());
  return id;
}

int WorkQueue::check_caller_locked(std::unique_lock<std::mutex>& lock, const char* op) {
  const int self = this_thread_id();
  if (blocking_.thread == 0 || blocking_.thread == self) return self;
  const std::string message = str_cat(
      what_, ": ", op, " was called on thread ", self, " while ", blocking_.op, " (op #",
      blocking_.ticket, " of this group, a blocking call) was running on thread ", blocking_.thread,
      ". Two threads calling one group at once issue its operations in a different order on "
      "each rank, which mixes the ranks' data, so the group is broken and every later call on "
      "it fails. Call a group from one thread at a time (another thread may wait for its "
      "asynchronous operations), or give each thread a group of its own (new_group).");
  const bool first = calls_met_.empty();
  if (first) {
    calls_met_ = message;
    met_.store(true, std::memory_order_release);
  }
  lock.unlock();
  if (first) {
    COLLIE_LOG(kError) << message;
    if (on_calls_met_) on_calls_met_(message);
  }
  throw BackendError(message);
}

std::string WorkQueue::calls_met() const {
  if (!met_.load(std::memory_order_acquire)) return {};
  std::lock_guard lock(mu_);
  return calls_met_;
}

void WorkQueue::run_front_locked(std::unique_lock<std::mutex>& lock, bool on_worker) {
  Entry entry = std::move(queue_.front());
  queue_.pop_front();
  running_ = true;
  started_ = entry.ticket;
  ++(on_worker ? worker_runs_ : inline_runs_);
  lock.unlock();
  entry.task();
  // Destroy the task (and the tensors it holds) before the next one starts.
  entry.task = nullptr;
  lock.lock();
  running_ = false;
  finished_ = entry.ticket;
  idle_cv_.notify_all();
  // The worker may have gone to sleep while this thread ran the task.
  if (!on_worker && !queue_.empty() && !queue_.front().reserved) worker_cv_.notify_one();
}

void WorkQueue::finish_inline(uint64_t ticket) {
  std::lock_guard lock(mu_);
  blocking_ = Caller{};
  running_ = false;
  finished_ = ticket;
  idle_cv_.notify_all();
  if (!queue_.empty() && !queue_.front().reserved) worker_cv_.notify_one();
}

void WorkQueue::help_locked(std::unique_lock<std::mutex>& lock, uint64_t ticket, bool wait_for_it) {
  for (;;) {
    if (wait_for_it ? finished_ >= ticket : started_ >= ticket) return;
    if (!running_ && !queue_.empty()) {
      run_front_locked(lock, /*on_worker=*/false);
      continue;
    }
    idle_cv_.wait(lock);
  }
}

void WorkQueue::help_until(uint64_t ticket) {
  std::unique_lock lock(mu_);
  help_locked(lock, ticket, /*wait_for_it=*/false);
}

void WorkQueue::run_worker() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (!running_ && !queue_.empty() && !queue_.front().reserved) {
      run_front_locked(lock, /*on_worker=*/true);
      continue;
    }
    // A blocking call may still be running on its caller's thread: it needs
    // no worker.
    if (stopping_ && queue_.empty()) return;
    worker_cv_.wait(lock);
  }
}

void WorkQueue::drain() {
  std::unique_lock lock(mu_);
  help_locked(lock, last_ticket_, /*wait_for_it=*/true);
}

bool WorkQueue::wait_idle_until(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  return idle_cv_.wait_until(lock, deadline, [&] { return queue_.empty() && !running_; });
}

uint64_t WorkQueue::inline_runs() const {
  std::lock_guard lock(mu_);
  return inline_runs_;
}

uint64_t WorkQueue::worker_runs() const {
  std::lock_guard lock(mu_);
  return worker_runs_;
}

}  // namespace collie::torch_adapter
