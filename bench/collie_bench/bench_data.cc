#include "bench/collie_bench/bench_data.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "runtime/base/half.h"
#include "runtime/base/logging.h"

namespace collie::bench {

double input_value(ReduceOp op, int rank, size_t i) {
  // Products of 1s and 2s stay exact (and small) for any world size we run;
  // everything else uses 1..12, whose sums over 8 ranks fit bfloat16 exactly.
  if (op == ReduceOp::kProduct) return ((rank + i) % 5 == 0) ? 2.0 : 1.0;
  return static_cast<double>((rank % 4 + 1) * (i % 3 + 1));
}

double reduced_value(ReduceOp op, int world, size_t i) {
  double acc = input_value(op, 0, i);
  for (int r = 1; r < world; ++r) {
    double v = input_value(op, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProduct: acc *= v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
  }
  return op == ReduceOp::kAvg ? acc / world : acc;
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
  void* p = bytes_.data() + i * element_size(dtype_);
  switch (dtype_) {
    case DataType::kFloat32: *static_cast<float*>(p) = static_cast<float>(v); break;
    case DataType::kFloat64: *static_cast<double*>(p) = v; break;
    case DataType::kFloat16: *static_cast<Half*>(p) = to_half(static_cast<float>(v)); break;
    case DataType::kBFloat16:
      *static_cast<BFloat16*>(p) = to_bfloat16(static_cast<float>(v));
      break;
    case DataType::kInt32: *static_cast<int32_t*>(p) = static_cast<int32_t>(v); break;
    case DataType::kInt64: *static_cast<int64_t*>(p) = static_cast<int64_t>(v); break;
    case DataType::kUInt8: *static_cast<uint8_t*>(p) = static_cast<uint8_t>(v); break;
  }
}

double HostBuffer::get(size_t i) const {
  const void* p = bytes_.data() + i * element_size(dtype_);
  switch (dtype_) {
    case DataType::kFloat32: return *static_cast<const float*>(p);
    case DataType::kFloat64: return *static_cast<const double*>(p);
    case DataType::kFloat16: return to_float(*static_cast<const Half*>(p));
    case DataType::kBFloat16: return to_float(*static_cast<const BFloat16*>(p));
    case DataType::kInt32: return *static_cast<const int32_t*>(p);
    case DataType::kInt64: return static_cast<double>(*static_cast<const int64_t*>(p));
    case DataType::kUInt8: return *static_cast<const uint8_t*>(p);
  }
  return 0;
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
