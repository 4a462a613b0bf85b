#include "collie/nn/sequential.h"

#include "collie/base/str_cat.h"

namespace collie::nn {

template <typename T>
BasicSequential<T>& BasicSequential<T>::add(std::unique_ptr<BasicModule<T>> layer) {
  COLLIE_ARG_CHECK(layer != nullptr, "Sequential::add(nullptr)");
  layer->train(this->training_);
  layers_.push_back(std::move(layer));
  return *this;
}

template <typename T>
const BasicTensor<T>& BasicSequential<T>::forward(const BasicTensor<T>& input) {
  activations_.resize(layers_.size() + 1);
  activations_[0] = input;
  for (size_t i = 0; i < layers_.size(); ++i)
    layers_[i]->forward(activations_[i], activations_[i + 1]);
  return activations_.back();
}

template <typename T>
void BasicSequential<T>::backward(const BasicTensor<T>& grad_output) {
  backward_layers(grad_output, nullptr);
}

template <typename T>
void BasicSequential<T>::backward_layers(const BasicTensor<T>& grad_output,
                                         BasicTensor<T>* grad_input) {
  COLLIE_ARG_CHECK(activations_.size() == layers_.size() + 1,
                   "Sequential::backward before forward");
  COLLIE_ARG_CHECK(grad_output.shape() == activations_.back().shape(),
                   "Sequential::backward: gradient shape ", shape_to_string(grad_output.shape()),
                   " differs from the output's ", shape_to_string(activations_.back().shape()));
  if (layers_.empty()) {
    if (grad_input) *grad_input = grad_output;
    return;
  }
  // The first layer that has parameters is the last one that needs an input
  // gradient: layers before it (Flatten) have nothing to learn.
  size_t first_with_params = layers_.size();
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!layers_[i]->named_parameters().empty()) {
      first_with_params = i;
      break;
    }
  }
  const BasicTensor<T>* upstream = &grad_output;
  for (size_t k = layers_.size(); k-- > 0;) {
    BasicTensor<T>* downstream = nullptr;
    if (k == 0)
      downstream = grad_input;
    else if (k > first_with_params || grad_input)
      downstream = (upstream == &grad_a_) ? &grad_b_ : &grad_a_;
    layers_[k]->backward(activations_[k], activations_[k + 1], *upstream, downstream);
    if (!downstream) break;
    upstream = downstream;
  }
}

template <typename T>
std::string BasicSequential<T>::describe() const {
  std::string out = "Sequential(\n";
  for (size_t i = 0; i < layers_.size(); ++i)
    out += str_cat("  (", i, "): ", layers_[i]->describe(), "\n");
  return out + ")";
}

template <typename T>
void BasicSequential<T>::forward(const BasicTensor<T>& input, BasicTensor<T>& output) {
  output = forward(input);
}

template <typename T>
void BasicSequential<T>::backward(const BasicTensor<T>& /*input*/, const BasicTensor<T>& /*output*/,
                                  const BasicTensor<T>& grad_output, BasicTensor<T>* grad_input) {
  backward_layers(grad_output, grad_input);
}

template <typename T>
std::vector<std::pair<std::string, BasicParameter<T>*>> BasicSequential<T>::named_parameters() {
  std::vector<std::pair<std::string, BasicParameter<T>*>> out;
  for (size_t i = 0; i < layers_.size(); ++i)
    for (auto& [name, p] : layers_[i]->named_parameters())
      out.emplace_back(str_cat(i, ".", name), p);
  return out;
}

template <typename T>
void BasicSequential<T>::train(bool on) {
  this->training_ = on;
  for (auto& layer : layers_) layer->train(on);
}

template <typename T>
BasicSequential<T> make_mlp(const MlpOptions& options) {
  COLLIE_ARG_CHECK_GE(options.sizes.size(), 2u, "make_mlp needs at least input and output sizes");
  BasicSequential<T> model;
  Generator init(options.seed);
  if (options.flatten) model.add(std::make_unique<BasicFlatten<T>>());
  for (size_t i = 0; i + 1 < options.sizes.size(); ++i) {
    model.add(std::make_unique<BasicLinear<T>>(options.sizes[i], options.sizes[i + 1], init));
    if (i + 2 < options.sizes.size()) {
      model.add(std::make_unique<BasicReLU<T>>());
      if (options.dropout > 0)
        model.add(std::make_unique<BasicDropout<T>>(options.dropout, options.dropout_seed + i));
    }
  }
  return model;
}

template class BasicSequential<float>;
template class BasicSequential<double>;
template BasicSequential<float> make_mlp<float>(const MlpOptions&);
template BasicSequential<double> make_mlp<double>(const MlpOptions&);

}  // namespace collie::nn
