// DistributedSampler: which dataset indices this rank visits in an epoch,
// bit-identical to torch.utils.data.DistributedSampler (1.13) for the same
// arguments, so a collie program and a PyTorch job with the same seed see the
// same data in the same order.
//
// torch's rule, reproduced step by step in indices():
//  - num_samples = ceil(len / replicas), or with drop_last and a len not
//    divisible by replicas, ceil((len - replicas) / replicas); total_size =
//    num_samples * replicas.
//  - the order is randperm(len) from a CPU generator seeded with seed + epoch
//    when shuffling (Generator + the Fisher-Yates in randperm()), else 0..len-1.
//  - without drop_last the list is padded to total_size by repeating it from
//    the start (several times when the padding exceeds len); with drop_last
//    it is truncated to total_size.
//  - rank r takes positions r, r + replicas, r + 2 * replicas, ...
//
// remaining_indices() re-deals the rest of an epoch over survivors of a
// failure (docs/nn.md, "Surviving a failure").
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "collie/nn/generator.h"

namespace collie::nn {

// torch.randperm(n, generator=g) on the CPU (1.13): start from 0..n-1 and for
// i in [0, n-1) swap i with i + (random() % (n - i)), one 32-bit output each.
std::vector<int64_t> randperm(int64_t n, Generator& generator);

class DistributedSampler {
 public:
  // Throws InvalidArgument when num_replicas < 1 or rank is outside
  // [0, num_replicas), as torch raises ValueError.
  DistributedSampler(size_t dataset_len, int num_replicas, int rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);

  // Call at the start of every epoch, before indices(), so that each epoch
  // gets a different order (the same on every rank).
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  uint64_t epoch() const { return epoch_; }

  std::vector<int64_t> indices() const;
  // The epoch's whole list before it is dealt out: the order, padded or
  // truncated to total_size(); rank r's indices() are its positions r,
  // r + replicas, ... Positions below real_size() hold distinct samples,
  // the ones after them repeat the list's first ones (torch's padding).
  std::vector<int64_t> global_order() const;
  size_t real_size() const { return std::min(dataset_len_, total_size()); }
  // What is left of this epoch for another world (a shrunk group): the
  // positions of global_order() from `consumed` to real_size() (every rank
  // passes the same `consumed`: the global samples already trained on),
  // dealt as torch deals (rank r of num_replicas takes positions consumed +
  // r, consumed + r + num_replicas, ...) but never padded, so that every
  // sample the old world had not used is used exactly once; shares differ
  // by at most one. The old padding is dropped; with drop_last, the tail
  // torch drops stays dropped. See nn/epoch_plan.h for the steps.
  std::vector<int64_t> remaining_indices(size_t consumed, int num_replicas, int rank) const;
  // num_samples: how many indices each rank gets per epoch.
  size_t size() const { return num_samples_; }
  size_t total_size() const { return num_samples_ * static_cast<size_t>(num_replicas_); }
  int num_replicas() const { return num_replicas_; }
  int rank() const { return rank_; }

 private:
  size_t dataset_len_;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  uint64_t epoch_ = 0;
  size_t num_samples_;
};

}  // namespace collie::nn
