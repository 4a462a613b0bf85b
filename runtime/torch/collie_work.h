// CollieWork: the c10d::Work of one CPU operation of BackendCollie.
//
// The operation runs on the cpu group's SerialExecutor
// (runtime/process_group/serial_executor.h); when it has run, complete()
// records the outcome once in c10d::Work's own fields (completed_,
// exception_, under its mutex_), wakes the waiters and completes the
// future. wait() without a timeout first waits for the executor's Work of
// the operation, which runs the queued operations on the waiting thread
// when the worker is not already at them (the executor's rule 3). The future is created on the
// first getFuture() (DDP asks for it on every gradient bucket, a plain all_reduce never does) and
// holds the operation's outputs as a list of tensors, as gloo's does.
//
// A failed operation's exception() is collie's own (NetworkError,
// TimeoutError, ...); wait() and the future raise it as
// torch.distributed.DistBackendError (a RuntimeError), as torch's own
// backends do, with collie's message.
//
// Completion hooks (torch 2.15's c10d::CompletionHook, which its
// FlightRecorderHook retires entries with): every Work has a completion key
// no other Work of the process ever has (getCompletionKey()), and complete()
// runs the backend's completion hooks with it and the operation's duration
// once, when the operation succeeded; a failed one runs nothing. The
// duration is the time from when the operation started running (its turn
// in the queue) to its end (getDuration()).
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>  // C10D_BACKEND_HAS_HOOKS (torch 2.15)
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "collie/runtime/process_group/serial_executor.h"
#include "collie/runtime/process_group/work.h"

namespace collie::torch_adapter {

// collie's exception as the c10 error torch raises for a failed collective:
// DistBackendError for collie::Error, anything else unchanged.
std::exception_ptr as_torch_error(std::exception_ptr error);

// A key for a Work's completion that no other Work of the process has had
// or will have (1, 2, ...).
uint64_t next_completion_key();

// A table of hooks keyed by torch's hook ids, which a thread runs while
// others add and remove hooks. run() calls each hook outside the table's
// lock (on a snapshot), as Hooks.hpp's contract asks: a hook may be
// unregistered meanwhile without a deadlock (torch's FlightRecorderHook
// unregisters holding the lock its hooks take), and a remove() that races a
// run() may see the removed hook called once more, as a hook that already
// started may still be running. A hook that throws is logged and skipped.
template <typename... Args>
class HookTable {
 public:
  using Hook = std::function<void(Args...)>;
  // False when `id` is already taken.
  bool add(int64_t id, Hook hook);
  // False when there is no hook `id`.
  bool remove(int64_t id);
  bool empty() const { return count_.load(std::memory_order_acquire) == 0; }
  void run(Args... args) const;

 private:
  using Hooks = std::vector<std::pair<int64_t, std::shared_ptr<const Hook>>>;
  mutable std::mutex mu_;
  std::shared_ptr<const Hooks> hooks_ = std::make_shared<Hooks>();
  std::atomic<size_t> count_{0};
};

// A completed operation's key and duration (torch's CompletionHookArgs).
using CompletionHooks = HookTable<uint64_t, std::optional<float>>;
using AbortHooks = HookTable<>;

class CollieWork final : public ::c10d::Work {
 public:
  // `op` is a string literal ("allreduce"). `executor`: the cpu group's,
  // which a point-to-point Work's wait() drains. `hooks`: the backend's
  // completion hooks (null: none).
  CollieWork(int rank, ::c10d::OpType type, const char* op, std::vector<at::Tensor> outputs,
             std::weak_ptr<SerialExecutor> executor,
             std::shared_ptr<const CompletionHooks> hooks = nullptr);

