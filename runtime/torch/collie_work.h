// CollieWork: the c10d::Work of one CPU operation of BackendCollie.
//
// Whoever runs the operation (the queue's worker, or a thread that waits)
// calls complete() once, which records the outcome in c10d::Work's own
// fields (completed_, exception_, under its mutex_), wakes the waiters and
// completes the future. wait() without a timeout first runs queued
// operations on the waiting thread (WorkQueue::help_until) when the worker
// is not already at them. The future is created on the first getFuture()
// (DDP asks for it on every gradient bucket, a plain all_reduce never does)
// and holds the operation's outputs as a list of tensors, as gloo's does.
//
// A failed operation's exception() is collie's own (NetworkError,
// TimeoutError, ...); wait() and the future raise it as
// torch.distributed.DistBackendError (a RuntimeError), as torch's own
// backends do, with collie's message.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <vector>

#include "runtime/torch/work_queue.h"

namespace collie::torch_adapter {

// collie's exception as the c10 error torch raises for a failed collective:
// DistBackendError for collie::Error, anything else unchanged.
std::exception_ptr as_torch_error(std::exception_ptr error);

class CollieWork final : public ::c10d::Work {
 public:
  // `op` is a string literal ("allreduce"). `queue` null: a Work completed
  // before it is handed out (a blocking call).
  CollieWork(int rank, ::c10d::OpType type, const char* op, std::vector<at::Tensor> outputs,
             std::weak_ptr<WorkQueue> queue);

  // Records the outcome; called once.
  void complete(std::exception_ptr error) noexcept;
  void set_ticket(uint64_t ticket) { ticket_ = ticket; }
  // recv from any source: the rank the message came from, set by the task
  // before complete() (torch reads it after wait()).
  void set_source_rank(int rank) { source_rank_.store(rank, std::memory_order_relaxed); }
  bool is_receive_from_any() const { return opType_ == ::c10d::OpType::RECVANYSOURCE; }

  int sourceRank() const override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // kNoTimeout (0) waits until the operation ends, which its own deadline
  // bounds; a positive timeout raises when it passes first (the operation
  // keeps running, as in torch).
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  void settle(c10::ivalue::Future& future);

  const char* op_;
  const std::vector<at::Tensor> outputs_;
  const std::weak_ptr<WorkQueue> queue_;
  uint64_t ticket_ = 0;
  std::atomic<int> source_rank_{-1};
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // guarded by mutex_
};

}  // namespace collie::torch_adapter
