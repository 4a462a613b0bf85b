// IDX files (the MNIST family's format), gzipped as Debian ships them:
//   magic: 0x00 0x00, element type (0x08 = uint8), number of dimensions;
//   one big-endian uint32 per dimension; then the elements, row-major.
// Everything read is validated before use: the magic, the type, the number
// of dimensions, each size against a cap, and the product of the sizes
// against the bytes actually present. A bad file gets an error naming the
// file and what is wrong with it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace collie::samples {

struct IdxArray {
  std::vector<uint32_t> dims;
  std::vector<uint8_t> data;  // uint8 elements, row-major
};

// Caps: a decompressed file larger than this is refused before reading on.
inline constexpr size_t kMaxIdxBytes = size_t{1} << 30;

// Parses an already decompressed IDX image of uint8 elements. `name` is used
// in error messages. Throws collie::Error.
IdxArray parse_idx(std::span<const uint8_t> bytes, const std::string& name);

// Reads and decompresses (gzip or plain) a file, then parses it.
IdxArray read_idx_file(const std::string& path);

}  // namespace collie::samples
