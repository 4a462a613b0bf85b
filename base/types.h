// The vocabulary every layer shares: element types, reduction operators,
// devices and the non-owning TensorView that collectives take.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>

#include "collie/base/half.h"

namespace collie {

// Values are part of the wire format (collectives' message headers): append
// only, never renumber.
enum class DataType : uint8_t {
  kFloat32 = 0,
  kFloat64 = 1,
  kFloat16 = 2,
  kBFloat16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kUInt8 = 6,
  kInt8 = 7,
  kBool = 8,  // one byte holding 0 or 1, as torch.bool
};
inline constexpr int kNumDataTypes = 9;

// torch's ReduceOp. Values are part of the wire format: append only.
// The bitwise ops take integer and bool tensors only; on bool, SUM and MAX
// are a logical or, PRODUCT and MIN a logical and (as in torch).
enum class ReduceOp : uint8_t {
  kSum = 0,
  kAvg = 1,
  kProduct = 2,
  kMin = 3,
  kMax = 4,
  kBand = 5,
  kBor = 6,
  kBxor = 7,
};
inline constexpr int kNumReduceOps = 8;

enum class DeviceType : uint8_t { kCPU = 0, kCUDA = 1 };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = -1;  // CUDA ordinal; -1 for the CPU

  static Device cpu() { return {}; }
  static Device cuda(int index) { return {DeviceType::kCUDA, index}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  friend bool operator==(const Device&, const Device&) = default;
};

// Range checks for values read off the wire.
constexpr bool is_valid(DataType dtype) { return static_cast<int>(dtype) < kNumDataTypes; }
constexpr bool is_valid(ReduceOp op) { return static_cast<int>(op) < kNumReduceOps; }

// The properties every call's argument checks ask for, as tables indexed
// by the enum's value, so that they inline into the checks: a 4-byte
// all_reduce asked them a dozen times through out-of-line calls (about 150
// of its 2100 instructions). base_test checks each table against the C++
// type visit_dtype() gives (sizeof, std::is_floating_point, ...).
namespace detail {
inline constexpr uint8_t kElementBytes[kNumDataTypes] = {4, 8, 2, 2, 4, 8, 1, 1, 1};
inline constexpr unsigned kFloatingPointTypes = 0b000001111;  // float32/64, float16, bfloat16
inline constexpr unsigned kIntegralTypes = 0b111110000;       // int32/64, uint8, int8, bool
constexpr bool in(unsigned set, DataType dtype) {
  return is_valid(dtype) && (set >> static_cast<int>(dtype) & 1u) != 0;
}
}  // namespace detail

// Bytes of one element; 0 for a value outside the enum.
constexpr size_t element_size(DataType dtype) {
  return is_valid(dtype) ? detail::kElementBytes[static_cast<int>(dtype)] : 0;
}
std::string_view to_string(DataType dtype);  // "float32"
std::string_view to_string(ReduceOp op);     // "sum"
std::string to_string(Device device);        // "cpu", "cuda:0"
constexpr bool is_floating_point(DataType dtype) {
  return detail::in(detail::kFloatingPointTypes, dtype);
}
// Integer types and bool: the ones the bitwise ops take.
constexpr bool is_integral(DataType dtype) { return detail::in(detail::kIntegralTypes, dtype); }
// Why `op` cannot reduce `dtype` ("" when it can): AVG needs a
// floating-point type (an integer average would truncate), the bitwise ops
// an integer or bool one. Every backend's argument checks ask this.
std::string unsupported_reduction(ReduceOp op, DataType dtype);
// Whether unsupported_reduction(op, dtype) is empty, without building a
// string: the check every collective call makes.
constexpr bool reduction_supported(ReduceOp op, DataType dtype) {
  if (!is_valid(op) || !is_valid(dtype)) return false;
  if (op == ReduceOp::kAvg) return is_floating_point(dtype);
  if (op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor)
    return is_integral(dtype);
  return true;
}
// Parse torch-style names ("float32", "float", "fp16", "bfloat16", "int64",
// "uint8", "int8", "bool", ...); std::nullopt when unknown.
std::optional<DataType> parse_data_type(std::string_view name);
std::optional<ReduceOp> parse_reduce_op(std::string_view name);

std::ostream& operator<<(std::ostream& out, DataType dtype);
std::ostream& operator<<(std::ostream& out, ReduceOp op);
std::ostream& operator<<(std::ostream& out, const Device& device);

// A non-owning view of `count` contiguous elements of `dtype` on `device`.
struct TensorView {
  void* data = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  Device device = Device::cpu();

