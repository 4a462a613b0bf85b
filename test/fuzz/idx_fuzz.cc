// libFuzzer target for IDX files (the MNIST family's format):
// samples::parse_idx, which reads the decompressed image.
//
// The whole input is the file. Promises checked:
//   - a rejected file is a collie::Error naming the file;
//   - an accepted file has 1 to 4 non-zero dimensions as its header says,
//     their product is exactly the number of data bytes, and the data is the
//     input after the header, byte for byte.
// The gzip layer (read_idx_file) is zlib's and is not fuzzed here.
#include <cstdint>
#include <cstring>
#include <string>

#include "collie/base/error.h"
#include "collie/samples/blip_train/idx_file.h"
#include "collie/test/fuzz/fuzz_check.h"

namespace {
constexpr const char* kTarget = "idx_fuzz";
constexpr const char* kName = "fuzz-images-idx3-ubyte";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using collie::fuzz::check;
  collie::samples::IdxArray array;
  try {
    array = collie::samples::parse_idx(std::span<const uint8_t>(data, size), kName);
  } catch (const collie::Error& e) {
    check(std::string(e.what()).find(kName) != std::string::npos, kTarget,
          std::string("an error that does not name the file: ") + e.what());
    return 0;
  }
  check(size >= 4 && array.dims.size() == data[3] && !array.dims.empty() && array.dims.size() <= 4,
        kTarget, "dimension count differs from the header");
  size_t elements = 1;
  for (uint32_t d : array.dims) {
    check(d != 0, kTarget, "a zero dimension was accepted");
    elements *= d;
  }
  const size_t header = 4 + 4 * array.dims.size();
  check(elements == array.data.size() && size == header + elements, kTarget,
        "data size differs from the product of the dimensions");
  check(std::memcmp(array.data.data(), data + header, elements) == 0, kTarget,
        "data differs from the bytes after the header");
  return 0;
}