  // The operation starts running now (its duration is counted from here).
  void start() noexcept;
  // Records the outcome; only the first call counts. On success, runs the
  // completion hooks for this Work and for `also_completed` (the keys of the
  // Works of a coalescing block this one ran).
  void complete(std::exception_ptr error) noexcept;
  // The operation's own error, recorded where it runs: it fails this Work
  // (complete() is told it) without breaking the executor, unless collie
  // broke it already (a failed collective).
  void set_op_error(std::exception_ptr error) { op_error_ = std::move(error); }
  std::exception_ptr op_error() const { return op_error_; }
  // The executor's Work of a queued operation: wait() waits for it first.
  void set_queued(std::shared_ptr<collie::Work> queued);
  void set_also_completed(std::vector<uint64_t> keys) { also_completed_ = std::move(keys); }
  void set_ticket(uint64_t ticket) { ticket_ = ticket; }
  // recv from any source: the rank the message came from, set by the task
  // before complete() (torch reads it after wait()).
  void set_source_rank(int rank) { source_rank_.store(rank, std::memory_order_relaxed); }
  bool is_receive_from_any() const { return opType_ == ::c10d::OpType::RECVANYSOURCE; }

  // Point-to-point: the task only posts the operation; `inner` (collie's
  // Work of it) completes later, and completes this one through
  // CompletionWork::on_completed. wait() drives `inner`, isCompleted()
  // polls it.
  void set_inner(std::shared_ptr<collie::Work> inner);
  // Marks a point-to-point Work (before it is handed out): its wait() lets
  // everything issued before it be posted first (SerialExecutor::drain), so
  // that the sends a waiting rank issued after its receive are out.
  void set_p2p() { p2p_ = true; }
  bool isCompleted() override;

  int sourceRank() const override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // kNoTimeout (0) waits until the operation ends, which its own deadline
  // bounds; a positive timeout raises when it passes first (the operation
  // keeps running, as in torch).
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  // How long the operation ran, in ms, once it completed successfully.
  float getDuration() const override;
  uint64_t completion_key() const { return key_; }
#ifdef C10D_BACKEND_HAS_HOOKS
  uint64_t getCompletionKey() const override { return key_; }
#endif

 private:
  void settle(c10::ivalue::Future& future);

  const char* op_;
  const std::vector<at::Tensor> outputs_;
  const std::weak_ptr<SerialExecutor> executor_;
  const std::shared_ptr<const CompletionHooks> hooks_;
  const uint64_t key_ = next_completion_key();
  std::vector<uint64_t> also_completed_;
  std::chrono::steady_clock::time_point started_{};
  std::atomic<float> duration_ms_{-1};  // set by complete() on success
  uint64_t ticket_ = 0;
  std::atomic<int> source_rank_{-1};
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // guarded by mutex_
  bool p2p_ = false;
  std::shared_ptr<collie::Work> inner_;   // guarded by mutex_
  std::shared_ptr<collie::Work> queued_;  // guarded by mutex_
  // Written by the operation before the executor completes its Work, read
  // where that completion is seen.
  std::exception_ptr op_error_;
  std::shared_ptr<collie::Work> inner() {
    std::lock_guard lock(mutex_);
    return inner_;
  }
};

template <typename... Args>
bool HookTable<Args...>::add(int64_t id, Hook hook) {
  std::lock_guard lock(mu_);
  for (const auto& [i, h] : *hooks_)
    if (i == id) return false;
  auto hooks = std::make_shared<Hooks>(*hooks_);
  hooks->emplace_back(id, std::make_shared<const Hook>(std::move(hook)));
  hooks_ = std::move(hooks);
  count_.store(hooks_->size(), std::memory_order_release);
  return true;
}

template <typename... Args>
bool HookTable<Args...>::remove(int64_t id) {
  std::lock_guard lock(mu_);
  auto hooks = std::make_shared<Hooks>(*hooks_);
  const auto n = std::erase_if(*hooks, [id](const auto& h) { return h.first == id; });
  hooks_ = std::move(hooks);
  count_.store(hooks_->size(), std::memory_order_release);
  return n > 0;
}

void log_hook_error(const char* what) noexcept;

template <typename... Args>
void HookTable<Args...>::run(Args... args) const {
  std::shared_ptr<const Hooks> hooks;
  {
    std::lock_guard lock(mu_);
    hooks = hooks_;
  }
  for (const auto& [id, hook] : *hooks) {
    try {
      (*hook)(args...);
    } catch (const std::exception& e) {
      log_hook_error(e.what());
    } catch (...) {
      log_hook_error("an exception that is not a std::exception");
    }
  }
}

}  // namespace collie::torch_adapter
