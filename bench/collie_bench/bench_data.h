// Buffers for collie-bench: filled with values whose reduction is exact in
// every dtype (small integers), so that -c 1 can count wrong elements
// against a reference computed locally, like nccl-tests' #wrong column.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collie/base/types.h"

namespace collie::bench {

// Element i of rank r's input for `op`.
double input_value(ReduceOp op, int rank, size_t i);
// What element i of the reduction of every rank's input must be, in
// `dtype`'s arithmetic.
double reduced_value(ReduceOp op, int world, size_t i, DataType dtype);

// A host buffer of `count` elements of `dtype`.
class HostBuffer {
 public:
  HostBuffer(DataType dtype, size_t count);
  TensorView view() { return TensorView{bytes_.data(), count_, dtype_, Device::cpu()}; }
  TensorView view(size_t offset, size_t count);
  size_t count() const { return count_; }

  void set(size_t i, double v);
  double get(size_t i) const;
  // Fills elements [begin, begin + n) with input_value(op, rank, begin + k).
  void fill_input(ReduceOp op, int rank, size_t begin, size_t n);
  void zero();

 private:
  DataType dtype_;
  size_t count_;
  std::vector<uint8_t> bytes_;
};

// Elements whose value differs from want(i) by more than the dtype's
// rounding allows.
template <typename Want>
int64_t count_wrong(const HostBuffer& buf, size_t begin, size_t n, DataType dtype, Want want);

bool close_enough(double got, double want, DataType dtype);

// Tells stderr about the first wrong element of a check, so that a failing
// run says what it got.
void report_first_wrong(size_t index, double got, double want);

template <typename Want>
int64_t count_wrong(const HostBuffer& buf, size_t begin, size_t n, DataType dtype, Want want) {
  int64_t wrong = 0;
  for (size_t k = 0; k < n; ++k) {
    double got = buf.get(begin + k), expected = want(begin + k);
    if (!close_enough(got, expected, dtype) && wrong++ == 0)
      report_first_wrong(begin + k, got, expected);
  }
  return wrong;
}

}  // namespace collie::bench
