// The state_dict format collie wrote before safetensors (internal, not
// installed). parse_state_dict recognises it by its magic and reads it, so
// that checkpoints of older runs still resume; nothing writes it any more
// except the tests that prove that (serialize_state_dict_v1).
//
// Version 1, little-endian:
//   header  "COLLIESD" | u32 version | u32 flags (0) | u64 entry count
//           | u64 payload bytes | u64 FNV-1a-64 of the payload
//   entry   u32 key length | key | u8 dtype (DataType) | u8 ndim | u16 0
//           | i64 dims[ndim] | u64 data bytes | data
// Strings were uint8 tensors (StateDict::get_string still reads them).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "collie/nn/state_dict.h"

namespace collie::nn::legacy {

inline constexpr char kMagic[8] = {'C', 'O', 'L', 'L', 'I', 'E', 'S', 'D'};
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 8;

// Whether `bytes` starts with the magic number.
bool is_v1(std::span<const uint8_t> bytes);

// Version 1's bytes: the tensors in order, then each string as a uint8
// tensor, as set_string made them.
std::vector<uint8_t> serialize_state_dict_v1(const StateDict& dict);

// Errors as parse_state_dict's ("state_dict 'SOURCE' is corrupt: ...").
StateDict parse_state_dict_v1(std::span<const uint8_t> bytes, const std::string& source);

}  // namespace collie::nn::legacy
