// Whole-file helpers for checkpoints. write_file_atomically never leaves a
// half-written file under `path`: it writes a temporary file in the same
// directory, fsyncs it, renames it over `path` and fsyncs the directory, so
// after a crash `path` holds either the old or the new contents.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace collie::nn {

// Throws collie::Error naming the path and the failing system call.
void write_file_atomically(const std::string& path, std::span<const uint8_t> bytes);
// Reads a whole file; throws collie::Error naming the path when it cannot be
// read or is larger than max_bytes.
std::vector<uint8_t> read_file(const std::string& path, size_t max_bytes = size_t(1) << 34);

}  // namespace collie::nn
