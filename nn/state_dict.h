// StateDict: named tensors and metadata strings, the unit of save/load for
// models, optimizers and whole checkpoints, like torch's state_dict. Keys
// keep their insertion order.
//
// On disk it is a safetensors file (https://github.com/huggingface/safetensors),
// which PyTorch reads with safetensors.torch.load_file (docs/nn.md):
//   u64 N (little-endian) | N bytes of JSON header, padded with spaces to a
//   multiple of 8 | the tensors' raw little-endian bytes, back to back
//   header {"__metadata__": {"format": "pt", <the set_string entries>,
//                            "collie.data_sha256": "<hex>"},
//           "<key>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [B, E]}, ...}
// Every tensor entry is a safetensors tensor (scalars from set_int and
// set_double are 0-d I64 and F64 tensors); strings are the header's
// __metadata__, which the format defines as string -> string. safetensors has
// no checksum: collie adds the SHA-256 of the data bytes to the metadata and
// checks it when present, so a flipped bit is still caught (files written by
// other tools, without it, are read unchecked).
//
// The earlier format ("COLLIESD" magic, version 1, FNV-1a checksum; see
// state_dict_legacy.h) is still read, so that old checkpoints resume.
//
// The parser trusts nothing: the header length is checked against the file,
// every tensor's dtype x shape against its data_offsets, the offsets against
// the data (contiguous, in bounds, every byte covered), before anything is
// allocated; errors name the source and the tensor.
#pragma once

#include <cstdint>
#include <optional>
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

inline constexpr size_t kMaxStateDictKeyBytes = 4096;
inline constexpr size_t kMaxStateDictEntries = 1 << 20;
inline constexpr size_t kMaxTensorDims = 8;
// safetensors' own limit on the JSON header (its MAX_HEADER_SIZE).
inline constexpr size_t kMaxSafetensorsHeaderBytes = 100'000'000;
// The metadata key holding the SHA-256 (hex) of the data bytes. Written by
// serialize_state_dict, checked and removed by parse_state_dict.
inline constexpr const char* kDataSha256Key = "collie.data_sha256";

class StateDict {
 public:
  struct Entry {
    DataType dtype = DataType::kFloat32;
    Shape shape;
    std::vector<uint8_t> bytes;
  };

  // Tensors. Keys are 1..kMaxStateDictKeyBytes bytes of UTF-8, not
  // "__metadata__" and not a string's key. Setting a key again replaces it
  // in place.
  void set_floats(const std::string& key, const Shape& shape, std::span<const float> values);
  void set_int(const std::string& key, int64_t value);    // a 0-d int64 tensor
  void set_double(const std::string& key, double value);  // a 0-d float64 tensor
  void set_entry(const std::string& key, Entry entry);
  // Strings: the file's __metadata__ (key and value UTF-8).
  void set_string(const std::string& key, std::string_view value);

  // The getters throw InvalidArgument naming the key when it is missing or
  // holds another type or shape.
  std::vector<float> get_floats(const std::string& key, const Shape& expected_shape) const;
  int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;
  // A metadata string; for files of the earlier format, whose strings were
  // uint8 tensors, such a tensor's bytes.
  std::string get_string(const std::string& key) const;

  // Tensors only.
  bool contains(const std::string& key) const { return index_.count(key) != 0; }
  bool has_string(const std::string& key) const { return find_string(key) != nullptr; }
  const Entry& at(const std::string& key) const;
  size_t size() const { return entries_.size(); }  // tensors
  const std::vector<std::pair<std::string, Entry>>& entries() const { return entries_; }
  const std::vector<std::pair<std::string, std::string>>& strings() const { return strings_; }

 private:
  const Entry& typed(const std::string& key, DataType dtype) const;
  const std::string* find_string(const std::string& key) const;

  std::vector<std::pair<std::string, Entry>> entries_;
  std::unordered_map<std::string, size_t> index_;
  std::vector<std::pair<std::string, std::string>> strings_;
};

// safetensors' dtype name of `dtype` ("F32", "BF16", "I64", "BOOL"), and the
// DataType of a name (nullopt for types collie has not, such as "U16").
std::string_view safetensors_dtype(DataType dtype);
std::optional<DataType> dtype_from_safetensors(std::string_view name);

// The safetensors bytes of `dict`: the same dict gives the same bytes.
std::vector<uint8_t> serialize_state_dict(const StateDict& dict);
// Parses a safetensors file (any writer's, with the dtypes collie has) or a
// file of the earlier "COLLIESD" format. Tensors come in the order of their
// data in the file, which is the order serialize_state_dict wrote them in.
// `source` (a file name) is named in every error; a malformed input throws
// collie::Error saying what is wrong and where ("tensor '1.weight' ends at
// data byte 802816 but the file holds 12 bytes of data (truncated file)").
// Never reads out of bounds: the fuzz target drives this function.
StateDict parse_state_dict(std::span<const uint8_t> bytes, const std::string& source = "<memory>");

// File versions: save writes atomically (write_file_atomically), load reads
// and parses, naming the file in errors.
void save_state_dict(const StateDict& dict, const std::string& path);
StateDict load_state_dict(const std::string& path);

// A module's parameters under "<prefix><name>" (torch's model.state_dict():
// with no prefix, a Sequential's keys are those of the equivalent
// torch.nn.Sequential, "1.weight" of shape [out, in] for a Linear at index 1).
void save_module_state(Module& module, StateDict& out, const std::string& prefix = "");
// Loads every parameter; a missing key or a shape mismatch throws
// InvalidArgument naming the key and both shapes (strict, as torch's default).
void load_module_state(Module& module, const StateDict& in, const std::string& prefix = "");

}  // namespace collie::nn
