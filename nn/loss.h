// Softmax cross-entropy over a batch of logits, averaged over the batch
// (torch.nn.functional.cross_entropy with reduction='mean'), and accuracy.
#pragma once

#include <cstdint>
#include <span>

#include "collie/nn/tensor.h"

namespace collie::nn {

// logits [B, C], labels in [0, C). Returns the mean loss; when grad_logits
// is given, writes d(loss)/d(logits) = (softmax - onehot) / B there. Uses
// the log-sum-exp shift, so large logits never overflow.
template <typename T>
T cross_entropy(const BasicTensor<T>& logits, std::span<const int64_t> labels,
                BasicTensor<T>* grad_logits = nullptr);

// How many rows' argmax equals the label.
template <typename T>
int64_t count_correct(const BasicTensor<T>& logits, std::span<const int64_t> labels);

}  // namespace collie::nn
