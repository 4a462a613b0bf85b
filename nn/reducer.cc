#include "collie/nn/reducer.h"

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/process_group/timeline.h"

namespace collie::nn {

std::vector<std::vector<size_t>> compute_bucket_assignment(const std::vector<size_t>& param_bytes,
                                                           const std::vector<size_t>& order,
                                                           const std::vector<size_t>& limits) {
  COLLIE_ARG_CHECK(!limits.empty(), "compute_bucket_assignment needs at least one size limit");
  std::vector<std::vector<size_t>> buckets;
  std::vector<size_t> current;
  size_t current_bytes = 0;
  size_t limit_index = 0;
  for (size_t p : order) {
    COLLIE_ARG_CHECK_LT(p, param_bytes.size(), "parameter index in the bucket order");
    current.push_back(p);
    current_bytes += param_bytes[p];
    if (current_bytes >= limits[limit_index]) {
      buckets.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
      if (limit_index + 1 < limits.size()) ++limit_index;
    }
  }
  if (!current.empty()) buckets.push_back(std::move(current));
  return buckets;
}

Reducer::Reducer(DdpModel& model, ProcessGroup& group, ReducerOptions options)
    : model_(model), group_(&group), options_(options) {
  for (auto& info : model.parameter_info()) {
    names_.push_back(info.name);
    numel_.push_back(info.numel());
  }
  bucket_of_.resize(numel_.size());
  ready_.assign(numel_.size(), false);
  COLLIE_ARG_CHECK(options.first_bucket_bytes > 0 && options.bucket_bytes > 0,
                   "bucket sizes must be positive");
  std::vector<size_t> bytes, reverse;
  for (size_t n : numel_) bytes.push_back(n * sizeof(float));
  for (size_t i = numel_.size(); i-- > 0;) reverse.push_back(i);
  auto assignment =
      compute_bucket_assignment(bytes, reverse, {options.first_bucket_bytes, options.bucket_bytes});
  buckets_.resize(assignment.size());
  for (size_t b = 0; b < assignment.size(); ++b) {
    Bucket& bucket = buckets_[b];
    bucket.params = std::move(assignment[b]);
    size_t numel = 0;
    for (size_t p : bucket.params) {
      bucket.offsets.push_back(numel);
      numel += numel_[p];
      bucket_of_[p] = b;
    }
    bucket.storage = DeviceBuffer<float>(model.ops(), numel);
    bucket.data = std::span<float>(bucket.storage.data(), numel);
  }
  // From here on the gradients live in the buckets (current values copied).
  // A failure half-way gives the moved ones back before rethrowing.
  size_t moved = 0;
  try {
    for (const Bucket& bucket : buckets_)
      for (size_t k = 0; k < bucket.params.size(); ++k, ++moved)
        model.use_grad_storage(bucket.params[k], bucket.data.data() + bucket.offsets[k]);
  } catch (...) {
    for (const Bucket& bucket : buckets_)
      for (size_t k = 0; k < bucket.params.size() && moved > 0; ++k, --moved)
        model.use_own_grad_storage(bucket.params[k]);
    throw;
  }
  for (size_t i = 0; i < numel_.size(); ++i)
    model.set_grad_ready_hook(i, [this, i] { mark_ready(i); });
}

Reducer::~Reducer() {
  wait_all_ignoring_errors("DDP reducer destroyed with a failed all_reduce: ");
  for (size_t i = 0; i < numel_.size(); ++i) {
    try {
      model_.set_grad_ready_hook(i, nullptr);
    } catch (...) {
    }
    model_.use_own_grad_storage(i);
  }
}

void Reducer::wait_all_ignoring_errors(const char* log_prefix) noexcept {
  try {
    model_.ops().with_compute_stream([&] {
      for (auto& bucket : buckets_) {
        if (!bucket.work) continue;
        try {
          bucket.work->wait();
        } catch (const std::exception& e) {
          if (log_prefix != nullptr) {
            COLLIE_LOG(kWarn) << log_prefix << e.what();
          }
        }
        bucket.work.reset();
      }
    });
  } catch (...) {
  }
}

void Reducer::prepare_for_backward() {
  COLLIE_CHECK(
      !armed_ || next_to_launch_ == 0,
      "DDP: a new forward started while the previous backward's all_reduces were not finished "
      "(call backward through DistributedDataParallel so that it can wait for them)");
  std::fill(ready_.begin(), ready_.end(), false);
  for (auto& bucket : buckets_) {
    bucket.pending = bucket.params.size();
    bucket.work.reset();
    bucket.trace_launched_ns = bucket.trace_completed_ns = 0;
  }
  next_to_launch_ = 0;
  armed_ = true;
}

void Reducer::mark_ready(size_t param) {
  if (!armed_ || !require_sync_) return;
  COLLIE_CHECK(!ready_[param], "DDP: parameter ", names_[param], " (index ", param,
               ") was marked ready twice in one backward");
  ready_[param] = true;
  if (timeline::enabled()) note_completions();
  Bucket& bucket = buckets_[bucket_of_[param]];
  if (--bucket.pending == 0) launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  const float scale = 1.0f / static_cast<float>(group_->size());
  // Launch strictly in bucket order so that every rank issues the same
  // sequence of collectives, whatever order the hooks fired in.
  // On a GPU, both the scale and the collective are queued behind the
  // gradient kernels of the compute stream (the model's backward runs the
  // hooks with it current; with_compute_stream makes sure of it).
  while (next_to_launch_ < buckets_.size() && buckets_[next_to_launch_].pending == 0) {
    Bucket& bucket = buckets_[next_to_launch_++];
    model_.ops().with_compute_stream([&] {
      if (timeline::enabled()) bucket.trace_launched_ns = timeline::now_ns();
      if (group_->size() > 1) model_.ops().scale(bucket.data.data(), bucket.data.size(), scale);
      bucket.launched_at = Clock::now();
      AllReduceOptions options;
      options.op = ReduceOp::kSum;
      options.timeout = options_.timeout;
      bucket.work = group_->all_reduce(bucket.storage.view(), options);
    });
  }
}

void Reducer::note_completions() {
  for (size_t b = 0; b < next_to_launch_; ++b) {
    Bucket& bucket = buckets_[b];
    if (bucket.work && bucket.trace_completed_ns == 0 && bucket.work->is_completed())
      bucket.trace_completed_ns = timeline::now_ns();
  }
}

void Reducer::trace_buckets() {
  // One track per bucket: their all_reduces overlap each other (a bucket
  // launches while the one before it is still being reduced). A span runs
  // from the launch (the scale, the queue) to the all_reduce's completion
  // as the flight recorder saw it (on a GPU: the device's), else to when
  // this reducer saw it complete (the next gradient hook, or the wait).
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    if (bucket.trace_launched_ns == 0) continue;
    const auto bytes = static_cast<int64_t>(bucket.data.size() * sizeof(float));
    timeline::span_until_all_reduce(str_cat("ddp bucket ", b), str_cat("bucket ", b, " all_reduce"),
                                    bucket.trace_launched_ns, bucket.trace_completed_ns, bytes,
                                    {{"bucket", static_cast<int64_t>(b)},
                                     {"bytes", bytes},
                                     {"params", static_cast<int64_t>(bucket.params.size())}},
                                    "ddp");
  }
}

