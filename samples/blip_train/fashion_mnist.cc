#include "collie/samples/blip_train/fashion_mnist.h"

#include <random>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/samples/blip_train/idx_file.h"

namespace collie::samples {
namespace {

// The training set's pixel mean and standard deviation (on [0, 1]).
constexpr float kMean = 0.2860f;
constexpr float kStd = 0.3530f;

}  // namespace

ImageDataset load_fashion_mnist(const std::string& dir, bool train) {
  const std::string prefix = dir + (train ? "/train" : "/t10k");
  const std::string image_path = prefix + "-images-idx3-ubyte.gz";
  const std::string label_path = prefix + "-labels-idx1-ubyte.gz";
  IdxArray images = read_idx_file(image_path);
  IdxArray labels = read_idx_file(label_path);
  if (images.dims.size() != 3 || images.dims[1] != kImageSide || images.dims[2] != kImageSide)
    throw Error(str_cat(image_path, ": expected N x 28 x 28 images, got ", images.dims.size(),
                        " dimensions"));
  if (labels.dims.size() != 1)
    throw Error(
        str_cat(label_path, ": expected a 1-dimensional label array, got ", labels.dims.size()));
  if (images.dims[0] != labels.dims[0])
    throw Error(str_cat(image_path, " has ", images.dims[0], " images but ", label_path, " has ",
                        labels.dims[0], " labels"));
  ImageDataset out;
  out.labels.resize(labels.dims[0]);
  for (size_t i = 0; i < out.labels.size(); ++i) {
    if (labels.data[i] >= kNumClasses)
      throw Error(str_cat(label_path, ": label ", int(labels.data[i]), " at index ", i,
                          " is not a class (0-9)"));
    out.labels[i] = labels.data[i];
  }
  out.images.resize(images.data.size());
  for (size_t i = 0; i < images.data.size(); ++i)
    out.images[i] = (static_cast<float>(images.data[i]) / 255.0f - kMean) / kStd;
  return out;
}

ImageDataset make_synthetic(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  // One fixed template per class; each image is its template plus noise.
  std::vector<float> templates(kNumClasses * kImagePixels);
  std::mt19937_64 template_rng(12345);
  for (auto& v : templates) v = noise(template_rng);
  ImageDataset out;
  out.images.resize(n * kImagePixels);
  out.labels.resize(n);
  for (size_t i = 0; i < n; ++i) {
    int label = static_cast<int>(rng() % kNumClasses);
    out.labels[i] = label;
    for (int p = 0; p < kImagePixels; ++p)
      out.images[i * kImagePixels + p] = templates[label * kImagePixels + p] + 1.5f * noise(rng);
  }
  return out;
}

}  // namespace collie::samples
