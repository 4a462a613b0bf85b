#include "collie/nn/layers.h"

#include <cmath>

#include "collie/base/str_cat.h"

namespace collie::nn {

namespace {

// Fills `p` with U(-bound, bound) from `g`, in element order, as torch's
// Tensor.uniform_ does on the CPU.
template <typename T>
void uniform_init(BasicParameter<T>& p, double bound, Generator& g) {
  const float from = static_cast<float>(-bound), to = static_cast<float>(bound);
  for (size_t i = 0; i < p.numel(); ++i) p.data()[i] = static_cast<T>(g.uniform(from, to));
}

template <typename T>
void check_batch(const BasicTensor<T>& input, int64_t features, const std::string& who) {
  COLLIE_ARG_CHECK(input.ndim() == 2 && input.dim(1) == features, who, " expects input [batch, ",
                   features, "], got ", shape_to_string(input.shape()));
}

}  // namespace

template <typename T>
BasicLinear<T>::BasicLinear(int64_t in_features, int64_t out_features, Generator& generator,
                            bool bias)
    : in_(in_features),
      out_(out_features),
      has_bias_(bias),
      weight_("weight", {out_features, in_features}),
      bias_("bias", {bias ? out_features : 0}) {
  COLLIE_ARG_CHECK(in_features > 0 && out_features > 0, "Linear(", in_features, ", ", out_features,
                   "): sizes must be positive");
  // kaiming_uniform_(a=sqrt(5)): gain sqrt(2 / (1 + 5)), std gain/sqrt(fan_in),
  // bound sqrt(3) * std, which is 1/sqrt(fan_in); computed in double as torch's
  // Python code does.
  const double gain = std::sqrt(2.0 / (1.0 + 5.0));
  const double bound = std::sqrt(3.0) * (gain / std::sqrt(static_cast<double>(in_features)));
  uniform_init(weight_, bound, generator);
  if (has_bias_) uniform_init(bias_, 1.0 / std::sqrt(static_cast<double>(in_features)), generator);
}

template <typename T>
std::string BasicLinear<T>::describe() const {
  return str_cat("Linear(in_features=", in_, ", out_features=", out_,
                 ", bias=", has_bias_ ? "True" : "False", ")");
}

template <typename T>
void BasicLinear<T>::forward(const BasicTensor<T>& input, BasicTensor<T>& output) {
  check_batch(input, in_, describe());
  output.resize({input.dim(0), out_});
  auto x = input.matrix();
  auto y = output.matrix();
  typename BasicTensor<T>::ConstMatrixMap w(weight_.data(), out_, in_);
  y.noalias() = x * w.transpose();
  if (has_bias_) y.rowwise() += bias_.value().vector().transpose();
}

template <typename T>
void BasicLinear<T>::backward(const BasicTensor<T>& input, const BasicTensor<T>& /*output*/,
                              const BasicTensor<T>& grad_output, BasicTensor<T>* grad_input) {
  auto x = input.matrix();
  auto dy = grad_output.matrix();
  // dW += dY^T X and db += column sums of dY: accumulate, as torch does.
  weight_.grad_matrix(out_, in_).noalias() += dy.transpose() * x;
  if (has_bias_) bias_.grad_matrix(1, out_).noalias() += dy.colwise().sum();
  // The parameters are final before the input's gradient is computed, so that
  // DDP can start reducing them while we do the (larger) product below.
  if (has_bias_) bias_.mark_grad_ready();
  weight_.mark_grad_ready();
  if (grad_input) {
    grad_input->resize(input.shape());
    typename BasicTensor<T>::ConstMatrixMap w(weight_.data(), out_, in_);
    grad_input->matrix().noalias() = dy * w;
  }
}

template <typename T>
std::vector<std::pair<std::string, BasicParameter<T>*>> BasicLinear<T>::named_parameters() {
  std::vector<std::pair<std::string, BasicParameter<T>*>> out{{"weight", &weight_}};
  if (has_bias_) out.emplace_back("bias", &bias_);
  return out;
}

template <typename T>
void BasicReLU<T>::forward(const BasicTensor<T>& input, BasicTensor<T>& output) {
  output.resize(input.shape());
  output.vector() = input.vector().cwiseMax(T(0));
}

template <typename T>
void BasicReLU<T>::backward(const BasicTensor<T>& /*input*/, const BasicTensor<T>& output,
                            const BasicTensor<T>& grad_output, BasicTensor<T>* grad_input) {
  if (!grad_input) return;
  grad_input->resize(output.shape());
  // The output is positive exactly where the input was.
  grad_input->vector() = (output.vector().array() > T(0)).select(grad_output.vector(), T(0));
}

template <typename T>
BasicDropout<T>::BasicDropout(double p, uint64_t seed) : p_(p), generator_(seed) {
  COLLIE_ARG_CHECK(p >= 0.0 && p < 1.0, "Dropout probability must be in [0, 1), got ", p);
}

template <typename T>
std::string BasicDropout<T>::describe() const {
  return str_cat("Dropout(p=", p_, ")");
}

template <typename T>
void BasicDropout<T>::forward(const BasicTensor<T>& input, BasicTensor<T>& output) {
  output.resize(input.shape());
  if (!this->training_ || p_ == 0.0) {
    output.vector() = input.vector();
    return;
  }
  mask_.resize(input.shape());
  const T scale = static_cast<T>(1.0 / (1.0 - p_));
  // Compare 24 random bits against p: enough resolution for a dropout rate.
  const uint32_t threshold = static_cast<uint32_t>(p_ * static_cast<double>(1u << 24));
  for (size_t i = 0; i < mask_.numel(); ++i)
    mask_[i] = (generator_.random() & ((1u << 24) - 1)) < threshold ? T(0) : scale;
  output.vector() = input.vector().cwiseProduct(mask_.vector());
}

template <typename T>
void BasicDropout<T>::backward(const BasicTensor<T>& input, const BasicTensor<T>& /*output*/,
                               const BasicTensor<T>& grad_output, BasicTensor<T>* grad_input) {
  if (!grad_input) return;
  grad_input->resize(input.shape());
  if (!this->training_ || p_ == 0.0)
    grad_input->vector() = grad_output.vector();
  else
    grad_input->vector() = grad_output.vector().cwiseProduct(mask_.vector());
}

template <typename T>
void BasicFlatten<T>::forward(const BasicTensor<T>& input, BasicTensor<T>& output) {
  COLLIE_ARG_CHECK_GE(input.ndim(), 1u, "Flatten needs a batch dimension");
  // [B, d1, d2, ...] -> [B, d1 * d2 * ...], an empty batch too (a rank's
  // empty share of a step after a failure, nn/epoch_plan.h).
  int64_t features = 1;
  for (size_t i = 1; i < input.ndim(); ++i) features *= input.dim(i);
  output.resize({input.dim(0), features});
  std::copy(input.data(), input.data() + input.numel(), output.data());
}

template <typename T>
void BasicFlatten<T>::backward(const BasicTensor<T>& input, const BasicTensor<T>& /*output*/,
                               const BasicTensor<T>& grad_output, BasicTensor<T>* grad_input) {
  if (!grad_input) return;
  grad_input->resize(input.shape());
  std::copy(grad_output.data(), grad_output.data() + grad_output.numel(), grad_input->data());
}

template class BasicLinear<float>;
template class BasicLinear<double>;
template class BasicReLU<float>;
template class BasicReLU<double>;
template class BasicDropout<float>;
template class BasicDropout<double>;
template class BasicFlatten<float>;
template class BasicFlatten<double>;

}  // namespace collie::nn
