#include "samples/blip_train/survival.h"

#include <algorithm>

#include "base/check.h"
#include "base/error.h"
#include "nn/recovery.h"
#include "nn/state_dict.h"
#include "runtime/api/distributed.h"
#include "samples/blip_train/metric_logger.h"

namespace collie::samples {

namespace {
constexpr int kConsumedBits = 40;
}

bool is_group_failure(const std::exception& e) {
  return dynamic_cast<const NetworkError*>(&e) != nullptr ||
         dynamic_cast<const TimeoutError*>(&e) != nullptr ||
         dynamic_cast<const BackendError*>(&e) != nullptr;
}

int64_t encode_progress(int epoch, size_t consumed) {
  return (static_cast<int64_t>(epoch) << kConsumedBits) | static_cast<int64_t>(consumed);
}
int decode_epoch(int64_t progress) { return static_cast<int>(progress >> kConsumedBits); }
size_t decode_consumed(int64_t progress) {
  return static_cast<size_t>(progress & ((int64_t(1) << kConsumedBits) - 1));
}

void SampleCounts::reset() {
  std::fill(agreed_.begin(), agreed_.end(), 0.0);
  std::fill(mine_.begin(), mine_.end(), 0.0);
}

void SampleCounts::add_mine(const std::vector<int64_t>& indices) {
  for (int64_t i : indices) mine_.at(static_cast<size_t>(i)) += 1;
}

void SampleCounts::add_agreed(const std::vector<int64_t>& indices) {
  for (int64_t i : indices) agreed_.at(static_cast<size_t>(i)) += 1;
}

void SampleCounts::consolidate(ProcessGroup& group, nn::DeviceOps& device) {
  all_reduce_values(group, device, mine_);
  for (size_t i = 0; i < agreed_.size(); ++i) agreed_[i] += mine_[i];
  std::fill(mine_.begin(), mine_.end(), 0.0);
}

SampleCounts::Summary SampleCounts::summarize(ProcessGroup& group, nn::DeviceOps& device) const {
  std::vector<double> total = mine_;
  all_reduce_values(group, device, total);
  Summary s;
  for (size_t i = 0; i < total.size(); ++i) {
    const auto n = static_cast<int64_t>(total[i] + agreed_[i]);
    s.trained += n;
    if (n > 0) ++s.distinct;
    if (n == 0) ++s.missing;
    if (n > 1) s.repeated += n - 1;
  }
  return s;
}

ResumePoint resume_point(int epoch, const nn::EpochPlan& plan, size_t done, const Recovery& r,
                         size_t dataset_len, uint64_t seed) {
  const int agreed_epoch = decode_epoch(r.progress);
  const size_t agreed = decode_consumed(r.progress);
  if (agreed_epoch > epoch) {
    COLLIE_CHECK(agreed_epoch == epoch + 1 && agreed == 0, "the leader is ", agreed,
                 " samples into epoch ", agreed_epoch, " while this rank has not finished epoch ",
                 epoch);
    nn::DistributedSampler old(dataset_len, plan.num_replicas(), plan.rank(), /*shuffle=*/true,
                               seed);
    old.set_epoch(static_cast<uint64_t>(agreed_epoch));
    return {agreed_epoch, nn::EpochPlan(old, plan.batch_size()).reshard(0, r.new_world, r.new_rank),
            0, true};
  }
  COLLIE_CHECK(agreed_epoch == epoch, "the leader is in epoch ", agreed_epoch,
               ", behind this rank's ", epoch);
  const size_t completed = plan.steps_for(agreed);
  COLLIE_CHECK(completed >= done && completed <= done + 1, "the leader completed ", completed,
               " steps of this epoch's plan, this rank ", done,
               ": survivors cannot be more than one step apart");
  return {epoch, plan.reshard(completed, r.new_world, r.new_rank), completed, false};
}

Recovery recover(nn::DistributedDataParallel& ddp, std::shared_ptr<ProcessGroup>& holder,
                 nn::Sequential& model, nn::AdamW& optimizer, int64_t my_progress, Timeout timeout,
                 const std::function<void(const Recovery&)>& on_shrunk) {
  const auto start = std::chrono::steady_clock::now();
  Recovery r;
  r.old_world = get_world_size();
  r.old_rank = get_rank();
  shrink_group({}, {}, {.timeout = timeout}, &r.excluded);
  std::shared_ptr<ProcessGroup> group = get_default_group();
  // The old group (revoked) stays alive in `holder` until DDP has let go.
  ddp.set_process_group(*group);
  holder = group;
  r.new_world = group->size();
  r.new_rank = group->rank();
  setup_for_distributed(r.new_rank == 0);
  if (on_shrunk) on_shrunk(r);
  const nn::Agreement a = nn::agree_on_progress(*group, my_progress, timeout);
  r.progress = a.progress;
  r.leader = a.leader;
  r.state_bytes = nn::broadcast_training_state(*group, a.leader, model, optimizer, timeout);
  r.took = std::chrono::steady_clock::now() - start;
  return r;
}

}  // namespace collie::samples

namespace collie::samples {
uint64_t state_checksum(nn::Sequential& model, nn::AdamW& optimizer) {
  nn::StateDict state;
  nn::save_module_state(model, state, "model.");
  optimizer.save_state(state, "optimizer.");
  uint64_t h = 14695981039346656037ull;
  for (uint8_t b : nn::serialize_state_dict(state)) {
    h ^= b;
    h *= 1099511628211ull;
  }
  return h;
}
}  // namespace collie::samples
