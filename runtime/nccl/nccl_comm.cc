#include "collie/runtime/nccl/nccl_comm.h"

#include <thread>

#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/nccl/nccl_info.h"

namespace collie {

NcclFailure failure_of(ncclResult_t result) {
  return result == ncclRemoteError || result == ncclSystemError ? NcclFailure::kNetwork
                                                                : NcclFailure::kBackend;
}

NcclComm::NcclComm(int rank, int size, int device, std::string group_name)
    : rank_(rank), size_(size), device_(device), group_name_(std::move(group_name)) {}

std::string NcclComm::describe(ncclResult_t r, const char* op) const {
  // Called with mu_ held or before the communicator is shared.
  const char* last = comm_ ? ncclGetLastError(comm_) : "";
  return str_cat("nccl backend: ", op, " failed on rank ", rank_, " (cuda:", device_,
                 "): ", ncclGetErrorString(r), (last && *last ? str_cat(" (", last, ")") : ""),
                 "; NCCL ", nccl::version_string());
}

void NcclComm::init(const ncclUniqueId& id, const Deadline& deadline) {
  std::lock_guard lock(mu_);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
  if (r != ncclSuccess && r != ncclInProgress)
    throw BackendError(describe(r, "ncclCommInitRankConfig"));
  while (r == ncclInProgress) {
    if (deadline.expired()) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
      throw TimeoutError(str_cat("nccl backend: rank ", rank_, " of ", size_,
                                 ": communicator init did not complete ", deadline.describe(),
                                 "; some rank never joined (group '", group_name_, "')"));
    }
    std::this_thread::yield();
    ncclCommGetAsyncError(comm_, &r);
  }
  if (r != ncclSuccess) {
    const std::string why = describe(r, "ncclCommInitRankConfig");
    ncclCommAbort(comm_);
    comm_ = nullptr;
    throw BackendError(why);
  }
}

void NcclComm::settle_locked(ncclResult_t r, const char* op, const Deadline& deadline) {
  while (r == ncclInProgress) {
    if (deadline.expired()) {
      const std::string why = str_cat(op, " did not complete ", deadline.describe());
      abort_locked(why, NcclFailure::kTimeout);
      throw TimeoutError(str_cat("nccl backend rank ", rank_, ": ", why));
    }
    std::this_thread::yield();
    if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess) break;
  }
  if (r != ncclSuccess) {
    const std::string why = describe(r, op);
    abort_locked(why, failure_of(r));
    std::rethrow_exception(broken_error_locked());
  }
}

bool NcclComm::poll_async_error() {
  std::lock_guard lock(mu_);
  if (broken_.load() || comm_ == nullptr) return true;
  ncclResult_t async = ncclSuccess;
  ncclCommGetAsyncError(comm_, &async);
  if (async != ncclSuccess && async != ncclInProgress)
    abort_locked(describe(async, "an asynchronous operation"), failure_of(async));
  return broken_.load();
}

void NcclComm::abort(const std::string& reason, NcclFailure failure) {
  std::lock_guard lock(mu_);
  abort_locked(reason, failure);
}

void NcclComm::abort_locked(const std::string& reason, NcclFailure failure) {
  if (broken_.exchange(true)) return;
  error_ = reason;
  failure_ = failure;
  COLLIE_LOG(kError) << "aborting the NCCL communicator: " << reason;
  if (comm_ != nullptr) ncclCommAbort(comm_);
  comm_ = nullptr;
}

void NcclComm::finalize(bool drained, const Deadline& deadline) {
  std::lock_guard lock(mu_);
  if (comm_ == nullptr) return;
  ncclResult_t r = drained ? ncclCommFinalize(comm_) : ncclInternalError;
  while (r == ncclInProgress && !deadline.expired()) {
    std::this_thread::yield();
    ncclCommGetAsyncError(comm_, &r);
  }
  if (r == ncclSuccess)
    ncclCommDestroy(comm_);
  else
    ncclCommAbort(comm_);
  comm_ = nullptr;
  broken_ = true;
  if (error_.empty()) error_ = "the process group was destroyed";
}

std::exception_ptr NcclComm::broken_error() const {
  std::lock_guard lock(mu_);
  return broken_error_locked();
}

std::exception_ptr NcclComm::broken_error_locked() const {
  const std::string message =
      str_cat("nccl backend: the process group is broken and refuses new work: ",
              error_.empty() ? std::string("the communicator is not initialized") : error_);
  switch (failure_) {
    case NcclFailure::kTimeout: return std::make_exception_ptr(TimeoutError(message));
    case NcclFailure::kNetwork: return std::make_exception_ptr(NetworkError(message));
    case NcclFailure::kBackend: break;
  }
  return std::make_exception_ptr(BackendError(message));
}

}  // namespace collie
