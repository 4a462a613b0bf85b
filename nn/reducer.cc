#include "nn/reducer.h"

#include "runtime/base/check.h"
#include "runtime/base/error.h"
#include "runtime/base/logging.h"
#include "runtime/base/str_cat.h"

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

Reducer::Reducer(std::vector<std::pair<std::string, Parameter*>> params, ProcessGroup& group,
                 ReducerOptions options)
    : group_(group),
      options_(options) {
  for (auto& [name, p] : params) {
    COLLIE_ARG_CHECK(p != nullptr, "DDP: null parameter ", name);
    names_.push_back(name);
    params_.push_back(p);
  }
  bucket_of_.resize(params_.size());
  ready_.assign(params_.size(), false);
  COLLIE_ARG_CHECK(options.first_bucket_bytes > 0 && options.bucket_bytes > 0, "bucket sizes must be positive");
  std::vector<size_t> bytes, reverse;
  for (size_t i = 0; i < params_.size(); ++i) bytes.push_back(params_[i]->numel() * sizeof(float));
  for (size_t i = params_.size(); i-- > 0;) reverse.push_back(i);
  auto assignment = compute_bucket_assignment(bytes, reverse, {options.first_bucket_bytes, options.bucket_bytes});
  buckets_.resize(assignment.size());
  for (size_t b = 0; b < assignment.size(); ++b) {
    Bucket& bucket = buckets_[b];
    bucket.params = std::move(assignment[b]);
    size_t numel = 0;
    for (size_t p : bucket.params) {
      bucket.offsets.push_back(numel);
      numel += params_[p]->numel();
      bucket_of_[p] = b;
    }
    bucket.data.resize(numel);
    // From here on the gradients live in the bucket (current values copied).
    for (size_t k = 0; k < bucket.params.size(); ++k)
      params_[bucket.params[k]]->use_grad_storage(bucket.data.data() + bucket.offsets[k]);
  }
  for (size_t i = 0; i < params_.size(); ++i) params_[i]->set_grad_ready_hook([this, i] { mark_ready(i); });
}

Reducer::~Reducer() {
  for (auto& bucket : buckets_) {
    if (!bucket.work) continue;
    try {
      bucket.work->wait();
    } catch (const std::exception& e) {
      COLLIE_LOG(kWarn) << "DDP reducer destroyed with a failed all_reduce: " << e.what();
    }
  }
  for (auto* p : params_) {
    p->set_grad_ready_hook(nullptr);
    p->use_own_grad_storage();
  }
}

void Reducer::prepare_for_backward() {
  COLLIE_CHECK(!armed_ || next_to_launch_ == 0,
               "DDP: a new forward started while the previous backward's all_reduces were not finished "
               "(call backward through DistributedDataParallel so that it can wait for them)");
  std::fill(ready_.begin(), ready_.end(), false);
  for (auto& bucket : buckets_) {
    bucket.pending = bucket.params.size();
    bucket.work.reset();
  }
  next_to_launch_ = 0;
  armed_ = true;
}

void Reducer::mark_ready(size_t param) {
  if (!armed_ || !require_sync_) return;
  COLLIE_CHECK(!ready_[param], "DDP: parameter ", names_[param], " (index ", param,
               ") was marked ready twice in one backward");
  ready_[param] = true;
  Bucket& bucket = buckets_[bucket_of_[param]];
  if (--bucket.pending == 0) launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  const float scale = 1.0f / static_cast<float>(group_.size());
  // Launch strictly in bucket order so that every rank issues the same
  // sequence of collectives, whatever order the hooks fired in.
  while (next_to_launch_ < buckets_.size() && buckets_[next_to_launch_].pending == 0) {
    Bucket& bucket = buckets_[next_to_launch_++];
    if (group_.size() > 1) {
      for (float& g : bucket.data) g *= scale;
    }
    bucket.launched_at = Clock::now();
    AllReduceOptions options;
    options.op = ReduceOp::kSum;
    options.timeout = options_.timeout;
    bucket.work = group_.all_reduce(view(bucket.data.data(), bucket.data.size()), options);
  }
}

void Reducer::abandon_backward() noexcept {
  for (auto& bucket : buckets_) {
    if (!bucket.work) continue;
    try {
      bucket.work->wait();
    } catch (...) {
    }
    bucket.work.reset();
  }
  next_to_launch_ = 0;
  armed_ = false;
}

void Reducer::finalize_backward() {
  if (!armed_ || !require_sync_) {
    armed_ = false;
    return;
  }
  armed_ = false;
  std::exception_ptr error;
  for (auto& bucket : buckets_) {
    if (!bucket.work) continue;
    try {
      bucket.work->wait();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  const bool all_launched = next_to_launch_ == buckets_.size();
  next_to_launch_ = 0;
  if (error) std::rethrow_exception(error);
  if (!all_launched) {
    std::vector<std::string> missing;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) missing.push_back(names_[i] + " (index " + std::to_string(i) + ")");
    throw Error(str_cat("DDP: backward finished without gradients for ", missing.size(), " parameter(s): ",
                        join(missing, ", "),
                        ". Every parameter must take part in the loss; this rank's all_reduces now differ from "
                        "its peers'"));
  }
}

}  // namespace collie::nn
