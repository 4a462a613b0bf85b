// StateDict: named tensors and scalars, the unit of save/load for models,
// optimizers and whole checkpoints (model.*, optimizer.*, epoch, config),
// like torch's state_dict. Keys keep their insertion order.
//
// On disk (version 1, little-endian; see docs/nn.md):
//   header  "COLLIESD" | u32 version | u32 flags (0) | u64 entry count
//           | u64 payload bytes | u64 FNV-1a-64 of the payload
//   entry   u32 key length | key | u8 dtype (DataType) | u8 ndim | u16 0
//           | i64 dims[ndim] | u64 data bytes | data
// The parser trusts nothing: every count and length is checked against what
// is left of the input and against fixed caps before anything is allocated,
// and the checksum catches flipped bits in the data.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "collie/base/types.h"
#include "collie/nn/module.h"
#include "collie/nn/tensor.h"

namespace collie::nn {

inline constexpr uint32_t kStateDictVersion = 1;
inline constexpr size_t kMaxStateDictKeyBytes = 4096;
inline constexpr size_t kMaxStateDictEntries = 1 << 20;
inline constexpr size_t kMaxTensorDims = 8;

class StateDict {
 public:
  struct Entry {
    DataType dtype = DataType::kFloat32;
    Shape shape;
    std::vector<uint8_t> bytes;
  };

  void set_floats(const std::string& key, const Shape& shape, std::span<const float> values);
  void set_int(const std::string& key, int64_t value);
  void set_double(const std::string& key, double value);
  void set_string(const std::string& key, std::string_view value);
  void set_entry(const std::string& key, Entry entry);

  // The getters throw InvalidArgument naming the key when it is missing or
  // holds another type or shape.
  std::vector<float> get_floats(const std::string& key, const Shape& expected_shape) const;
  int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;
  std::string get_string(const std::string& key) const;

  bool contains(const std::string& key) const { return index_.count(key) != 0; }
  const Entry& at(const std::string& key) const;
  size_t size() const { return entries_.size(); }
  const std::vector<std::pair<std::string, Entry>>& entries() const { return entries_; }

 private:
  const Entry& typed(const std::string& key, DataType dtype) const;

  std::vector<std::pair<std::string, Entry>> entries_;
  std::unordered_map<std::string, size_t> index_;
};

std::vector<uint8_t> serialize_state_dict(const StateDict& dict);
// Parses bytes produced by serialize_state_dict. `source` (a file name) is
// named in every error; a malformed input throws collie::Error saying what is
// wrong and where ("truncated: entry 3 ('1.weight') declares 802816 data
// bytes at offset 96 but 12 remain"). Never reads out of bounds: the fuzz
// target drives this function.
StateDict parse_state_dict(std::span<const uint8_t> bytes, const std::string& source = "<memory>");

// File versions: save writes atomically (write_file_atomically), load reads
// and parses, naming the file in errors.
void save_state_dict(const StateDict& dict, const std::string& path);
StateDict load_state_dict(const std::string& path);

// A module's parameters under "<prefix><name>" (torch's model.state_dict()).
void save_module_state(Module& module, StateDict& out, const std::string& prefix = "");
// Loads every parameter; a missing key or a shape mismatch throws
// InvalidArgument naming the key and both shapes (strict, as torch's default).
void load_module_state(Module& module, const StateDict& in, const std::string& prefix = "");

}  // namespace collie::nn
