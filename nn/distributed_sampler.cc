#include "collie/nn/distributed_sampler.h"

#include "collie/base/check.h"

namespace collie::nn {

std::vector<int64_t> randperm(int64_t n, Generator& generator) {
  COLLIE_ARG_CHECK_GE(n, 0, "randperm size");
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = i;
  // The modulo's bias is torch's too: matching it matters more than fixing it.
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t z = static_cast<int64_t>(generator.random() % static_cast<uint64_t>(n - i));
    std::swap(out[i], out[i + z]);
  }
  return out;
}

DistributedSampler::DistributedSampler(size_t dataset_len, int num_replicas, int rank, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : dataset_len_(dataset_len),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  COLLIE_ARG_CHECK_GE(num_replicas, 1, "DistributedSampler num_replicas");
  COLLIE_ARG_CHECK(rank >= 0 && rank < num_replicas, "Invalid rank ", rank,
                   ", rank should be in the interval [0, ", num_replicas - 1, "]");
  const size_t r = static_cast<size_t>(num_replicas);
  if (drop_last && dataset_len % r != 0)
    // ceil((len - r) / r) == floor(len / r) for len % r != 0 and len >= 0;
    // torch's formula gives 0 for len < r too (math.ceil of a negative > -1).
    num_samples_ = dataset_len / r;
  else
    num_samples_ = (dataset_len + r - 1) / r;
}

std::vector<int64_t> DistributedSampler::global_order() const {
  std::vector<int64_t> order;
  if (shuffle_) {
    // torch: g.manual_seed(self.seed + self.epoch), a Python int that torch
    // takes modulo 2^64; the generator then keeps its low 32 bits.
    Generator g(seed_ + epoch_);
    order = randperm(static_cast<int64_t>(dataset_len_), g);
  } else {
    order.resize(dataset_len_);
    for (size_t i = 0; i < dataset_len_; ++i) order[i] = static_cast<int64_t>(i);
  }
  const size_t total = total_size();
  if (!drop_last_) {
    // Wrap-around padding, repeating the whole list as often as needed.
    const size_t len = order.size();
    if (len == 0) {
      COLLIE_ARG_CHECK_EQ(total, 0u, "cannot pad an empty dataset");
    } else {
      for (size_t i = len; i < total; ++i) order.push_back(order[i % len]);
    }
  } else {
    order.resize(total);
  }
  return order;
}

std::vector<int64_t> DistributedSampler::indices() const {
  const std::vector<int64_t> order = global_order();
  std::vector<int64_t> mine;
  mine.reserve(num_samples_);
  for (size_t i = static_cast<size_t>(rank_); i < order.size();
       i += static_cast<size_t>(num_replicas_))
    mine.push_back(order[i]);
  return mine;
}

std::vector<int64_t> DistributedSampler::remaining_indices(size_t consumed, int num_replicas,
                                                           int rank) const {
  COLLIE_ARG_CHECK_GE(num_replicas, 1, "remaining_indices num_replicas");
  COLLIE_ARG_CHECK(rank >= 0 && rank < num_replicas, "Invalid rank ", rank,
                   ", rank should be in the interval [0, ", num_replicas - 1, "]");
  const std::vector<int64_t> order = global_order();
  const size_t end = real_size();
  std::vector<int64_t> mine;
  for (size_t i = consumed + static_cast<size_t>(rank); i < end;
       i += static_cast<size_t>(num_replicas))
    mine.push_back(order[i]);
  return mine;
}

}  // namespace collie::nn
