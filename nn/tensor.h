// Tensor: an owning, contiguous, row-major array of float32 (or float64 for
// gradient checks) with a shape. The model's math goes through Eigen maps of
// it, so a layer's forward is one matrix product over the whole batch, never
// a loop of per-element virtual calls.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "collie/base/check.h"

namespace collie::nn {

using Shape = std::vector<int64_t>;

// Number of elements of `shape`; throws InvalidArgument on a negative size.
size_t shape_numel(const Shape& shape);
// "[64, 784]"
std::string shape_to_string(const Shape& shape);

template <typename T>
class BasicTensor {
 public:
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using MatrixMap = Eigen::Map<Matrix>;
  using ConstMatrixMap = Eigen::Map<const Matrix>;
  using VectorMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>;
  using ConstVectorMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>;

  BasicTensor() = default;
  // Zero-filled.
  explicit BasicTensor(Shape shape) : shape_(std::move(shape)), data_(shape_numel(shape_)) {}
  BasicTensor(Shape shape, std::vector<T> data) : shape_(std::move(shape)), data_(std::move(data)) {
    COLLIE_ARG_CHECK_EQ(data_.size(), shape_numel(shape_), "data for shape ",
                        shape_to_string(shape_));
  }

  const Shape& shape() const { return shape_; }
  size_t ndim() const { return shape_.size(); }
  int64_t dim(size_t i) const { return shape_.at(i); }
  size_t numel() const { return data_.size(); }
  bool empty() const { return data_.empty(); }

  T* data() { return data_.data(); }
  const T* data() const { return data_.data(); }
  std::span<T> span() { return data_; }
  std::span<const T> span() const { return data_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

  // Changes the shape, keeping the allocation when it is big enough (the
  // layers resize their outputs every step). Contents are unspecified.
  void resize(Shape shape) {
    data_.resize(shape_numel(shape));
    shape_ = std::move(shape);
  }
  // Same elements, new shape.
  void reshape(Shape shape) {
    COLLIE_ARG_CHECK_EQ(shape_numel(shape), data_.size(), "reshape ", shape_to_string(shape_),
                        " to ", shape_to_string(shape));
    shape_ = std::move(shape);
  }
  void fill(T value) { std::fill(data_.begin(), data_.end(), value); }

  // The tensor as a [dim(0), numel / dim(0)] row-major matrix: a batch of rows.
  MatrixMap matrix() { return MatrixMap(data(), rows(), cols()); }
  ConstMatrixMap matrix() const { return ConstMatrixMap(data(), rows(), cols()); }
  VectorMap vector() { return VectorMap(data(), static_cast<Eigen::Index>(numel())); }
  ConstVectorMap vector() const {
    return ConstVectorMap(data(), static_cast<Eigen::Index>(numel()));
  }

 private:
  Eigen::Index rows() const { return shape_.empty() ? 1 : static_cast<Eigen::Index>(shape_[0]); }
  Eigen::Index cols() const {
    Eigen::Index r = rows();
    return r == 0 ? 0 : static_cast<Eigen::Index>(numel()) / r;
  }

  Shape shape_;
  std::vector<T> data_;
};

using Tensor = BasicTensor<float>;

}  // namespace collie::nn
