#include "collie/runtime/torch/collie_work.h"

#include <c10/util/Exception.h>

#include "collie/base/deadline.h"
#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"

namespace collie::torch_adapter {

uint64_t next_completion_key() {
  static std::atomic<uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

void log_hook_error(const char* what) noexcept {
  try {
    COLLIE_LOG(kWarn) << "collie_torch: a torch hook raised (ignored): " << what;
  } catch (...) {
  }
}

std::exception_ptr as_torch_error(std::exception_ptr error) {
  if (!error) return error;
  try {
    std::rethrow_exception(error);
  } catch (const InvalidArgument&) {
    return error;  // a wrong call, not a failed collective
  } catch (const Error& e) {
    return std::make_exception_ptr(
        c10::DistBackendError(c10::SourceLocation{__func__, __FILE__, __LINE__}, e.what()));
  } catch (...) {
    return error;
  }
}

CollieWork::CollieWork(int rank, ::c10d::OpType type, const char* op,
                       std::vector<at::Tensor> outputs, std::weak_ptr<SerialExecutor> executor,
                       std::shared_ptr<const CompletionHooks> hooks)
    : Work(rank, type),
      op_(op),
      outputs_(std::move(outputs)),
      executor_(std::move(executor)),
      hooks_(std::move(hooks)) {}

void CollieWork::start() noexcept { started_ = std::chrono::steady_clock::now(); }

void CollieWork::complete(std::exception_ptr error) noexcept {
  const std::chrono::duration<float, std::milli> ran = std::chrono::steady_clock::now() - started_;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard lock(mutex_);
    if (completed_) return;
    if (!error) duration_ms_.store(ran.count(), std::memory_order_relaxed);
    completed_ = true;
    exception_ = error;
    future = future_;
  }
  cv_.notify_all();
  // After completed_ is set: torch's post-hook registers the key and then
  // asks isCompleted(), so a completion is seen by one or the other. Before
  // the future's callbacks, which may run for long (DDP's comm hooks).
  if (!error && hooks_ && !hooks_->empty()) {
    hooks_->run(key_, ran.count());
    for (uint64_t key : also_completed_) hooks_->run(key, ran.count());
  }
  if (future) settle(*future);
}

float CollieWork::getDuration() const {
  const float ms = duration_ms_.load(std::memory_order_relaxed);
  TORCH_CHECK(ms >= 0, "collie: getDuration() on ", op_, " #", ticket_, " of rank ", rank_,
              ", which has not completed successfully");
  return ms;
}

int CollieWork::sourceRank() const {
  if (!is_receive_from_any()) return Work::sourceRank();  // torch's error for other ops
  return source_rank_.load(std::memory_order_relaxed);
}

void CollieWork::set_queued(std::shared_ptr<collie::Work> queued) {
  std::lock_guard lock(mutex_);
  queued_ = std::move(queued);
}

void CollieWork::set_inner(std::shared_ptr<collie::Work> inner) {
  std::lock_guard lock(mutex_);
  inner_ = std::move(inner);
}

bool CollieWork::isCompleted() {
  if (!Work::isCompleted())
    if (auto in = inner()) in->is_completed();  // a poll: may complete this Work
  return Work::isCompleted();
}

bool CollieWork::wait(std::chrono::milliseconds timeout) {
  if (timeout == kNoTimeout) {
    // Running queued operations here could outlast a wait with a timeout.
    if (!Work::isCompleted()) {
      std::shared_ptr<collie::Work> queued;
      {
        std::lock_guard lock(mutex_);
        queued = queued_;
      }
      if (p2p_) {
        if (auto executor = executor_.lock()) executor->drain();
      } else if (queued) {
        try {
          queued->wait();  // runs it here, and what is queued before it
        } catch (...) {
          // Refused or failed: it completes this Work with the error.
        }
      }
    }
  }
  if (auto in = inner(); in && !Work::isCompleted()) {
    // Point-to-point: drive collie's Work; its completion completes this.
    try {
      in->wait(timeout == kNoTimeout ? collie::kUnsetTimeout : timeout);
    } catch (const collie::TimeoutError&) {
      if (timeout != kNoTimeout)
        throw c10::DistBackendError(
            c10::SourceLocation{__func__, __FILE__, __LINE__},
            str_cat("collie: Work.wait(timeout=", format_duration(timeout), ") on ", op_, " #",
                    ticket_, " of rank ", rank_, " timed out; the operation is still running"));
    } catch (...) {
      // The operation's own error: it completed this Work with it.
    }
  }
  std::unique_lock lock(mutex_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    throw c10::DistBackendError(
        c10::SourceLocation{__func__, __FILE__, __LINE__},
        str_cat("collie: Work.wait(timeout=", format_duration(timeout), ") on ", op_, " #", ticket_,
                " of rank ", rank_, " timed out; the operation is still running"));
  }
  if (exception_) std::rethrow_exception(as_torch_error(exception_));
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> CollieWork::getFuture() {
  std::unique_lock lock(mutex_);
  if (future_) return future_;
  future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
  auto future = future_;
  const bool completed = completed_;
  lock.unlock();
  if (completed) settle(*future);
  return future;
}

void CollieWork::settle(c10::ivalue::Future& future) {
  if (exception_)
    future.setError(as_torch_error(exception_));
  else
    future.markCompleted(c10::IValue(outputs_));
}

}  // namespace collie::torch_adapter
