// Module: one layer of the model (or a Sequential of them). The interface is
// batch-at-a-time and keeps no hidden autograd graph: forward writes the
// output for a whole batch; backward gets the same input and output back
// (Sequential keeps the activations) together with the output's gradient,
// accumulates the parameters' gradients, announces each one as final through
// Parameter::mark_grad_ready(), and writes the input's gradient when asked.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collie/nn/parameter.h"
#include "collie/nn/tensor.h"

namespace collie::nn {

template <typename T>
class BasicModule {
 public:
  virtual ~BasicModule() = default;

  // "Linear(in_features=784, out_features=256)"
  virtual std::string describe() const = 0;
  virtual void forward(const BasicTensor<T>& input, BasicTensor<T>& output) = 0;
  // grad_input is nullptr when nobody needs the input's gradient (the first
  // layer), which saves the largest matrix product of the backward pass.
  virtual void backward(const BasicTensor<T>& input, const BasicTensor<T>& output,
                        const BasicTensor<T>& grad_output, BasicTensor<T>* grad_input) = 0;

  // Parameters in registration order, named as torch names them in a
  // state_dict ("weight", "0.bias" inside a Sequential).
  virtual std::vector<std::pair<std::string, BasicParameter<T>*>> named_parameters() { return {}; }
  std::vector<BasicParameter<T>*> parameters() {
    std::vector<BasicParameter<T>*> out;
    for (auto& [name, p] : named_parameters()) out.push_back(p);
    return out;
  }
  size_t num_parameters() {
    size_t n = 0;
    for (auto* p : parameters()) n += p->numel();
    return n;
  }
  void zero_grad() {
    for (auto* p : parameters()) p->zero_grad();
  }

  virtual void train(bool on = true) { training_ = on; }
  void eval() { train(false); }
  bool is_training() const { return training_; }

 protected:
  bool training_ = true;
};

using Module = BasicModule<float>;

}  // namespace collie::nn
