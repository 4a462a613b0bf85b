#include "collie/nn/loss.h"

#include <cmath>

namespace collie::nn {

namespace {

template <typename T>
void check_logits(const BasicTensor<T>& logits, std::span<const int64_t> labels) {
  COLLIE_ARG_CHECK(logits.ndim() == 2, "cross_entropy expects logits [batch, classes], got ",
                   shape_to_string(logits.shape()));
  COLLIE_ARG_CHECK_EQ(static_cast<size_t>(logits.dim(0)), labels.size(),
                      "one label per row of logits");
  const int64_t classes = logits.dim(1);
  for (size_t i = 0; i < labels.size(); ++i)
    COLLIE_ARG_CHECK(labels[i] >= 0 && labels[i] < classes, "label ", labels[i], " of example ", i,
                     " is outside [0, ", classes, ")");
}

}  // namespace

template <typename T>
T cross_entropy(const BasicTensor<T>& logits, std::span<const int64_t> labels,
                BasicTensor<T>* grad_logits) {
  check_logits(logits, labels);
  const int64_t batch = logits.dim(0), classes = logits.dim(1);
  if (grad_logits) grad_logits->resize(logits.shape());
  if (batch == 0) return T(0);
  auto z = logits.matrix();
  double total = 0.0;
  const T inv_batch = T(1) / static_cast<T>(batch);
  for (int64_t r = 0; r < batch; ++r) {
    const T shift = z.row(r).maxCoeff();
    T sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(z(r, c) - shift);
    const T log_sum = std::log(sum);
    total += static_cast<double>(log_sum + shift - z(r, labels[r]));
    if (grad_logits) {
      auto g = grad_logits->matrix();
      for (int64_t c = 0; c < classes; ++c)
        g(r, c) = std::exp(z(r, c) - shift - log_sum) * inv_batch;
      g(r, labels[r]) -= inv_batch;
    }
  }
  return static_cast<T>(total / static_cast<double>(batch));
}

template <typename T>
int64_t count_correct(const BasicTensor<T>& logits, std::span<const int64_t> labels) {
  check_logits(logits, labels);
  auto z = logits.matrix();
  int64_t correct = 0;
  for (Eigen::Index r = 0; r < z.rows(); ++r) {
    Eigen::Index best = 0;
    z.row(r).maxCoeff(&best);
    correct += (best == labels[r]);
  }
  return correct;
}

template float cross_entropy<float>(const Tensor&, std::span<const int64_t>, Tensor*);
template double cross_entropy<double>(const BasicTensor<double>&, std::span<const int64_t>,
                                      BasicTensor<double>*);
template int64_t count_correct<float>(const Tensor&, std::span<const int64_t>);
template int64_t count_correct<double>(const BasicTensor<double>&, std::span<const int64_t>);

}  // namespace collie::nn
