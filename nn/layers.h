// The layers of an MLP: Linear, ReLU, Dropout, Flatten. Each is a thin
// wrapper around Eigen expressions over the whole batch.
#pragma once

#include <cstdint>

#include "collie/nn/generator.h"
#include "collie/nn/module.h"

namespace collie::nn {

// y = x W^T + b, W of shape [out, in], as torch.nn.Linear. Initialised as
// torch does (kaiming_uniform_(a=sqrt(5)) for W, i.e. U(-1/sqrt(in),
// 1/sqrt(in)), and the same bound for b), drawing W then b from `generator`:
// with a generator seeded like torch.manual_seed(s), the values equal torch's.
template <typename T>
class BasicLinear : public BasicModule<T> {
 public:
  BasicLinear(int64_t in_features, int64_t out_features, Generator& generator, bool bias = true);

  std::string describe() const override;
  void forward(const BasicTensor<T>& input, BasicTensor<T>& output) override;
  void backward(const BasicTensor<T>& input, const BasicTensor<T>& output,
                const BasicTensor<T>& grad_output, BasicTensor<T>* grad_input) override;
  std::vector<std::pair<std::string, BasicParameter<T>*>> named_parameters() override;

  BasicParameter<T>& weight() { return weight_; }
  BasicParameter<T>* bias() { return has_bias_ ? &bias_ : nullptr; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  bool has_bias_;
  BasicParameter<T> weight_;
  BasicParameter<T> bias_;
};

template <typename T>
class BasicReLU : public BasicModule<T> {
 public:
  std::string describe() const override { return "ReLU()"; }
  void forward(const BasicTensor<T>& input, BasicTensor<T>& output) override;
  void backward(const BasicTensor<T>& input, const BasicTensor<T>& output,
                const BasicTensor<T>& grad_output, BasicTensor<T>* grad_input) override;
};

// Zeroes each element with probability p in training and scales the rest by
// 1/(1-p) (inverted dropout, as torch); the identity in eval mode. The mask
// comes from this layer's own generator, so give each rank its own seed.
template <typename T>
class BasicDropout : public BasicModule<T> {
 public:
  explicit BasicDropout(double p = 0.5, uint64_t seed = 0);
  std::string describe() const override;
  void forward(const BasicTensor<T>& input, BasicTensor<T>& output) override;
  void backward(const BasicTensor<T>& input, const BasicTensor<T>& output,
                const BasicTensor<T>& grad_output, BasicTensor<T>* grad_input) override;

 private:
  double p_;
  Generator generator_;
  BasicTensor<T> mask_;  // 0 or 1/(1-p), for backward
};

// [B, d1, d2, ...] -> [B, d1*d2*...].
template <typename T>
class BasicFlatten : public BasicModule<T> {
 public:
  std::string describe() const override { return "Flatten()"; }
  void forward(const BasicTensor<T>& input, BasicTensor<T>& output) override;
  void backward(const BasicTensor<T>& input, const BasicTensor<T>& output,
                const BasicTensor<T>& grad_output, BasicTensor<T>* grad_input) override;
};

using Linear = BasicLinear<float>;
using ReLU = BasicReLU<float>;
using Dropout = BasicDropout<float>;
using Flatten = BasicFlatten<float>;

}  // namespace collie::nn
