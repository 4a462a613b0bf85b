#include "runtime/nccl/nccl_process_group.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/base/check.h"
#include "runtime/base/error.h"
#include "runtime/base/logging.h"
#include "runtime/base/str_cat.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/process_group/collective_checks.h"

namespace collie {
namespace {

constexpr auto kWatchdogPeriod = std::chrono::milliseconds(100);

ncclDataType_t to_nccl(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kUInt8: return ncclUint8;
  }
  throw InvalidArgument(str_cat("nccl backend: unsupported dtype ", static_cast<int>(dtype)));
}

ncclRedOp_t to_nccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kProduct: return ncclProd;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
  }
  throw InvalidArgument(str_cat("nccl backend: unsupported reduce op ", static_cast<int>(op)));
}

Timeout default_timeout(Timeout requested) {
  if (requested != kUnsetTimeout) return requested;
  if (const char* env = std::getenv("COLLIE_NCCL_TIMEOUT")) {
    char* end = nullptr;
    double seconds = std::strtod(env, &end);
    if (end == env || *end != '\0' || seconds <= 0)
      throw InvalidArgument(
          str_cat("COLLIE_NCCL_TIMEOUT='", env, "' is not a positive number of seconds"));
    return Timeout(static_cast<int64_t>(seconds * 1000));
  }
  return kDefaultTimeout;
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr &&
         (std::strcmp(v, "1") == 0 || std::strcmp(v, "true") == 0 || std::strcmp(v, "True") == 0);
}

}  // namespace

std::string NcclProcessGroup::nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  return str_cat(v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

// State shared by the group and its Works (a Work may outlive the group).
struct NcclShared {
  int rank = 0;
  int size = 0;
  int device = 0;
  ncclComm_t comm = nullptr;
  std::atomic<bool> broken{false};
  std::mutex mu;      // guards error and the communicator's abort
  std::string error;  // why the group broke

  std::string describe_nccl(ncclResult_t r, const char* op) {
    const char* last = comm ? ncclGetLastError(comm) : "";
    return str_cat("nccl backend: ", op, " failed on rank ", rank, " (cuda:", device,
                   "): ", ncclGetErrorString(r), (last && *last ? str_cat(" (", last, ")") : ""),
                   "; NCCL ", NcclProcessGroup::nccl_version());
  }

  // Aborts once: later callers see the first reason.
  void abort(const std::string& reason) {
    std::lock_guard lock(mu);
    if (broken.exchange(true)) return;
    error = reason;
    COLLIE_LOG(kError) << "aborting the NCCL communicator: " << reason;
    if (comm != nullptr) ncclCommAbort(comm);
    comm = nullptr;
  }

  std::string broken_message() {
    std::lock_guard lock(mu);
    return str_cat("nccl backend: the process group is broken and refuses new work: ", error);
  }
};

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclShared> shared, cudaEvent_t done, Deadline deadline,
           std::string description, bool blocking)
      : shared_(std::move(shared)),
        done_(done),
        deadline_(deadline),
        description_(std::move(description)),
        blocking_(blocking) {}
  ~NcclWork() override {
    if (done_ != nullptr) cudaEventDestroy(done_);
  }

  const std::string& description() const { return description_; }
  const Deadline& deadline() const { return deadline_; }

  bool is_completed() const override { return failed() || event_done(); }
  bool is_success() const override { return !failed() && event_done(); }
  std::exception_ptr exception() const override {
    std::lock_guard lock(mu_);
    return failure_.empty() ? nullptr : std::make_exception_ptr(BackendError(failure_));
  }

  void fail(const std::string& why) {
    std::lock_guard lock(mu_);
    if (failure_.empty()) failure_ = str_cat(description_, ": ", why);
  }

  void wait(Timeout timeout) override {
    throw_if_failed();
    // Order the caller's current stream after the collective: the host goes on.
    auto caller = static_cast<cudaStream_t>(cuda::current_stream());
    cuda::check(cudaStreamWaitEvent(caller, done_, 0), "cudaStreamWaitEvent");
    if (!blocking_) return;
    Deadline own(timeout == kUnsetTimeout ? deadline_.remaining() : timeout);
    while (!event_done()) {
      throw_if_failed();
      if (shared_->broken)
        throw BackendError(str_cat(description_, ": ", shared_->broken_message()));
      if (deadline_.expired()) {
        std::string why = str_cat(description_, " timed out ", deadline_.describe());
        shared_->abort(why);
        throw TimeoutError(str_cat("nccl backend rank ", shared_->rank, ": ", why));
      }
      if (own.expired())
        throw TimeoutError(str_cat("Work::wait on ", description_, " timed out ", own.describe()));
      std::this_thread::yield();
    }
  }

 private:
  bool failed() const {
    std::lock_guard lock(mu_);
    return !failure_.empty();
  }
  bool event_done() const {
    cudaError_t e = cudaEventQuery(done_);
    if (e == cudaErrorNotReady) return false;
    if (e != cudaSuccess) {
      const_cast<NcclWork*>(this)->fail(str_cat("cudaEventQuery: ", cudaGetErrorString(e)));
      return false;
    }
    return true;
  }
  void throw_if_failed() const {
    std::lock_guard lock(mu_);
    if (!failure_.empty()) throw BackendError(failure_);
  }

  std::shared_ptr<NcclShared> shared_;
  cudaEvent_t done_;
  Deadline deadline_;
  std::string description_;
  bool blocking_;
  mutable std::mutex mu_;
  std::string failure_;
};

