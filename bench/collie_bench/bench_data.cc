#include "collie/bench/collie_bench/bench_data.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "collie/base/logging.h"

namespace collie::bench {

double input_value(ReduceOp op, int rank, size_t i) {
  // Products of 1s and 2s stay exact (and small) for any world size we run;
  // everything else uses 1..12, whose sums over 8 ranks fit bfloat16 exactly.
  if (op == ReduceOp::kProduct) return ((rank + i) % 5 == 0) ? 2.0 : 1.0;
  return static_cast<double>((rank % 4 + 1) * (i % 3 + 1));
}

double reduced_value(ReduceOp op, int world, size_t i, DataType dtype) {
  return visit_dtype(dtype, [&]<typename T>(TypeTag<T>) {
    // In the dtype's own arithmetic (half types in float32), as the
    // collectives reduce: bool sums are a logical or, int8 sums wrap.
    using Acc = std::conditional_t<is_half_type_v<T>, float, T>;
    Acc acc = from_double<Acc>(input_value(op, 0, i));
    for (int r = 1; r < world; ++r)
      acc = reduce_value(op, acc, from_double<Acc>(input_value(op, r, i)));
    const double v = to_double(acc);
    return op == ReduceOp::kAvg ? v / world : v;
  });
}

bool close_enough(double got, double want, DataType dtype) {
  double tol = 0;
  if (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16)
    tol = 1e-2;
  else if (dtype == DataType::kFloat32)
    tol = 1e-6;
  else if (dtype == DataType::kFloat64)
    tol = 1e-12;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

HostBuffer::HostBuffer(DataType dtype, size_t count)
    : dtype_(dtype), count_(count), bytes_(count * element_size(dtype)) {}

TensorView HostBuffer::view(size_t offset, size_t count) {
  return TensorView{bytes_.data() + offset * element_size(dtype_), count, dtype_, Device::cpu()};
}

void HostBuffer::set(size_t i, double v) {
  visit_dtype(dtype_, [&]<typename T>(TypeTag<T>) {
    const T value = from_double<T>(v);
    std::memcpy(bytes_.data() + i * sizeof(T), &value, sizeof(T));
  });
}

double HostBuffer::get(size_t i) const {
  return visit_dtype(dtype_, [&]<typename T>(TypeTag<T>) {
    T value;
    std::memcpy(&value, bytes_.data() + i * sizeof(T), sizeof(T));
    return to_double(value);
  });
}

void HostBuffer::fill_input(ReduceOp op, int rank, size_t begin, size_t n) {
  for (size_t k = 0; k < n; ++k) set(begin + k, input_value(op, rank, begin + k));
}

void report_first_wrong(size_t index, double got, double want) {
  std::fprintf(stderr, "collie-bench: rank %d: element %zu is %g, expected %g\n", log_rank(), index,
               got, want);
}

void HostBuffer::zero() {
  // An empty vector's data() may be null, and memset(nullptr, 0, 0) is
  // undefined (UBSan reported it for the 0-byte sizes).
  if (!bytes_.empty()) std::memset(bytes_.data(), 0, bytes_.size());
}

}  // namespace collie::bench
