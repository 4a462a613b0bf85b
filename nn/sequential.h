// Sequential: layers run in order, like torch.nn.Sequential, holding the
// activations of the last forward so that backward can walk the layers in
// reverse. Parameter names are "<layer index>.<name>" as in torch's
// state_dict, so a checkpoint's keys read like a PyTorch one's.
#pragma once

#include <initializer_list>
#include <memory>
#include <vector>

#include "collie/nn/layers.h"
#include "collie/nn/module.h"

namespace collie::nn {

template <typename T>
class BasicSequential : public BasicModule<T> {
 public:
  BasicSequential() = default;

  BasicSequential& add(std::unique_ptr<BasicModule<T>> layer);
  size_t size() const { return layers_.size(); }
  BasicModule<T>& layer(size_t i) { return *layers_.at(i); }

  // Runs the batch through every layer; the result stays valid until the
  // next forward.
  const BasicTensor<T>& forward(const BasicTensor<T>& input);
  // Backward from the gradient of the last forward's output. Parameter
  // gradients accumulate; each parameter's hook fires as soon as its
  // gradient is final, last layer first.
  void backward(const BasicTensor<T>& grad_output);

  std::string describe() const override;
  void forward(const BasicTensor<T>& input, BasicTensor<T>& output) override;
  void backward(const BasicTensor<T>& input, const BasicTensor<T>& output,
                const BasicTensor<T>& grad_output, BasicTensor<T>* grad_input) override;
  std::vector<std::pair<std::string, BasicParameter<T>*>> named_parameters() override;
  void train(bool on = true) override;

 private:
  void backward_layers(const BasicTensor<T>& grad_output, BasicTensor<T>* grad_input);

  std::vector<std::unique_ptr<BasicModule<T>>> layers_;
  // activations_[0] is the input, activations_[i + 1] the output of layer i.
  std::vector<BasicTensor<T>> activations_;
  BasicTensor<T> grad_a_, grad_b_;  // ping-pong buffers for backward
};

using Sequential = BasicSequential<float>;

struct MlpOptions {
  std::vector<int64_t> sizes;  // {784, 256, 128, 10}: input, hidden..., classes
  double dropout = 0.0;        // after each hidden ReLU when > 0
  uint64_t seed = 0;           // initialisation, as torch.manual_seed(seed)
  uint64_t dropout_seed = 0;   // per-rank randomness: seed + rank
  bool flatten = true;         // a leading Flatten, so images [B, 1, 28, 28] work
};

// Flatten, then Linear/ReLU(/Dropout) pairs, and a last Linear to logits.
// With flatten, Linear layers sit at indices 1, 3 (or 4 with dropout), ...
template <typename T>
BasicSequential<T> make_mlp(const MlpOptions& options);

}  // namespace collie::nn