struct NcclProcessGroup::Impl {
  std::shared_ptr<NcclShared> shared = std::make_shared<NcclShared>();
  NcclOptions options;
  Timeout timeout{};
  bool blocking_wait = false;
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr;  // recorded on the caller's stream at each launch
  float* barrier_buffer = nullptr;
  uint64_t seq = 0;
  std::mutex launch_mu;  // NCCL calls on one communicator are serialised

  std::mutex pending_mu;
  std::condition_variable stop_cv;
  bool stopping = false;
  std::vector<std::shared_ptr<NcclWork>> pending;
  std::thread watchdog;

  // With a non-blocking communicator an NCCL call may return ncclInProgress:
  // poll the async error until the operation settled, within the deadline.
  void settle(ncclResult_t r, const char* op, const Deadline& deadline) {
    while (r == ncclInProgress) {
      if (deadline.expired()) {
        std::string why = str_cat(op, " did not complete ", deadline.describe());
        shared->abort(why);
        throw TimeoutError(str_cat("nccl backend rank ", shared->rank, ": ", why));
      }
      std::this_thread::yield();
      if (ncclCommGetAsyncError(shared->comm, &r) != ncclSuccess) break;
    }
    if (r != ncclSuccess) {
      std::string why = shared->describe_nccl(r, op);
      shared->abort(why);
      throw BackendError(why);
    }
  }

  void watchdog_loop() {
    cudaSetDevice(shared->device);
    std::unique_lock lock(pending_mu);
    while (!stopping) {
      stop_cv.wait_for(lock, kWatchdogPeriod);
      if (stopping || shared->broken) break;
      ncclResult_t async = ncclSuccess;
      {
        std::lock_guard comm_lock(shared->mu);
        if (shared->comm != nullptr) ncclCommGetAsyncError(shared->comm, &async);
      }
      if (async != ncclSuccess && async != ncclInProgress) {
        shared->abort(shared->describe_nccl(async, "an asynchronous operation"));
        break;
      }
      std::erase_if(pending, [](const auto& w) { return w->is_completed(); });
      for (const auto& w : pending) {
        if (w->deadline().expired()) {
          shared->abort(str_cat(w->description(), " timed out ", w->deadline().describe(),
                                " (watchdog; a peer may have died or hung)"));
          break;
        }
      }
    }
    // Broken: fail whatever is still pending so that waiters stop waiting.
    if (shared->broken) {
      std::string why = shared->broken_message();
      for (const auto& w : pending) w->fail(why);
      pending.clear();
    }
  }

