// Reducer: the gradient-averaging engine under DistributedDataParallel, in
// the shape of c10d's Reducer.
//
// Buckets. Parameters are assigned in reverse registration order (the order
// backward produces their gradients, which is what c10d's rebuilt buckets
// use from the second iteration on): a bucket takes parameters until its size
// reaches its cap; the first bucket's cap is small (1 MiB) so that the first
// all_reduce starts early, the others' is bucket_cap_mb (25 MiB). Each bucket
// is one flat float32 buffer on the parameters' device (host memory, or CUDA
// memory for the CUDA model: DdpModel::ops() allocates it) and every
// parameter's gradient *lives* in it (DdpModel::use_grad_storage): the
// all_reduce runs on the bucket with no copy in or out.
//
// Overlap. Every parameter's grad-ready hook counts down its bucket; when a
// bucket is complete, and every bucket before it has been launched (so that
// all ranks issue the all_reduces in the same order), its all_reduce starts
// asynchronously while backward carries on with earlier layers.
// finalize_backward() waits for all of them. Gradients are divided by the
// world size before the sum, so the result is the average (c10d does the
// same division). On a GPU the division and the launch are queued behind the
// gradient kernels: the scale runs on the compute stream and the collective
// is ordered after that stream with an event (DeviceOps::with_compute_stream;
// the model's backward runs its hooks with its compute stream current), and
// finalize_backward() makes the compute stream wait for the collectives, so
// the optimizer step that follows sees the averages. The host never waits
// for the device.
//
// no_sync. With sync off, hooks launch nothing and gradients simply keep
// accumulating in the buckets; the next synchronised backward reduces the
// accumulated sum.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/nn/ddp_model.h"
#include "collie/nn/device_ops.h"
#include "collie/runtime/process_group/process_group.h"

namespace collie::nn {

inline constexpr size_t kDefaultFirstBucketBytes = size_t(1)
                                                   << 20;  // torch's _DEFAULT_FIRST_BUCKET_BYTES

// c10d's compute_bucket_assignment_by_size for one dtype: walks `order` (the
// parameter indices in the order to bucket them), closing a bucket once its
// size reaches the current limit; limits[0] applies to the first bucket,
// limits[1] to the next, and so on, the last limit to all the rest.
std::vector<std::vector<size_t>> compute_bucket_assignment(const std::vector<size_t>& param_bytes,
                                                           const std::vector<size_t>& order,
                                                           const std::vector<size_t>& limits);

struct ReducerOptions {
  size_t first_bucket_bytes = kDefaultFirstBucketBytes;
  size_t bucket_bytes = 25u << 20;
  Timeout timeout = kUnsetTimeout;  // for each bucket's all_reduce
};

class Reducer {
 public:
  struct Bucket {
    std::vector<size_t> params;   // indices into the parameter list, ready order
    std::vector<size_t> offsets;  // each one's offset in `data`, in elements
    DeviceBuffer<float> storage;  // owns `data`, on the model's device
    std::span<float> data;        // the gradients, contiguous
    size_t pending = 0;           // gradients not yet ready this backward
    std::shared_ptr<Work> work;
    Clock::time_point launched_at{};
    // With a timeline recording (runtime/process_group/timeline.h): when
    // the all_reduce was launched and when the reducer saw it complete
    // (CLOCK_REALTIME ns; 0: not yet), for the bucket's span.
    int64_t trace_launched_ns = 0, trace_completed_ns = 0;
  };

  // Buckets `model`'s parameters (registration order, names for errors) on
  // its device and moves their gradients into them. `model` must outlive
  // the Reducer.
  Reducer(DdpModel& model, ProcessGroup& group, ReducerOptions options = {});
  // Waits for in-flight all_reduces and gives every parameter its own
  // gradient storage back (with the current gradient). Never throws.
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Arms the buckets for the backward that follows (DDP's forward calls it).
  void prepare_for_backward();
  // Waits for every bucket's all_reduce; throws Error naming the parameters
  // whose gradients never arrived, or the collective's error.
  void finalize_backward();
  // After a backward that threw: waits for whatever was launched (ignoring
  // its errors, the first one is already on its way to the caller) and
  // disarms, so that the next forward can start. Never throws.
  void abandon_backward() noexcept;

  // Moves to another group (the survivors' group after a failure:
  // runtime/api's shrink_group). Waits for whatever was launched on the old
  // group, which must still be alive (a revoked group fails its works at
  // once), ignoring their errors, and disarms. Nothing else depends on the
  // group: the buckets (their storage, the gradients living in them) are the
  // same for any world size, and each launch scales by the group's size at
  // that time. The gradients in the buckets are whatever the failed
  // backward left there: zero them before the next backward (zero_grad).
  // Local: no collective.
  void set_process_group(ProcessGroup& group) noexcept;
  ProcessGroup& group() const { return *group_; }

  void set_require_sync(bool on) { require_sync_ = on; }
  bool require_sync() const { return require_sync_; }

  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  void mark_ready(size_t param);
  void launch_ready_buckets();
  // Timeline: stamps the launched buckets whose all_reduce has completed
  // since the last look (a non-blocking check of each); then, at the end of
  // a backward, records each bucket's span.
  void note_completions();
  void trace_buckets();
  // Waits for every launched bucket and forgets its Work; logs errors with
  // `log_prefix` (nullptr: silently).
  void wait_all_ignoring_errors(const char* log_prefix) noexcept;

  DdpModel& model_;
  std::vector<size_t> numel_;
  std::vector<std::string> names_;
  ProcessGroup* group_;
  ReducerOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // parameter index -> bucket index
  std::vector<bool> ready_;        // this backward, per parameter
  size_t next_to_launch_ = 0;
  bool armed_ = false;
  bool require_sync_ = true;
};

}  // namespace collie::nn
