// Parameter: one named, contiguous buffer of weights plus its gradient.
//
// The gradient normally lives in the parameter's own storage, but it can be
// moved into external storage (DistributedDataParallel puts every gradient
// inside its bucket's flat buffer, so that all_reduce runs on the bucket with
// no copy). A layer's backward accumulates into grad() (as torch does: call
// zero_grad() between steps) and then calls mark_grad_ready(), which fires
// the hook once this backward has finished with the parameter.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "collie/nn/tensor.h"

namespace collie::nn {

template <typename T>
class BasicParameter {
 public:
  using Hook = std::function<void()>;

  BasicParameter(std::string name, Shape shape)
      : name_(std::move(name)), value_(shape), own_grad_(value_.numel()), grad_(own_grad_.data()) {}
  BasicParameter(const BasicParameter&) = delete;
  BasicParameter& operator=(const BasicParameter&) = delete;

  const std::string& name() const { return name_; }
  const Shape& shape() const { return value_.shape(); }
  size_t numel() const { return value_.numel(); }

  BasicTensor<T>& value() { return value_; }
  const BasicTensor<T>& value() const { return value_; }
  T* data() { return value_.data(); }
  const T* data() const { return value_.data(); }

  T* grad() { return grad_; }
  const T* grad() const { return grad_; }
  std::span<T> grad_span() { return {grad_, numel()}; }
  std::span<const T> grad_span() const { return {grad_, numel()}; }
  // The gradient seen as the value's [rows, cols] matrix.
  typename BasicTensor<T>::MatrixMap grad_matrix(Eigen::Index rows, Eigen::Index cols) {
    return typename BasicTensor<T>::MatrixMap(grad_, rows, cols);
  }
  void zero_grad() { std::fill(grad_, grad_ + numel(), T(0)); }

  // Moves the gradient into `storage` (numel() elements, owned by the
  // caller, alive until use_own_grad_storage()); the current gradient is
  // copied over.
  void use_grad_storage(T* storage) {
    std::copy(grad_, grad_ + numel(), storage);
    grad_ = storage;
  }
  void use_own_grad_storage() {
    if (grad_ == own_grad_.data()) return;
    std::copy(grad_, grad_ + numel(), own_grad_.data());
    grad_ = own_grad_.data();
  }
  bool uses_external_grad_storage() const { return grad_ != own_grad_.data(); }

  void set_grad_ready_hook(Hook hook) { hook_ = std::move(hook); }
  void mark_grad_ready() {
    if (hook_) hook_();
  }

 private:
  std::string name_;
  BasicTensor<T> value_;
  std::vector<T> own_grad_;
  T* grad_;
  Hook hook_;
};

using Parameter = BasicParameter<float>;

}  // namespace collie::nn