  size_t nbytes() const { return count * element_size(dtype); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// The one dtype visitor: calls fn(TypeTag<T>{}) with T the C++ type of one
// element of `dtype` (float, double, Half, BFloat16, int32_t, int64_t,
// uint8_t, int8_t, bool) and returns what fn returns. Throws
// InvalidArgument for a value outside the enum (one read off the wire).
//
//   visit_dtype(t.dtype, [&]<typename T>(TypeTag<T>) { sum += to_double(t.as<T>()[0]); });
template <typename T>
struct TypeTag {
  using type = T;
};
[[noreturn]] void throw_unknown_dtype(DataType dtype);

template <typename Fn>
decltype(auto) visit_dtype(DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::kFloat32: return fn(TypeTag<float>{});
    case DataType::kFloat64: return fn(TypeTag<double>{});
    case DataType::kFloat16: return fn(TypeTag<Half>{});
    case DataType::kBFloat16: return fn(TypeTag<BFloat16>{});
    case DataType::kInt32: return fn(TypeTag<int32_t>{});
    case DataType::kInt64: return fn(TypeTag<int64_t>{});
    case DataType::kUInt8: return fn(TypeTag<uint8_t>{});
    case DataType::kInt8: return fn(TypeTag<int8_t>{});
    case DataType::kBool: return fn(TypeTag<bool>{});
  }
  throw_unknown_dtype(dtype);
}

// The 16-bit floating-point storage types, reduced in float32.
template <typename T>
inline constexpr bool is_half_type_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Element values through double, for tests, benchmarks and references: exact
// for every value of the integer types up to 2^53 and for every half value;
// Half and BFloat16 round to nearest even, bool is v != 0.
template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, Half>) {
    return to_half(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return to_bfloat16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else {
    return static_cast<T>(v);
  }
}
template <typename T>
double to_double(T v) {
  if constexpr (is_half_type_v<T>) {
    return to_float(v);
  } else {
    return static_cast<double>(v);
  }
}

// One step of `op` on native values (not the half types: reduce those in
// float): the scalar reference the reduction kernels must match bit for
// bit. AVG is SUM here; the caller divides once at the end. Integer
// arithmetic wraps, as the kernels' does.
template <typename T>
T reduce_value(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      if constexpr (std::is_same_v<T, bool>) {
        return a || b;  // a logical or, as in torch
      } else {
        return static_cast<T>(a + b);
      }
    case ReduceOp::kProduct:
      if constexpr (std::is_same_v<T, bool>) {
        return a && b;
      } else {
        return static_cast<T>(a * b);
      }
    case ReduceOp::kMin: return b < a ? b : a;
    case ReduceOp::kMax: return a < b ? b : a;
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      if constexpr (std::is_integral_v<T>) {
        if (op == ReduceOp::kBand) return static_cast<T>(a & b);
        if (op == ReduceOp::kBor) return static_cast<T>(a | b);
        return static_cast<T>(a ^ b);
      }
      break;
  }
  return a;
}

// Point-to-point: recv's source when any rank may send (torch's src=None).
inline constexpr int kAnySource = -1;

// One operation of batch_isend_irecv (torch's P2POp): send `tensor` to, or
// receive it from, group rank `peer`, matched with the peer's opposite
// operation of the same `tag` in FIFO order per (peer, tag).
enum class P2POpType : uint8_t { kIsend, kIrecv };
struct P2POp {
  P2POpType type = P2POpType::kIsend;
  TensorView tensor;
  int peer = 0;
  int tag = 0;
};

template <typename T>
constexpr DataType data_type_of();
template <>
constexpr DataType data_type_of<float>() {
  return DataType::kFloat32;
}
template <>
constexpr DataType data_type_of<double>() {
  return DataType::kFloat64;
}
template <>
constexpr DataType data_type_of<int32_t>() {
  return DataType::kInt32;
}
template <>
constexpr DataType data_type_of<int64_t>() {
  return DataType::kInt64;
}
template <>
constexpr DataType data_type_of<uint8_t>() {
  return DataType::kUInt8;
}
template <>
constexpr DataType data_type_of<int8_t>() {
  return DataType::kInt8;
}
template <>
constexpr DataType data_type_of<bool>() {
  return DataType::kBool;
}
template <>
constexpr DataType data_type_of<Half>() {
  return DataType::kFloat16;
}
template <>
constexpr DataType data_type_of<BFloat16>() {
  return DataType::kBFloat16;
}

// A view of a host array of a native type: view(vec.data(), vec.size()).
template <typename T>
TensorView view(T* data, size_t count) {
  return TensorView{static_cast<void*>(data), count, data_type_of<T>(), Device::cpu()};
}

}  // namespace collie
