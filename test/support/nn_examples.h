// Synthetic data for the DDP tests (CPU and GPU): examples [begin, begin +
// count) of an endless deterministic dataset, each example seeded by its own
// index, so that any shard of any batch is the same on every rank and in a
// single reference process.
#pragma once

#include <cstdint>
#include <vector>

#include "collie/nn/generator.h"
#include "collie/nn/tensor.h"

namespace collie::test {

inline void make_examples(int64_t begin, int64_t count, int64_t features, int64_t classes,
                          nn::Tensor& x, std::vector<int64_t>& labels) {
  x.resize({count, features});
  labels.resize(count);
  for (int64_t e = 0; e < count; ++e) {
    nn::Generator g(1000 + begin + e);
    for (int64_t f = 0; f < features; ++f) x[e * features + f] = g.uniform(-1.0f, 1.0f);
    labels[e] = (begin + e) % classes;
  }
}

}  // namespace collie::test
