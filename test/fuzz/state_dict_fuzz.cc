// libFuzzer target for checkpoint files: nn::parse_state_dict.
//
// Input layout: byte 0 is a mode, the rest is the file (safetensors, or the
// earlier "COLLIESD" format). With bit 0 of the mode set and a COLLIESD
// file, the driver first rewrites the header's payload size and checksum
// to match the bytes that follow, so that mutations reach the entry parser
// (otherwise nearly every mutation stops at the checksum, which is the
// point of the checksum but not of the fuzzing). Promises checked:
//   - a rejected file is a collie::Error naming the source;
//   - an accepted file holds only entries whose bytes match dtype x shape,
//     and every getter a loader uses stays inside its entry;
//   - serializing what was parsed and parsing that again gives the same
//     entries and the same bytes (the format round-trips).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collie/base/error.h"
#include "collie/nn/state_dict.h"
#include "collie/nn/state_dict_legacy.h"
#include "collie/test/fuzz/fuzz_check.h"

namespace {

constexpr const char* kTarget = "state_dict_fuzz";
constexpr const char* kSource = "fuzz.ckpt";
constexpr size_t kFileHeaderBytes = 40;  // magic 8, version 4, flags 4, count 8, size 8, sum 8

uint64_t fnv1a64(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

bool same_entries(const collie::nn::StateDict& a, const collie::nn::StateDict& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto& [ka, ea] = a.entries()[i];
    const auto& [kb, eb] = b.entries()[i];
    if (ka != kb || ea.dtype != eb.dtype || ea.shape != eb.shape || ea.bytes != eb.bytes)
      return false;
  }
  return true;
}

// Reads every entry the way a loader would.
void read_back(const collie::nn::StateDict& dict) {
  using collie::DataType;
  for (const auto& [key, e] : dict.entries()) {
    const size_t numel = collie::nn::shape_numel(e.shape);
    collie::fuzz::check(e.bytes.size() == numel * collie::element_size(e.dtype), kTarget,
                        "entry '" + key + "' bytes do not match its dtype and shape");
    if (e.dtype == DataType::kFloat32) {
      collie::fuzz::check(dict.get_floats(key, e.shape).size() == numel, kTarget,
                          "get_floats size");
    } else if (e.dtype == DataType::kInt64 && e.shape.empty()) {
      (void)dict.get_int(key);
    } else if (e.dtype == DataType::kFloat64 && e.shape.empty()) {
      (void)dict.get_double(key);
    } else if (e.dtype == DataType::kUInt8) {
      collie::fuzz::check(dict.get_string(key).size() == e.bytes.size(), kTarget,
                          "get_string size");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::vector<uint8_t> file(data + 1, data + size);
  if ((data[0] & 1) && file.size() >= kFileHeaderBytes && collie::nn::legacy::is_v1(file)) {
    const uint64_t payload = file.size() - kFileHeaderBytes;
    const uint64_t sum = fnv1a64(file.data() + kFileHeaderBytes, payload);
    std::memcpy(file.data() + 24, &payload, 8);
    std::memcpy(file.data() + 32, &sum, 8);
  }
  collie::nn::StateDict dict;
  try {
    dict = collie::nn::parse_state_dict(file, kSource);
  } catch (const collie::Error& e) {
    collie::fuzz::check(std::string(e.what()).find(kSource) != std::string::npos, kTarget,
                        std::string("an error that does not name the file: ") + e.what());
    return 0;
  }
  read_back(dict);
  const std::vector<uint8_t> again = collie::nn::serialize_state_dict(dict);
  const collie::nn::StateDict reparsed = collie::nn::parse_state_dict(again, "reserialized");
  collie::fuzz::check(same_entries(dict, reparsed), kTarget,
                      "serialize then parse changed the entries");
  collie::fuzz::check(collie::nn::serialize_state_dict(reparsed) == again, kTarget,
                      "serialization is not stable");
  return 0;
}