  // Common path of every collective: checks, stream ordering, launch, Work.
  template <typename Launch>
  std::shared_ptr<Work> run(const std::string& what, Timeout timeout, Launch&& launch,
                            bool synchronize = false) {
    if (shared->broken) throw BackendError(shared->broken_message());
    Deadline deadline(resolve_timeout(timeout, this->timeout));
    std::lock_guard lock(launch_mu);
    cuda::check(cudaSetDevice(shared->device), "cudaSetDevice");
    auto caller = static_cast<cudaStream_t>(cuda::current_stream());
    cuda::check(cudaEventRecord(ready, caller), "cudaEventRecord(caller stream)");
    cuda::check(cudaStreamWaitEvent(stream, ready, 0), "cudaStreamWaitEvent(nccl stream)");
    const std::string description = str_cat(what, " #", ++seq, " on rank ", shared->rank);
    launch(deadline, description.c_str());
    cudaEvent_t done = nullptr;
    cuda::check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    cuda::check(cudaEventRecord(done, stream), "cudaEventRecord(nccl stream)");
    auto work = std::make_shared<NcclWork>(shared, done, deadline, description,
                                           blocking_wait || synchronize);
    {
      std::lock_guard plock(pending_mu);
      pending.push_back(work);
    }
    if (synchronize) work->wait(kUnsetTimeout);
    return work;
  }

  CallSite site(std::string_view op) const {
    return CallSite{op, shared->rank, options.group_name, "nccl"};
  }

  // The shared checks (runtime/process_group/collective_checks.h), then what
  // only NCCL needs: the buffer is on this rank's device and really is device
  // memory.
  void check_tensor(const CallSite& where, std::string_view name, const TensorView& t) {
    collie::check_tensor(where, name, t, DeviceType::kCUDA);
    if (t.device.index != shared->device)
      throw InvalidArgument(str_cat(where.op, " on rank ", shared->rank, ": ", name, " is on ",
                                    t.device,
                                    " but this rank's communicator is on cuda:", shared->device));
    if (t.count == 0) return;
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, t.data) != cudaSuccess ||
        (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)) {
      cudaGetLastError();
      throw InvalidArgument(str_cat(where.op, " on rank ", shared->rank, ": ", name, " pointer ",
                                    t.data, " is not CUDA device memory (it is labelled ", t.device,
                                    ")"));
    }
  }
};

NcclProcessGroup::NcclProcessGroup(int rank, int size, std::unique_ptr<Impl> impl)
    : ProcessGroup(rank, size), impl_(std::move(impl)) {}

std::shared_ptr<NcclProcessGroup> NcclProcessGroup::create(std::shared_ptr<Store> store, int rank,
                                                           int size, const NcclOptions& options) {
  COLLIE_ARG_CHECK(store != nullptr, "nccl backend needs a store");
  COLLIE_ARG_CHECK(size >= 1 && rank >= 0 && rank < size, "nccl backend: rank ", rank,
                   " is not in a world of size ", size);
  const int devices = cuda::device_count();
  if (devices == 0)
    throw BackendError(str_cat("nccl backend: no CUDA device on rank ", rank, " (",
                               cuda::no_device_reason(), "); use backend \"socket\" or \"auto\""));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->timeout = default_timeout(options.timeout);
  impl->blocking_wait = options.blocking_wait || env_flag("COLLIE_NCCL_BLOCKING_WAIT");
  int device = options.device;
  if (device < 0) {
    const char* local = std::getenv("LOCAL_RANK");
    device = local ? std::atoi(local) : rank % devices;
  }
  COLLIE_ARG_CHECK(device >= 0 && device < devices, "nccl backend: rank ", rank,
                   " asked for cuda:", device, " but ", devices, " device(s) are visible");
  auto& shared = *impl->shared;
  shared.rank = rank;
  shared.size = size;
  shared.device = device;
  cuda::set_device(device);

  // Rank 0 makes the unique id and publishes it; the others read it.
  const std::string key = options.group_name + "/nccl_unique_id";
  ncclUniqueId id;
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) throw BackendError(shared.describe_nccl(r, "ncclGetUniqueId"));
    store->set(key, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&id), sizeof id));
  } else {
    Bytes bytes = store->get(key);
    if (bytes.size() != sizeof id)
      throw StoreError(str_cat("nccl backend: store key '", key, "' holds ", bytes.size(),
                               " bytes, expected an ncclUniqueId of ", sizeof id));
    std::memcpy(&id, bytes.data(), sizeof id);
  }

  // A non-blocking communicator lets a missing rank time out instead of
  // hanging init forever.
  Deadline deadline(impl->timeout);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&shared.comm, size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress)
    throw BackendError(shared.describe_nccl(r, "ncclCommInitRankConfig"));
  while (r == ncclInProgress) {
    if (deadline.expired()) {
      ncclCommAbort(shared.comm);
      shared.comm = nullptr;
      throw TimeoutError(str_cat("nccl backend: rank ", rank, " of ", size,
                                 ": communicator init did not complete ", deadline.describe(),
                                 "; some rank never joined (group '", options.group_name, "')"));
    }
    std::this_thread::yield();
    ncclCommGetAsyncError(shared.comm, &r);
  }
  if (r != ncclSuccess) {
    std::string why = shared.describe_nccl(r, "ncclCommInitRankConfig");
    ncclCommAbort(shared.comm);
    shared.comm = nullptr;
    throw BackendError(why);
  }

  cuda::check(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cuda::check(cudaEventCreateWithFlags(&impl->ready, cudaEventDisableTiming), "cudaEventCreate");
  cuda::check(cudaMalloc(&impl->barrier_buffer, sizeof(float)), "cudaMalloc(barrier)");
  cuda::check(cudaMemset(impl->barrier_buffer, 0, sizeof(float)), "cudaMemset(barrier)");
  Impl* raw = impl.get();
  impl->watchdog = std::thread([raw] { raw->watchdog_loop(); });
  COLLIE_LOG(kInfo) << "nccl backend: rank " << rank << "/" << size << " on cuda:" << device
                    << ", NCCL " << nccl_version();
  return std::shared_ptr<NcclProcessGroup>(new NcclProcessGroup(rank, size, std::move(impl)));
}

