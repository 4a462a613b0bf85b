#include "collie/test/support/reference.h"

#include <cstring>

#include "collie/base/str_cat.h"

namespace collie::test {

double value_of(int rank, size_t i, ReduceOp op, DataType dtype) {
  const size_t k = (i * 7 + static_cast<size_t>(rank) * 3 + 1) % 5;
  if (dtype == DataType::kBool) return k != 0 ? 1 : 0;
  if (op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor)
    return static_cast<double>((i * 37 + static_cast<size_t>(rank) * 11 + 5) % 64);
  if (op == ReduceOp::kProduct) {
    static const double kFactors[] = {1, 2, -1, 1, -2};
    static const double kUnsigned[] = {1, 2, 1, 3, 1};
    return dtype == DataType::kUInt8 ? kUnsigned[k] : kFactors[k];
  }
  if (dtype == DataType::kUInt8) return static_cast<double>(k + (i % 3) * 10);
  return static_cast<double>(k) - 2.0 + static_cast<double>(i % 3) * 10;
}

namespace {

template <typename T>
void put(std::vector<uint8_t>& out, size_t i, T v) {
  std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
}

// The reduction of every rank's value_of in rank order, in T's own
// arithmetic (the values are small integers, so any order gives the same
// bits; integer types wrap as the kernels do).
template <typename T>
void reduce_native(std::vector<uint8_t>& out, DataType dtype, ReduceOp op, int size, size_t count,
                   size_t offset) {
  for (size_t i = 0; i < count; ++i) {
    T acc = static_cast<T>(value_of(0, offset + i, op, dtype));
    for (int p = 1; p < size; ++p)
      acc = reduce_value(op, acc, static_cast<T>(value_of(p, offset + i, op, dtype)));
    if constexpr (std::is_floating_point_v<T>) {
      if (op == ReduceOp::kAvg) acc = static_cast<T>(acc / static_cast<T>(size));
    }
    put(out, i, acc);
  }
}

}  // namespace

std::vector<uint8_t> make_data(DataType dtype, size_t count, int rank, ReduceOp op, size_t offset) {
  std::vector<uint8_t> out(count * element_size(dtype));
  visit_dtype(dtype, [&]<typename T>(TypeTag<T>) {
    for (size_t i = 0; i < count; ++i)
      put(out, i, from_double<T>(value_of(rank, offset + i, op, dtype)));
  });
  return out;
}

std::vector<uint8_t> reference_reduce(DataType dtype, ReduceOp op, int size, size_t count,
                                      size_t offset) {
  std::vector<uint8_t> out(count * element_size(dtype));
  visit_dtype(dtype, [&]<typename T>(TypeTag<T>) {
    if constexpr (is_half_type_v<T>) {
      // Reduced in float32 and rounded once, as the collectives promise.
      std::vector<uint8_t> wide(count * sizeof(float));
      reduce_native<float>(wide, dtype, op, size, count, offset);
      for (size_t i = 0; i < count; ++i) {
        float f;
        std::memcpy(&f, wide.data() + i * 4, 4);
        put(out, i, from_double<T>(f));
      }
    } else {
      reduce_native<T>(out, dtype, op, size, count, offset);
    }
  });
  return out;
}

std::string compare(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                    DataType dtype) {
  if (got.size() != want.size()) return str_cat("size ", got.size(), " vs. ", want.size());
  const size_t es = element_size(dtype);
  for (size_t i = 0; i < got.size(); i += es) {
    if (std::memcmp(got.data() + i, want.data() + i, es) != 0) {
      uint64_t g = 0, w = 0;
      std::memcpy(&g, got.data() + i, es);
      std::memcpy(&w, want.data() + i, es);
      return str_cat("element ", i / es, " of ", got.size() / es, ": bits 0x", std::hex, g,
                     " vs. expected 0x", w);
    }
  }
  return "";
}

}  // namespace collie::test
