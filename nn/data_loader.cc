#include "collie/nn/data_loader.h"

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie::nn {

InMemoryDataset::InMemoryDataset(Tensor inputs, std::vector<int64_t> labels)
    : inputs_(std::move(inputs)), labels_(std::move(labels)) {
  COLLIE_ARG_CHECK_GE(inputs_.ndim(), 1u,
                      "InMemoryDataset inputs need a leading example dimension");
  COLLIE_ARG_CHECK_EQ(static_cast<size_t>(inputs_.dim(0)), labels_.size(), "one label per example");
  example_numel_ = labels_.empty() ? 0 : inputs_.numel() / labels_.size();
}

Shape InMemoryDataset::example_shape() const {
  return Shape(inputs_.shape().begin() + 1, inputs_.shape().end());
}

int64_t InMemoryDataset::get(int64_t index, std::span<float> input) const {
  COLLIE_ARG_CHECK(index >= 0 && static_cast<size_t>(index) < labels_.size(), "dataset index ",
                   index, " outside [0, ", labels_.size(), ")");
  COLLIE_ARG_CHECK_EQ(input.size(), example_numel_, "example buffer size");
  const float* src = inputs_.data() + static_cast<size_t>(index) * example_numel_;
  std::copy(src, src + example_numel_, input.data());
  return labels_[static_cast<size_t>(index)];
}

namespace {

size_t count_batches(size_t n, const DataLoaderOptions& o) {
  COLLIE_ARG_CHECK_GT(o.batch_size, 0u, "DataLoader batch_size");
  COLLIE_ARG_CHECK_GT(o.prefetch, 0u, "DataLoader prefetch");
  return o.drop_last ? n / o.batch_size : (n + o.batch_size - 1) / o.batch_size;
}

}  // namespace

DataLoader::DataLoader(const Dataset& dataset, std::vector<int64_t> indices,
                       DataLoaderOptions options)
    : dataset_(dataset),
      indices_(std::move(indices)),
      options_(options),
      num_batches_(count_batches(indices_.size(), options)),
      thread_([this] { produce(); }) {}

DataLoader::~DataLoader() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Batch collate(const Dataset& dataset, std::span<const int64_t> indices) {
  Shape shape = dataset.example_shape();
  const size_t example = shape_numel(shape);
  shape.insert(shape.begin(), static_cast<int64_t>(indices.size()));
  Batch batch;
  batch.inputs.resize(shape);
  batch.indices.assign(indices.begin(), indices.end());
  batch.labels.resize(indices.size());
  for (size_t i = 0; i < indices.size(); ++i)
    batch.labels[i] =
        dataset.get(batch.indices[i], batch.inputs.span().subspan(i * example, example));
  return batch;
}

Batch DataLoader::make_batch(size_t b) const {
  const size_t begin = b * options_.batch_size;
  const size_t end = std::min(begin + options_.batch_size, indices_.size());
  return collate(dataset_, std::span<const int64_t>(indices_).subspan(begin, end - begin));
}

void DataLoader::produce() {
  try {
    for (size_t b = 0; b < num_batches_; ++b) {
      {
        // Wait for room: at most `prefetch` batches ahead of the consumer.
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || ready_.size() < options_.prefetch; });
        if (stop_) break;
      }
      Batch batch = make_batch(b);  // outside the lock: this is the slow part
      {
        std::lock_guard lock(mu_);
        ready_.push_back(std::move(batch));
      }
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard lock(mu_);
    error_ = std::current_exception();
  }
  {
    std::lock_guard lock(mu_);
    producer_done_ = true;
  }
  cv_.notify_all();
}

std::optional<Batch> DataLoader::next() {
  std::unique_lock lock(mu_);
  if (consumed_ == num_batches_) return std::nullopt;
  Deadline deadline(options_.timeout);
  const bool ok =
      cv_.wait_until(lock, deadline.when(), [&] { return !ready_.empty() || producer_done_; });
  if (!ok)
    throw TimeoutError(str_cat("DataLoader: batch ", consumed_, " of ", num_batches_, " not ready ",
                               deadline.describe()));
  if (ready_.empty()) {
    if (error_) std::rethrow_exception(error_);
    throw Error(str_cat("DataLoader: the loader thread stopped after ", consumed_, " of ",
                        num_batches_, " batches"));
  }
  Batch batch = std::move(ready_.front());
  ready_.pop_front();
  ++consumed_;
  lock.unlock();
  cv_.notify_all();
  return batch;
}

}  // namespace collie::nn
