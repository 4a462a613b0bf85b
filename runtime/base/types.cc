#include "runtime/base/types.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace collie {

size_t element_size(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kFloat16: return 2;
    case DataType::kBFloat16: return 2;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
    case DataType::kUInt8: return 1;
  }
  return 0;
}

std::string_view to_string(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kUInt8: return "uint8";
  }
  return "invalid-dtype";
}

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kProduct: return "product";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
  }
  return "invalid-op";
}

std::string to_string(Device device) {
  if (device.is_cpu()) return "cpu";
  return "cuda:" + std::to_string(device.index);
}

bool is_floating_point(DataType dtype) {
  return dtype == DataType::kFloat32 || dtype == DataType::kFloat64 ||
         dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
}

bool is_valid(DataType dtype) { return static_cast<int>(dtype) < kNumDataTypes; }
bool is_valid(ReduceOp op) { return static_cast<int>(op) < kNumReduceOps; }

namespace {
std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}
}  // namespace

std::optional<DataType> parse_data_type(std::string_view name) {
  const std::string n = lower(name);
  if (n == "float32" || n == "float" || n == "fp32" || n == "f32") return DataType::kFloat32;
  if (n == "float64" || n == "double" || n == "fp64" || n == "f64") return DataType::kFloat64;
  if (n == "float16" || n == "half" || n == "fp16" || n == "f16") return DataType::kFloat16;
  if (n == "bfloat16" || n == "bf16") return DataType::kBFloat16;
  if (n == "int32" || n == "int" || n == "i32") return DataType::kInt32;
  if (n == "int64" || n == "long" || n == "i64") return DataType::kInt64;
  if (n == "uint8" || n == "byte" || n == "u8") return DataType::kUInt8;
  return std::nullopt;
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) {
  const std::string n = lower(name);
  if (n == "sum") return ReduceOp::kSum;
  if (n == "avg" || n == "mean") return ReduceOp::kAvg;
  if (n == "product" || n == "prod") return ReduceOp::kProduct;
  if (n == "min") return ReduceOp::kMin;
  if (n == "max") return ReduceOp::kMax;
  return std::nullopt;
}

std::ostream& operator<<(std::ostream& out, DataType dtype) { return out << to_string(dtype); }
std::ostream& operator<<(std::ostream& out, ReduceOp op) { return out << to_string(op); }
std::ostream& operator<<(std::ostream& out, const Device& device) {
  return out << to_string(device);
}

}  // namespace collie
