// Dataset and DataLoader: batches of examples in the order a sampler gives,
// with a background thread that assembles the next batches while the model
// trains on the current one (torch's DataLoader with one worker and a
// prefetch queue).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/nn/tensor.h"

namespace collie::nn {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual size_t size() const = 0;
  // The shape of one example's input ({1, 28, 28}); a batch is [B, ...].
  virtual Shape example_shape() const = 0;
  // Writes example `index`'s input into `input` (shape_numel(example_shape())
  // floats) and returns its label. Called from the loader's thread.
  virtual int64_t get(int64_t index, std::span<float> input) const = 0;
};

// Examples held in memory: inputs [N, ...] and one label each.
class InMemoryDataset : public Dataset {
 public:
  InMemoryDataset(Tensor inputs, std::vector<int64_t> labels);
  size_t size() const override { return labels_.size(); }
  Shape example_shape() const override;
  int64_t get(int64_t index, std::span<float> input) const override;

 private:
  Tensor inputs_;
  std::vector<int64_t> labels_;
  size_t example_numel_;
};

struct Batch {
  Tensor inputs;                 // [B, example_shape...]
  std::vector<int64_t> labels;   // B
  std::vector<int64_t> indices;  // the dataset indices, in order
};

// The batch of `indices` (in that order) of `dataset`, without a loader:
// what DataLoader's thread builds; an empty list gives a [0, ...] batch.
Batch collate(const Dataset& dataset, std::span<const int64_t> indices);

struct DataLoaderOptions {
  size_t batch_size = 64;
  bool drop_last = false;           // drop a last, smaller batch
  size_t prefetch = 2;              // batches prepared ahead (the queue bound)
  Timeout timeout = kUnsetTimeout;  // for one batch; kUnsetTimeout: kDefaultTimeout
};

// One pass over `indices` (a sampler's indices() for this epoch). The
// background thread starts at construction and stops when the pass is done,
// on destruction (even mid-pass), or on the first error, which next()
// rethrows.
class DataLoader {
 public:
  DataLoader(const Dataset& dataset, std::vector<int64_t> indices, DataLoaderOptions options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch, or std::nullopt after the last one.
  std::optional<Batch> next();
  size_t num_batches() const { return num_batches_; }

 private:
  void produce();
  Batch make_batch(size_t b) const;

  const Dataset& dataset_;
  const std::vector<int64_t> indices_;
  const DataLoaderOptions options_;
  const size_t num_batches_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  size_t consumed_ = 0;
  bool stop_ = false;
  bool producer_done_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace collie::nn
