// DistributedDataParallel: data parallelism for a Module over a ProcessGroup,
// torch's DDP without autograd. Every rank holds a full replica; each trains
// on its shard of the global batch; backward averages the gradients across
// ranks (bucketed and overlapped with backward, see nn/reducer.h), so that
// after optimizer.step() all replicas hold the same parameters, the ones one
// process training on the whole global batch would have.
//
//   DistributedDataParallel ddp(model, *get_default_group());
//   auto& model_without_ddp = ddp.module();          // evaluate, save
//   const Tensor& logits = ddp.forward(batch.inputs);
//   float loss = cross_entropy(logits, batch.labels, &grad);
//   optimizer.zero_grad();  ... ddp.backward(grad);  optimizer.step();
//
// Construction is collective: it checks that every rank's parameters have
// the same count and shapes (InvalidArgument naming the first difference and
// the ranks) and broadcasts rank 0's parameters to everyone, so replicas
// start equal whatever their seeds.
//
// Devices. The same class wraps a host Module (gradients in host buckets,
// for the cpu backend) or any DdpModel, such as nn::cuda::CudaMlp
// (gradients in CUDA buckets, for the nccl backend): the device of the
// parameters decides where the buckets and the construction's scratch
// buffers live, and the process group must accept that device's buffers.
//
//   nn::cuda::CudaMlp gpu(cpu_model, local_rank);
//   DistributedDataParallel ddp(gpu, *get_default_group());  // backend nccl
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include "collie/nn/ddp_model.h"
#include "collie/nn/module.h"
#include "collie/nn/reducer.h"
#include "collie/nn/tensor.h"
#include "collie/runtime/process_group/process_group.h"

namespace collie::nn {

struct DdpOptions {
  double bucket_cap_mb = 25.0;
  // The first bucket's cap (torch: dist._DEFAULT_FIRST_BUCKET_BYTES, 1 MiB).
  double first_bucket_cap_mb = 1.0;
  bool broadcast_parameters = true;
  // For the construction's collectives and each bucket's all_reduce;
  // kUnsetTimeout: the group's.
  Timeout timeout = kUnsetTimeout;
};

class DistributedDataParallel {
 public:
  // A host Module.
  DistributedDataParallel(Module& module, ProcessGroup& group, DdpOptions options = {});
  // Any DdpModel (the CUDA model); `model` must outlive this object.
  DistributedDataParallel(DdpModel& model, ProcessGroup& group, DdpOptions options = {});

  // The wrapped Module (torch's ddp.module, the tutorial's
  // model_without_ddp); throws Error when the wrapped DdpModel is not a
  // ModuleModel (use model()).
  Module& module();
  DdpModel& model() { return model_; }
  ProcessGroup& group() { return *group_; }

  // Moves DDP to another group: after a rank failed, the survivors'
  // (shrink_group's) new default group. Local (no collective), never
  // throws: abandons the failed backward (waiting for what it launched on
  // the old group, which must still be alive) and re-targets the Reducer,
  // whose buckets do not depend on the world size (each all_reduce scales
  // by the size of the group it runs on). The replicas are NOT made equal
  // here: survivors may disagree on whether the failed step completed, so
  // bring them to one state first (nn/recovery.h: agree_on_progress,
  // broadcast_training_state) and zero the gradients before the next
  // backward. `group` must outlive this object or the next move.
  void set_process_group(ProcessGroup& group) noexcept;

  // Runs the module and arms the reducer for the following backward.
  // `input` must stay alive until backward() (it is the autograd graph's
  // saved input in torch).
  const Tensor& forward(const Tensor& input);
  // Backward of the last forward from d(loss)/d(output); returns once every
  // gradient is averaged across ranks (or, inside no_sync(), accumulated
  // locally). On a GPU: once the model's compute stream is ordered after
  // the all_reduces, so whatever is queued on it next (the optimizer step)
  // reads the averages; the host does not wait for the device.
  void backward(const Tensor& grad_output);

  // Gradient accumulation: backward passes inside the guard's lifetime
  // reduce nothing; the first backward after it reduces the sum.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(Reducer& reducer) : reducer_(&reducer), previous_(reducer.require_sync()) {
      reducer.set_require_sync(false);
    }
    ~NoSyncGuard() {
      if (reducer_) reducer_->set_require_sync(previous_);
    }
    NoSyncGuard(NoSyncGuard&& other) noexcept
        : reducer_(std::exchange(other.reducer_, nullptr)), previous_(other.previous_) {}
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(NoSyncGuard&&) = delete;

   private:
    Reducer* reducer_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*reducer_); }

  const Reducer& reducer() const { return *reducer_; }
  // When the last backward's module pass returned, before the wait for the
  // all_reduces: with the buckets' launch times, what the tests and the
  // bench use to show the overlap.
  Clock::time_point last_backward_compute_end() const { return backward_compute_end_; }

 private:
  DistributedDataParallel(std::unique_ptr<ModuleModel> owned, DdpModel* model, ProcessGroup& group,
                          DdpOptions options);
  void run_collective(const std::function<std::shared_ptr<Work>()>& launch);
  void verify_parameter_shapes();
  void broadcast_parameters();

  std::unique_ptr<ModuleModel> module_model_;  // when wrapping a Module
  DdpModel& model_;
  ProcessGroup* group_;
  DdpOptions options_;
  std::unique_ptr<Reducer> reducer_;
  const Tensor* input_ = nullptr;
  Tensor output_;
  Clock::time_point backward_compute_end_{};
};

}  // namespace collie::nn
