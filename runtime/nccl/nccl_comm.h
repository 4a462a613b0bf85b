// NcclComm: one NCCL communicator and its lifecycle (init, abort, finalize),
// shared by a process group, its Works and its watchdog (a Work may outlive
// the group). Internal to the nccl layer: it includes nccl.h.
//
// The communicator handle is guarded by one mutex that every NCCL call on it
// holds (with_comm()), and so do abort() and finalize(). NCCL communicators
// are not thread-safe, and without the lock a launch on the caller's thread
// could read the handle while the watchdog aborts it and resets it to null,
// handing NCCL a freed communicator. With it, a launch either runs entirely
// before the abort or finds the group broken and throws.
#pragma once

#include <nccl.h>

#include <atomic>
#include <exception>
#include <mutex>
#include <string>

#include "collie/base/deadline.h"

namespace collie {

// Which collie error a broken group raises: a hung peer (the deadline
// passed) is a TimeoutError, a dead or unreachable one a NetworkError,
// anything else (a mismatch, a CUDA error, an abort) a BackendError, as on
// the cpu backend.
enum class NcclFailure { kBackend, kTimeout, kNetwork };

// The failure an NCCL result means: ncclRemoteError and ncclSystemError are
// a peer or the network going away.
NcclFailure failure_of(ncclResult_t result);

class NcclComm {
 public:
  NcclComm(int rank, int size, int device, std::string group_name);
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  const std::string& group_name() const { return group_name_; }

  // Collective: joins the communicator of `id` as a non-blocking one, so
  // that a rank that never comes makes init time out instead of hanging.
  // Throws TimeoutError naming the group, or BackendError.
  void init(const ncclUniqueId& id, const Deadline& deadline);

  // Runs fn(comm) holding the communicator's lock; throws the group's error
  // when it is broken. Every NCCL call on the communicator goes through here
  // (or through the watchdog's async_error()).
  template <typename Fn>
  decltype(auto) with_comm(Fn&& fn) {
    std::lock_guard lock(mu_);
    if (broken_.load() || comm_ == nullptr) std::rethrow_exception(broken_error_locked());
    return fn(comm_);
  }

  // Inside with_comm(): turns an NCCL result into success or an error. With a
  // non-blocking communicator a call may return ncclInProgress: poll until it
  // settles, within `deadline`. On failure aborts the communicator (the lock
  // is held) and throws the matching collie error.
  void settle_locked(ncclResult_t r, const char* op, const Deadline& deadline);

  // ncclCommGetAsyncError under the lock: on an error, aborts the
  // communicator with NCCL's description. Returns whether the group is broken.
  bool poll_async_error();

  // Aborts once (ncclCommAbort, never ncclCommDestroy, which can block
  // forever on a dead peer): later callers see the first reason.
  void abort(const std::string& reason, NcclFailure failure = NcclFailure::kBackend);
  // Finalizes (ncclCommFinalize + ncclCommDestroy) when `drained`, else or
  // when finalizing does not finish by `deadline`, aborts. The group is
  // broken afterwards. Idempotent.
  void finalize(bool drained, const Deadline& deadline);

  bool broken() const { return broken_.load(); }
  // The typed error every refused call and failed Work rethrows.
  std::exception_ptr broken_error() const;
  // "nccl backend: ncclAllReduce failed on rank 1 (cuda:1): <NCCL's words>".
  std::string describe(ncclResult_t r, const char* op) const;

 private:
  void abort_locked(const std::string& reason, NcclFailure failure);
  std::exception_ptr broken_error_locked() const;

  const int rank_;
  const int size_;
  const int device_;
  const std::string group_name_;
  mutable std::mutex mu_;  // guards comm_, error_, failure_ and every NCCL call
  ncclComm_t comm_ = nullptr;
  std::atomic<bool> broken_{false};
  std::string error_;  // why the group broke
  NcclFailure failure_ = NcclFailure::kBackend;
};

}  // namespace collie
