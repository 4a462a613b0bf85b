// The vocabulary every layer shares: element types, reduction operators,
// devices and the non-owning TensorView that collectives take.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

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
};
inline constexpr int kNumDataTypes = 7;

// Values are part of the wire format: append only.
enum class ReduceOp : uint8_t { kSum = 0, kAvg = 1, kProduct = 2, kMin = 3, kMax = 4 };
inline constexpr int kNumReduceOps = 5;

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

size_t element_size(DataType dtype);
std::string_view to_string(DataType dtype);  // "float32"
std::string_view to_string(ReduceOp op);     // "sum"
std::string to_string(Device device);        // "cpu", "cuda:0"
bool is_floating_point(DataType dtype);
// Parse torch-style names ("float32", "float", "fp16", "bfloat16", "int64",
// "uint8", ...); std::nullopt when unknown.
std::optional<DataType> parse_data_type(std::string_view name);
std::optional<ReduceOp> parse_reduce_op(std::string_view name);
// Range checks for values read off the wire.
bool is_valid(DataType dtype);
bool is_valid(ReduceOp op);

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

// A view of a host array of a native type: view(vec.data(), vec.size()).
template <typename T>
TensorView view(T* data, size_t count) {
  return TensorView{static_cast<void*>(data), count, data_type_of<T>(), Device::cpu()};
}

}  // namespace collie