void NcclProcessGroup::shutdown(Timeout timeout) {
  auto& impl = *impl_;
  {
    std::lock_guard lock(impl.pending_mu);
    impl.stopping = true;
  }
  impl.stop_cv.notify_all();
  if (impl.watchdog.joinable()) impl.watchdog.join();
  cudaSetDevice(impl.shared->device);
  // Let the issued work finish (bounded), then finalize; a communicator that
  // cannot finish in time is aborted, never destroyed blocking.
  Deadline deadline(resolve_timeout(timeout, impl.timeout));
  bool drained = false;
  while (!impl.shared->broken && !deadline.expired()) {
    cudaError_t e = cudaStreamQuery(impl.stream);
    if (e == cudaSuccess) {
      drained = true;
      break;
    }
    if (e != cudaErrorNotReady) break;
    std::this_thread::yield();
  }
  {
    std::lock_guard lock(impl.shared->mu);
    ncclComm_t comm = impl.shared->comm;
    if (comm != nullptr) {
      ncclResult_t r = drained ? ncclCommFinalize(comm) : ncclInternalError;
      while (r == ncclInProgress && !deadline.expired()) {
        std::this_thread::yield();
        ncclCommGetAsyncError(comm, &r);
      }
      if (r == ncclSuccess)
        ncclCommDestroy(comm);
      else
        ncclCommAbort(comm);
      impl.shared->comm = nullptr;
      impl.shared->broken = true;
      if (impl.shared->error.empty()) impl.shared->error = "the process group was destroyed";
    }
  }
}

NcclProcessGroup::~NcclProcessGroup() {
  auto& impl = *impl_;
  shutdown(std::min<Timeout>(impl.timeout, std::chrono::seconds(30)));
  if (impl.barrier_buffer) cudaFree(impl.barrier_buffer);
  if (impl.ready) cudaEventDestroy(impl.ready);
  if (impl.stream) cudaStreamDestroy(impl.stream);
}

int NcclProcessGroup::device() const { return impl_->shared->device; }
bool NcclProcessGroup::broken() const { return impl_->shared->broken; }
void NcclProcessGroup::abort(const std::string& reason) { impl_->shared->abort(reason); }

std::shared_ptr<Work> NcclProcessGroup::all_reduce(TensorView t, const AllReduceOptions& options) {
  const CallSite where = impl_->site("all_reduce");
  impl_->check_tensor(where, "tensor", t);
  check_reduce_op(where, options.op, t.dtype);
  check_timeout(where, options.timeout);
  const auto what = str_cat("all_reduce(", t.dtype, ", ", t.count, ", ", options.op, ")");
  return impl_->run(what, options.timeout, [&](const Deadline& d, const char* desc) {
    impl_->settle(ncclAllReduce(t.data, t.data, t.count, to_nccl(t.dtype), to_nccl(options.op),
                                impl_->shared->comm, impl_->stream),
                  "ncclAllReduce", d);
  });
}

