#include "collie/base/types.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie {

void throw_unknown_dtype(DataType dtype) {
  throw InvalidArgument(str_cat("unknown dtype (", static_cast<int>(dtype), ")"));
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
    case DataType::kInt8: return "int8";
    case DataType::kBool: return "bool";
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
    case ReduceOp::kBand: return "band";
    case ReduceOp::kBor: return "bor";
    case ReduceOp::kBxor: return "bxor";
  }
  return "invalid-op";
}

std::string to_string(Device device) {
  if (device.is_cpu()) return "cpu";
  return "cuda:" + std::to_string(device.index);
}

std::string unsupported_reduction(ReduceOp op, DataType dtype) {
  if (reduction_supported(op, dtype)) return {};
  if (!is_valid(op)) return str_cat("unknown reduce op (", static_cast<int>(op), ")");
  if (!is_valid(dtype)) return str_cat("unknown dtype (", static_cast<int>(dtype), ")");
  if (op == ReduceOp::kAvg && !is_floating_point(dtype))
    return str_cat("ReduceOp avg is not defined for ", dtype,
                   " (an integer average would truncate); use sum and divide, or a "
                   "floating-point tensor");
  if ((op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor) &&
      !is_integral(dtype))
    return str_cat("ReduceOp ", op, " is not defined for ", dtype,
                   " (the bitwise ops take integer and bool tensors)");
  return str_cat("ReduceOp ", op, " is not defined for ", dtype);  // not reached
}

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
  if (n == "int8" || n == "char" || n == "i8") return DataType::kInt8;
  if (n == "bool") return DataType::kBool;
  return std::nullopt;
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) {
  const std::string n = lower(name);
  if (n == "sum") return ReduceOp::kSum;
  if (n == "avg" || n == "mean") return ReduceOp::kAvg;
  if (n == "product" || n == "prod") return ReduceOp::kProduct;
  if (n == "min") return ReduceOp::kMin;
  if (n == "max") return ReduceOp::kMax;
  if (n == "band") return ReduceOp::kBand;
  if (n == "bor") return ReduceOp::kBor;
  if (n == "bxor") return ReduceOp::kBxor;
  return std::nullopt;
}

std::ostream& operator<<(std::ostream& out, DataType dtype) { return out << to_string(dtype); }
std::ostream& operator<<(std::ostream& out, ReduceOp op) { return out << to_string(op); }
std::ostream& operator<<(std::ostream& out, const Device& device) {
  return out << to_string(device);
}

}  // namespace collie