void Reducer::set_process_group(ProcessGroup& group) noexcept {
  abandon_backward();
  group_ = &group;
}

void Reducer::abandon_backward() noexcept {
  wait_all_ignoring_errors(nullptr);
  next_to_launch_ = 0;
  armed_ = false;
}

void Reducer::finalize_backward() {
  if (!armed_ || !require_sync_) {
    armed_ = false;
    return;
  }
  armed_ = false;
  // On a GPU, synchronize() returns at once and makes the compute stream
  // wait for the collective: the optimizer step queued next reads the
  // averages. On a CPU it is wait().
  std::exception_ptr error;
  const bool tracing = timeline::enabled();
  if (tracing) note_completions();
  model_.ops().with_compute_stream([&] {
    for (auto& bucket : buckets_) {
      if (!bucket.work) continue;
      try {
        bucket.work->synchronize();
      } catch (...) {
        if (!error) error = std::current_exception();
      }
      if (tracing && bucket.trace_completed_ns == 0) bucket.trace_completed_ns = timeline::now_ns();
    }
  });
  if (tracing) trace_buckets();
  const bool all_launched = next_to_launch_ == buckets_.size();
  next_to_launch_ = 0;
  if (error) std::rethrow_exception(error);
  if (!all_launched) {
    std::vector<std::string> missing;
    for (size_t i = 0; i < numel_.size(); ++i)
      if (!ready_[i]) missing.push_back(names_[i] + " (index " + std::to_string(i) + ")");
    throw Error(str_cat(
        "DDP: backward finished without gradients for ", missing.size(),
        " parameter(s): ", join(missing, ", "),
        ". Every parameter must take part in the loss; this rank's all_reduces now differ from "
        "its peers'"));
  }
}

}  // namespace collie::nn
