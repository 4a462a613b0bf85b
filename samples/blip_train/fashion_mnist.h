// Fashion-MNIST from Debian's dataset-fashion-mnist package
// (/usr/share/datasets/fashion-mnist): 60,000 training and 10,000 test
// 28x28 grey images in 10 classes, as gzipped IDX files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace collie::samples {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr int kImageSide = 28;
inline constexpr int kImagePixels = kImageSide * kImageSide;
inline constexpr int kNumClasses = 10;

struct ImageDataset {
  std::vector<float> images;    // size() x 784, normalised (x/255 - mean) / std
  std::vector<int32_t> labels;  // size() labels in [0, 10)
  size_t size() const { return labels.size(); }
  const float* image(size_t i) const { return images.data() + i * kImagePixels; }
};

// Loads the training (train = true) or test split from `dir`. Errors name the
// file and what is wrong (missing, corrupt, wrong shape, labels out of range,
// image and label counts that disagree).
ImageDataset load_fashion_mnist(const std::string& dir, bool train);

// A deterministic synthetic stand-in with the same shapes (for --synthetic
// runs without the data): `n` images whose class is recoverable from a noisy
// class template, generated from `seed`.
ImageDataset make_synthetic(size_t n, uint64_t seed);

}  // namespace collie::samples
