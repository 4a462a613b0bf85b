// The CUDA path of BackendCollie (see cuda_path.h): collie's NcclProcessGroup
// on torch's streams. Compiled only where collie has NCCL and torch has CUDA.
#include "collie/runtime/torch/cuda_path.h"

#include <ATen/core/grad_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <mutex>
#include <utility>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/cuda/cuda_device.h"
#include "collie/runtime/nccl/nccl_process_group.h"
#include "collie/runtime/torch/collie_work.h"

namespace collie::torch_adapter {
namespace {

// collie's NCCL backend orders its stream after collie's per-thread
// "current stream"; for the length of a call that is torch's.
class CurrentStreamScope {
 public:
  explicit CurrentStreamScope(const c10::cuda::CUDAStream& stream)
      : saved_(cuda::current_stream()) {
    cuda::set_current_stream(stream.stream());
  }
  ~CurrentStreamScope() { cuda::set_current_stream(saved_); }
  CurrentStreamScope(const CurrentStreamScope&) = delete;
  CurrentStreamScope& operator=(const CurrentStreamScope&) = delete;

 private:
  void* saved_;
};

class CudaWork final : public ::c10d::Work {
 public:
  // `work`: the last collie call, still running on `nccl` (null when the
  // Body waited for it itself: then everything it did is ordered on the
  // caller's stream, where `end` was recorded).
  CudaWork(int rank, const Launch& call, std::shared_ptr<collie::Work> work,
           c10::cuda::CUDAStream end_stream)
      : Work(rank, call.type),
        outputs_(call.outputs),
        device_(static_cast<c10::DeviceIndex>(call.device.index)),
        work_(std::move(work)),
        end_stream_(end_stream) {
    end_.record(end_stream_);
  }

  bool isCompleted() override {
    if (work_ && work_->is_completed() && !work_->is_success()) return true;
    return end_.query();
  }
  bool isSuccess() const override {
    return (!work_ || work_->is_success()) && const_cast<at::cuda::CUDAEvent&>(end_).query();
  }
  std::exception_ptr exception() const override { return work_ ? work_->exception() : nullptr; }
  std::vector<at::Tensor> result() override { return outputs_; }

  // The caller's current stream waits for the operation; the host does not.
  void synchronize() override {
    c10::cuda::CUDAGuard guard(device_);
    const auto current = c10::cuda::getCurrentCUDAStream(device_);
    if (work_) {
      CurrentStreamScope scope(current);
      work_->synchronize();  // throws the operation's error, if it failed
    }
    end_.block(current);
  }
  bool wait(std::chrono::milliseconds /*timeout*/) override {
    try {
      synchronize();
    } catch (...) {
      std::rethrow_exception(as_torch_error(std::current_exception()));
    }
    return true;
  }

  // Completed at once on the operation's stream: whoever waits on the
  // future (DDP's comm hooks) has its current stream wait for it.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    std::lock_guard lock(mutex_);
    if (!future_) {
      future_ = c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::ofTensors(), std::vector<c10::Device>{c10::Device(c10::kCUDA, device_)});
      c10::cuda::CUDAStreamGuard guard(end_stream_);
      future_->markCompleted(c10::IValue(outputs_));
    }
    return future_;
  }

 private:
  const std::vector<at::Tensor> outputs_;
  const c10::DeviceIndex device_;
  const std::shared_ptr<collie::Work> work_;
  const c10::cuda::CUDAStream end_stream_;
  at::cuda::CUDAEvent end_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class CudaPathImpl final : public CudaPath {
 public:
  explicit CudaPathImpl(CudaPathConfig config) : config_(std::move(config)) {}

  c10::intrusive_ptr<::c10d::Work> launch(Launch call, const Body& body) override {
    const auto device = static_cast<c10::DeviceIndex>(call.device.index);
    c10::cuda::CUDAGuard guard(device);
    NcclProcessGroup& group = group_on(call.op, device);
    const auto current = c10::cuda::getCurrentCUDAStream(device);
    const auto nccl =
        c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(group.stream()), device);
    // The caching allocator must not hand these buffers out again until
    // NCCL's stream is done with them.
    for (const auto& t : call.in_use)
      if (t.defined() && t.is_cuda() && t.has_storage())
        c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), nccl);
    std::shared_ptr<collie::Work> last;
    {
      CurrentStreamScope scope(current);
      at::NoGradGuard no_grad;
      last = body(group);
    }
    return c10::make_intrusive<CudaWork>(config_.rank, call, std::move(last),
                                         last ? nccl : current);
  }

  void abort(const std::string& reason) override {
    std::lock_guard lock(mu_);
    aborted_ = reason;
    if (group_) group_->abort(reason);
  }

  void shutdown() override {
    std::lock_guard lock(mu_);
    if (group_) group_->shutdown();
  }

  bool has_communicator() override {
    std::lock_guard lock(mu_);
    return group_ != nullptr;
  }

 private:
  // The group's communicator, made by the first operation on a CUDA tensor
  // (every rank makes that call, so the rendezvous is collective).
  NcclProcessGroup& group_on(const char* op, c10::DeviceIndex device) {
    std::lock_guard lock(mu_);
    if (!aborted_.empty())
      throw BackendError(str_cat(op, " on rank ", config_.rank, ": ", aborted_));
    if (!group_) {
      NcclOptions options;
      options.device = device;
      options.timeout = config_.timeout;
      options.group_name = config_.group_name;
      group_ = NcclProcessGroup::create(config_.store, config_.rank, config_.size, options);
    } else if (group_->device() != device) {
      throw InvalidArgument(str_cat(op, " on rank ", config_.rank, " of group \"",
                                    config_.group_name, "\" (collie): a tensor on cuda:", device,
                                    " but this group's NCCL communicator is on cuda:",
                                    group_->device(), " (one CUDA device per rank and group)"));
    }
    return *group_;
  }

  const CudaPathConfig config_;
  std::mutex mu_;
  std::shared_ptr<NcclProcessGroup> group_;
  std::string aborted_;
};

}  // namespace

std::unique_ptr<CudaPath> make_cuda_path(const CudaPathConfig& config, std::string* why_not) {
  why_not->clear();
  return std::make_unique<CudaPathImpl>(config);
}

}  // namespace collie::torch_adapter
