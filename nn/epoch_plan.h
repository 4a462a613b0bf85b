// EpochPlan: one epoch's training steps, as positions of the epoch's global
// order (DistributedSampler::global_order(), the same list on every rank),
// so that the world can change in the middle of an epoch without a sample
// being lost or used twice.
//
// Without a failure a plan is exactly what DataLoader(sampler.indices(),
// {.batch_size = B}) gives every rank: step k is the global batch of
// positions [k*W*B, (k+1)*W*B) and rank r takes the positions r, r + W, ...
// of it (torch's interleave), the last step smaller. A step is therefore a
// contiguous block of the order and "how far the epoch got" is one number,
// consumed_after(k), the same on every rank.
//
// After a failure the survivors agree how many steps completed (the
// furthest survivor's count; docs/nn.md) and reshard(): the rest of the
// real samples (positions up to sampler.real_size(); the old world's
// padding is dropped) dealt over the new world, never padded. Its first
// step is the old world's step in flight, its whole global batch of W*B
// dealt over the W' survivors (so the step is redone with the same
// samples); after it come global batches of W'*B. A rank's share of a step
// can be one sample smaller than another's, or, in a last step with fewer
// samples than ranks, empty: every rank still runs every step (the trainer
// weights each rank's loss by its share, see batch_weight()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "collie/nn/distributed_sampler.h"

namespace collie::nn {

class EpochPlan {
 public:
  // The whole epoch of `sampler` (its epoch, world and rank), in steps of
  // `batch_size` per rank.
  EpochPlan(const DistributedSampler& sampler, size_t batch_size);

  // The rest of the epoch once `completed` steps of this plan are done,
  // over `num_replicas` ranks, this one being `rank`: the first step is
  // this plan's step `completed` re-dealt, then global batches of
  // num_replicas * batch_size. Throws InvalidArgument for a bad rank or
  // completed > num_steps().
  EpochPlan reshard(size_t completed, int num_replicas, int rank) const;

  // The rest of the epoch from position `consumed` of the order (a step
  // boundary: no step in flight), dealt over `num_replicas` ranks in global
  // batches of num_replicas * batch_size, the padding dropped as in
  // reshard(). What a group that grew (a replacement joined) trains: the
  // members call it on their plan with consumed_after(done), the joiner on
  // its own plan of the epoch (any world: the positions below
  // sampler.real_size() are the same) with the position it was told.
  EpochPlan rest_from(size_t consumed, int num_replicas, int rank) const;

  size_t num_steps() const;
  int num_replicas() const { return replicas_; }
  int rank() const { return rank_; }
  size_t batch_size() const { return batch_size_; }
  // Positions of the epoch's order that are trained on once `steps` steps
  // of this plan have completed (counted from the epoch's start, whatever
  // plans came before this one).
  size_t consumed_after(size_t steps) const;
  // The inverse: the number of steps whose completion consumed exactly
  // `consumed`; throws InvalidArgument when no step boundary is there.
  size_t steps_for(size_t consumed) const;
  // The dataset indices rank `rank` trains on in step `step`, in order.
  std::vector<int64_t> batch_of(int rank, size_t step) const;
  std::vector<int64_t> batch(size_t step) const { return batch_of(rank_, step); }
  // The size of step `step`'s global batch (every rank's share together).
  size_t global_batch_size(size_t step) const;
  // What to multiply this rank's mean loss gradient by so that DDP's
  // average over ranks is the mean over the global batch: share * W /
  // global. 1 when every share is batch_size (every step without a
  // failure but a short last one), 0 for an empty share.
  float batch_weight(size_t step) const;

 private:
  EpochPlan() = default;

  std::shared_ptr<const std::vector<int64_t>> order_;  // the epoch's global order
  size_t real_end_ = 0;  // positions past it repeat earlier ones (padding)
  size_t begin_ = 0;     // this plan's first position
  size_t end_ = 0;       // one past its last
  size_t first_ = 0;     // its first step's global batch
  size_t batch_size_ = 1;
  int replicas_ = 1;
  int rank_ = 0;
};

}  // namespace collie::nn
