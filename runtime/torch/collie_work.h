// CollieWork: the c10d::Work of one queued operation of ProcessGroupCollie.
//
// The task the process group queues calls run(), which records the outcome,
// wakes the waiters and completes the future. wait() without a timeout first
// offers to run the task on the waiting thread (WorkQueue::run_inline); when
// it is not next in line, or something is running, it waits for whoever runs
// it. The future is created on the first getFuture() (DDP asks for it on
// every gradient bucket, a plain all_reduce never does) and holds the
// operation's outputs as a list of tensors, as ProcessGroupGloo's does; on
// failure it holds collie's exception, so `fut.wait()` raises a
// RuntimeError carrying collie's message.
//
// Header-only, for the same reason as torch_store.h.
#pragma once

#include <ATen/core/grad_mode.h>
#include <ATen/core/ivalue.h>
#include <atomic>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/deadline.h"
#include "runtime/base/error.h"
#include "runtime/base/str_cat.h"
#include "runtime/torch/work_queue.h"

namespace collie {

class CollieWork final : public ::c10d::Work {
 public:
  // `op` is a string literal ("allreduce"); `body` calls collie and
  // finishes the outputs, on whichever thread runs the work.
  CollieWork(int rank, ::c10d::OpType type, const char* op, std::vector<at::Tensor> outputs,
             std::weak_ptr<WorkQueue> queue, std::function<void()> body)
      : Work(rank, type),
        op_(op),
        outputs_(std::move(outputs)),
        queue_(std::move(queue)),
        body_(std::move(body)) {}

  // Called once, by the queue's task.
  void run() noexcept {
    std::exception_ptr error;
    try {
      // The copies into and out of staging buffers are no part of any
      // autograd graph (and a leaf that requires grad refuses in-place ones).
      at::NoGradGuard no_grad;
      body_();
    } catch (...) {
      error = std::current_exception();
    }
    body_ = nullptr;  // releases the staging buffers now
    c10::intrusive_ptr<c10::ivalue::Future> future;
    {
      std::lock_guard lock(mutex_);
      completed_ = true;
      exception_ = error;
      future = future_;
    }
    cv_.notify_all();
    if (future) complete(*future);
  }

  void set_ticket(uint64_t ticket) { ticket_ = ticket; }

  // recv and recvAnysource: the rank the message came from, written by the
  // body once it has arrived (torch reads it after wait()).
  void set_source(std::shared_ptr<std::atomic<int>> source) { source_ = std::move(source); }
  int sourceRank() const override {
    if (!source_) return Work::sourceRank();  // torch's error for other ops
    return source_->load();
  }

  bool isCompleted() override {
    std::lock_guard lock(mutex_);
    return completed_;
  }

  bool isSuccess() const override {
    std::lock_guard lock(mutex_);
    return completed_ && !exception_;
  }

  std::exception_ptr exception() const override {
    std::lock_guard lock(mutex_);
    return exception_;
  }

  std::vector<at::Tensor> result() override { return outputs_; }

  // c10d's kNoTimeout (0) waits until the operation ends, which its own
  // deadline bounds; a positive timeout throws TimeoutError when it passes
  // first (the operation keeps running, as in torch).
  bool wait(std::chrono::milliseconds timeout) override {
    if (!isCompleted()) {
      if (auto queue = queue_.lock()) {
        // Running it here could outlast a wait with a timeout.
        if (timeout != kNoTimeout || !queue->run_inline(ticket_)) queue->expedite(ticket_);
      }
    }
    std::unique_lock lock(mutex_);
    if (timeout == kNoTimeout) {
      cv_.wait(lock, [&] { return completed_; });
    } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
      throw TimeoutError(str_cat("collie: Work.wait(timeout=", format_duration(timeout), ") on ",
                                 op_, " #", ticket_, " of rank ", rank_,
                                 " timed out; the operation is still running"));
    }
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

  // Whoever waits on the future does not call wait(), so the operation is
  // handed to the worker at once.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    std::unique_lock lock(mutex_);
    if (future_) return future_;
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
    auto future = future_;
    const bool completed = completed_;
    lock.unlock();
    if (completed) {
      complete(*future);
    } else if (auto queue = queue_.lock()) {
      queue->expedite(ticket_);
    }
    return future;
  }

 private:
  void complete(c10::ivalue::Future& future) {
    if (exception_)
      future.setError(exception_);
    else
      future.markCompleted(c10::IValue(outputs_));
  }

  const char* op_;
  const std::vector<at::Tensor> outputs_;
  const std::weak_ptr<WorkQueue> queue_;
  std::function<void()> body_;
  uint64_t ticket_ = 0;
  std::shared_ptr<std::atomic<int>> source_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // guarded by mutex_
};

}  // namespace collie