std::shared_ptr<Work> NcclProcessGroup::all_reduce_coalesced(std::span<const TensorView> tensors,
                                                             const AllReduceOptions& options) {
  const CallSite where = impl_->site("all_reduce_coalesced");
  check_timeout(where, options.timeout);
  for (const auto& t : tensors) {
    impl_->check_tensor(where, "tensor", t);
    check_reduce_op(where, options.op, t.dtype);
  }
  const auto what = str_cat("all_reduce_coalesced(", tensors.size(), " tensors, ", options.op, ")");
  return impl_->run(what, options.timeout, [&](const Deadline& d, const char*) {
    impl_->settle(ncclGroupStart(), "ncclGroupStart", d);
    for (const auto& t : tensors) {
      ncclResult_t r = ncclAllReduce(t.data, t.data, t.count, to_nccl(t.dtype), to_nccl(options.op),
                                     impl_->shared->comm, impl_->stream);
      if (r != ncclSuccess && r != ncclInProgress) {
        ncclGroupEnd();
        impl_->settle(r, "ncclAllReduce (coalesced)", d);
      }
    }
    impl_->settle(ncclGroupEnd(), "ncclGroupEnd", d);
  });
}

std::shared_ptr<Work> NcclProcessGroup::broadcast(TensorView t, const BroadcastOptions& options) {
  const CallSite where = impl_->site("broadcast");
  impl_->check_tensor(where, "tensor", t);
  check_root(where, options.root, size());
  check_timeout(where, options.timeout);
  const auto what = str_cat("broadcast(", t.dtype, ", ", t.count, ", root ", options.root, ")");
  return impl_->run(what, options.timeout, [&](const Deadline& d, const char*) {
    impl_->settle(ncclBroadcast(t.data, t.data, t.count, to_nccl(t.dtype), options.root,
                                impl_->shared->comm, impl_->stream),
                  "ncclBroadcast", d);
  });
}

std::shared_ptr<Work> NcclProcessGroup::barrier(const BarrierOptions& options) {
  check_timeout(impl_->site("barrier"), options.timeout);
  // Like ProcessGroupNCCL: an all_reduce of one element, waited on the host.
  return impl_->run(
      "barrier", options.timeout,
      [&](const Deadline& d, const char*) {
        impl_->settle(ncclAllReduce(impl_->barrier_buffer, impl_->barrier_buffer, 1, ncclFloat32,
                                    ncclSum, impl_->shared->comm, impl_->stream),
                      "ncclAllReduce (barrier)", d);
      },
      /*synchronize=*/true);
}

std::shared_ptr<Work> NcclProcessGroup::all_gather(TensorView output, TensorView input,
                                                   const AllGatherOptions& options) {
  const CallSite where = impl_->site("all_gather");
  impl_->check_tensor(where, "input", input);
  impl_->check_tensor(where, "output", output);
  check_gather_shapes(where, output, "output", input, "input", size());
  check_timeout(where, options.timeout);
  const auto what = str_cat("all_gather(", input.dtype, ", ", input.count, ")");
  return impl_->run(what, options.timeout, [&](const Deadline& d, const char*) {
    impl_->settle(ncclAllGather(input.data, output.data, input.count, to_nccl(input.dtype),
                                impl_->shared->comm, impl_->stream),
                  "ncclAllGather", d);
  });
}

std::shared_ptr<Work> NcclProcessGroup::reduce_scatter(TensorView output, TensorView input,
                                                       const ReduceScatterOptions& options) {
  const CallSite where = impl_->site("reduce_scatter");
  impl_->check_tensor(where, "input", input);
  impl_->check_tensor(where, "output", output);
  check_gather_shapes(where, input, "input", output, "output", size());
  check_reduce_op(where, options.op, input.dtype);
  check_timeout(where, options.timeout);
  const auto what =
      str_cat("reduce_scatter(", input.dtype, ", ", output.count, ", ", options.op, ")");
  return impl_->run(what, options.timeout, [&](const Deadline& d, const char*) {
    impl_->settle(ncclReduceScatter(input.data, output.data, output.count, to_nccl(input.dtype),
                                    to_nccl(options.op), impl_->shared->comm, impl_->stream),
                  "ncclReduceScatter", d);
  });
}

}  // namespace collie
