#include "runtime/torch/work_queue.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/base/error.h"
#include "runtime/base/str_cat.h"

namespace collie {
namespace {

UniqueFd checked_fd(int fd, const char* call) {
  if (fd < 0) throw Error(str_cat("WorkQueue: ", call, " failed: ", std::strerror(errno)));
  return UniqueFd(fd);
}

// Reads (and so clears) an eventfd or timerfd; false when it was not readable.
bool clear(int fd) {
  uint64_t value;
  return ::read(fd, &value, sizeof value) == static_cast<ssize_t>(sizeof value);
}

}  // namespace

WorkQueue::WorkQueue(std::chrono::microseconds inline_grace)
    : inline_grace_(inline_grace),
      wake_fd_(checked_fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), "eventfd")),
      timer_fd_(checked_fd(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC),
                           "timerfd_create")),
      worker_([this] { run_worker(); }) {}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    wake_worker_locked();
  }
  worker_.join();
}

void WorkQueue::arm_timer_locked(Clock::time_point now) {
  if (timer_armed_) return;  // it fires no later than the head is due
  const auto delay = std::chrono::duration_cast<std::chrono::nanoseconds>(queue_.front().due - now);
  itimerspec spec{};
  // A zero it_value would disarm: at least 1 ns.
  const int64_t ns = std::max<int64_t>(delay.count(), 1);
  spec.it_value.tv_sec = ns / 1000000000;
  spec.it_value.tv_nsec = ns % 1000000000;
  ::timerfd_settime(timer_fd_.get(), 0, &spec, nullptr);
  timer_armed_ = true;
}

void WorkQueue::wake_worker_locked() {
  if (!worker_sleeping_) return;  // it looks at the queue before it sleeps
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof one);
}

uint64_t WorkQueue::push(Task task) {
  std::lock_guard lock(mu_);
  const uint64_t ticket = ++last_ticket_;
  const auto now = Clock::now();
  if (queue_.empty() && !running_ && inline_grace_.count() > 0) {
    // Idle: give the caller inline_grace_ to come and run it itself. A timer
    // armed for an earlier operation (that a waiter then ran) is left to
    // fire: the worker re-arms it for this one then, which keeps the timer's
    // system calls off a stream of blocking calls.
    queue_.push_back(Entry{ticket, std::move(task), now + inline_grace_});
    arm_timer_locked(now);
  } else {
    // Its caller is not waiting for each operation in turn: nothing queued
    // waits out a grace period any more.
    if (!queue_.empty()) queue_.front().due = now;
    queue_.push_back(Entry{ticket, std::move(task), now});
    wake_worker_locked();
  }
  return ticket;
}

bool WorkQueue::run_inline(uint64_t ticket) {
  std::unique_lock lock(mu_);
  if (running_ || queue_.empty() || queue_.front().ticket != ticket) return false;
  Task task = std::move(queue_.front().task);
  queue_.pop_front();
  ++inline_runs_;
  run_unlocked(lock, task);
  return true;
}

void WorkQueue::expedite(uint64_t ticket) {
  std::lock_guard lock(mu_);
  for (auto& entry : queue_) {
    if (entry.ticket == ticket) {
      entry.due = Clock::time_point::min();
      wake_worker_locked();
      return;
    }
  }
}

void WorkQueue::run_unlocked(std::unique_lock<std::mutex>& lock, Task& task) {
  running_ = true;
  lock.unlock();
  task();
  // Destroy the task (and the tensors it holds) before the next one starts.
  task = nullptr;
  lock.lock();
  running_ = false;
  // Whatever was queued meanwhile was due at once (see push).
  if (!queue_.empty()) wake_worker_locked();
  idle_cv_.notify_all();
}

void WorkQueue::run_worker() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (!running_ && !queue_.empty() && (stopping_ || Clock::now() >= queue_.front().due)) {
      Task task = std::move(queue_.front().task);
      queue_.pop_front();
      ++worker_runs_;
      run_unlocked(lock, task);
      continue;
    }
    if (stopping_ && queue_.empty() && !running_) return;
    if (!running_ && !queue_.empty()) arm_timer_locked(Clock::now());  // the head is not due yet
    // Sleep until woken or the timer fires. Both fds keep their state until
    // read, so a wake between unlock and poll is not lost.
    worker_sleeping_ = true;
    lock.unlock();
    pollfd fds[2] = {{wake_fd_.get(), POLLIN, 0}, {timer_fd_.get(), POLLIN, 0}};
    ::poll(fds, 2, -1);
    clear(wake_fd_.get());
    const bool expired = clear(timer_fd_.get());
    lock.lock();
    worker_sleeping_ = false;
    if (expired) timer_armed_ = false;
  }
}

void WorkQueue::drain() {
  std::unique_lock lock(mu_);
  for (auto& entry : queue_) entry.due = Clock::time_point::min();
  wake_worker_locked();
  idle_cv_.wait(lock, [&] { return queue_.empty() && !running_; });
}

uint64_t WorkQueue::inline_runs() const {
  std::lock_guard lock(mu_);
  return inline_runs_;
}

uint64_t WorkQueue::worker_runs() const {
  std::lock_guard lock(mu_);
  return worker_runs_;
}

}  // namespace collie
