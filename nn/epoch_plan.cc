#include "collie/nn/epoch_plan.h"

#include <algorithm>

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie::nn {

EpochPlan::EpochPlan(const DistributedSampler& sampler, size_t batch_size)
    : order_(std::make_shared<const std::vector<int64_t>>(sampler.global_order())),
      real_end_(sampler.real_size()),
      begin_(0),
      end_(sampler.total_size()),
      batch_size_(batch_size),
      replicas_(sampler.num_replicas()),
      rank_(sampler.rank()) {
  COLLIE_ARG_CHECK_GT(batch_size, 0u, "EpochPlan batch_size");
  first_ = std::min(end_, batch_size_ * static_cast<size_t>(replicas_));
}

EpochPlan EpochPlan::reshard(size_t completed, int num_replicas, int rank) const {
  COLLIE_ARG_CHECK_GE(num_replicas, 1, "EpochPlan::reshard num_replicas");
  COLLIE_ARG_CHECK(rank >= 0 && rank < num_replicas, "EpochPlan::reshard: rank ", rank,
                   " is outside [0, ", num_replicas, ")");
  COLLIE_ARG_CHECK(completed <= num_steps(), "EpochPlan::reshard: ", completed,
                   " steps completed but the plan has ", num_steps());
  EpochPlan next;
  next.order_ = order_;
  next.real_end_ = real_end_;
  // The old padding (positions from real_end_) is never re-dealt: the
  // samples it repeats were trained on at the start of the epoch.
  next.begin_ = std::min(consumed_after(completed), real_end_);
  next.end_ = std::max(next.begin_, real_end_);
  next.batch_size_ = batch_size_;
  next.replicas_ = num_replicas;
  next.rank_ = rank;
  // The step in flight, as it was: the old global batch, re-dealt.
  const size_t in_flight_end =
      completed < num_steps() ? std::min(consumed_after(completed + 1), real_end_) : next.begin_;
  next.first_ =
      in_flight_end > next.begin_
          ? in_flight_end - next.begin_
          : std::min(next.end_ - next.begin_, batch_size_ * static_cast<size_t>(num_replicas));
  return next;
}

EpochPlan EpochPlan::rest_from(size_t consumed, int num_replicas, int rank) const {
  COLLIE_ARG_CHECK_GE(num_replicas, 1, "EpochPlan::rest_from num_replicas");
  COLLIE_ARG_CHECK(rank >= 0 && rank < num_replicas, "EpochPlan::rest_from: rank ", rank,
                   " is outside [0, ", num_replicas, ")");
  COLLIE_ARG_CHECK(consumed <= order_->size(), "EpochPlan::rest_from: position ", consumed,
                   " is past the epoch's ", order_->size());
  EpochPlan next;
  next.order_ = order_;
  next.real_end_ = real_end_;
  next.begin_ = std::min(consumed, real_end_);
  next.end_ = real_end_;
  next.batch_size_ = batch_size_;
  next.replicas_ = num_replicas;
  next.rank_ = rank;
  next.first_ = std::min(next.end_ - next.begin_, batch_size_ * static_cast<size_t>(num_replicas));
  return next;
}

size_t EpochPlan::num_steps() const {
  if (end_ == begin_) return 0;
  const size_t block = batch_size_ * static_cast<size_t>(replicas_);
  return 1 + (end_ - begin_ - first_ + block - 1) / block;
}

size_t EpochPlan::consumed_after(size_t steps) const {
  if (steps == 0 || end_ == begin_) return begin_;
  const size_t block = batch_size_ * static_cast<size_t>(replicas_);
  return std::min(end_, begin_ + first_ + (steps - 1) * block);
}

size_t EpochPlan::steps_for(size_t consumed) const {
  const size_t n = num_steps();
  for (size_t k = 0; k <= n; ++k) {
    const size_t c = consumed_after(k);
    if (c == consumed) return k;
    if (c > consumed) break;
  }
  throw InvalidArgument(str_cat("EpochPlan: ", consumed,
                                " consumed positions is no step boundary of the plan [", begin_,
                                ", ", end_, ") in steps of ", first_, " then ",
                                batch_size_ * static_cast<size_t>(replicas_)));
}

std::vector<int64_t> EpochPlan::batch_of(int rank, size_t step) const {
  COLLIE_ARG_CHECK(rank >= 0 && rank < replicas_, "EpochPlan::batch_of: rank ", rank,
                   " is outside [0, ", replicas_, ")");
  COLLIE_ARG_CHECK_LT(step, num_steps(), "EpochPlan step");
  const size_t a = consumed_after(step), b = consumed_after(step + 1);
  const size_t w = static_cast<size_t>(replicas_), r = static_cast<size_t>(rank);
  // The first position p >= a with (p - begin_) % w == r.
  size_t p = begin_ + r;
  if (p < a) p += (a - p + w - 1) / w * w;
  std::vector<int64_t> out;
  for (; p < b; p += w) out.push_back((*order_)[p]);
  return out;
}

size_t EpochPlan::global_batch_size(size_t step) const {
  COLLIE_ARG_CHECK_LT(step, num_steps(), "EpochPlan step");
  return consumed_after(step + 1) - consumed_after(step);
}

float EpochPlan::batch_weight(size_t step) const {
  const size_t share = batch_of(rank_, step).size();
  const size_t global = global_batch_size(step);
  if (share * static_cast<size_t>(replicas_) == global) return 1.0f;
  return static_cast<float>(static_cast<double>(share) * replicas_ / static_cast<double>(global));
}

}  // namespace collie::nn
