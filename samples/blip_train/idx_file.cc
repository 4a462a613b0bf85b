#include "collie/samples/blip_train/idx_file.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie::samples {

IdxArray parse_idx(std::span<const uint8_t> bytes, const std::string& name) {
  auto fail = [&](const std::string& what) -> Error {
    return Error(str_cat(name, ": not a valid IDX file: ", what));
  };
  if (bytes.size() < 4)
    throw fail(str_cat("only ", bytes.size(), " bytes, shorter than the 4-byte magic"));
  if (bytes[0] != 0 || bytes[1] != 0)
    throw fail(str_cat("magic starts with ", int(bytes[0]), ",", int(bytes[1]), " instead of 0,0"));
  if (bytes[2] != 0x08)
    throw fail(str_cat("element type 0x", std::hex, int(bytes[2]), " is not 0x08 (unsigned byte)"));
  const size_t ndims = bytes[3];
  if (ndims == 0 || ndims > 4) throw fail(str_cat(ndims, " dimensions (expected 1 to 4)"));
  const size_t header = 4 + 4 * ndims;
  if (bytes.size() < header)
    throw fail(str_cat("header needs ", header, " bytes for ", ndims, " dimensions, file has ",
                       bytes.size()));
  IdxArray out;
  size_t elements = 1;
  for (size_t d = 0; d < ndims; ++d) {
    const uint8_t* p = bytes.data() + 4 + 4 * d;
    uint32_t dim = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
    if (dim == 0 || dim > kMaxIdxBytes) throw fail(str_cat("dimension ", d, " has size ", dim));
    if (elements > kMaxIdxBytes / dim) throw fail("the dimensions multiply past the size cap");
    elements *= dim;
    out.dims.push_back(dim);
  }
  if (bytes.size() - header != elements) {
    std::string shape;
    for (size_t d = 0; d < ndims; ++d) shape += (d ? "x" : "") + std::to_string(out.dims[d]);
    throw fail(str_cat("header says ", shape, " = ", elements, " bytes of data but ",
                       bytes.size() - header, " follow",
                       bytes.size() - header < elements ? " (truncated?)" : " (trailing bytes)"));
  }
  out.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return out;
}

IdxArray read_idx_file(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files too
  if (f == nullptr)
    throw Error(str_cat(path, ": cannot open: ", errno ? std::strerror(errno) : "gzopen failed"));
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 16];
  for (;;) {
    int n = gzread(f, chunk, sizeof chunk);
    if (n < 0) {
      int err = 0;
      std::string msg = gzerror(f, &err);
      gzclose(f);
      throw Error(str_cat(path, ": corrupt gzip data: ", msg));
    }
    if (n == 0) break;
    if (bytes.size() + static_cast<size_t>(n) > kMaxIdxBytes) {
      gzclose(f);
      throw Error(str_cat(path, ": larger than ", kMaxIdxBytes, " bytes decompressed; refusing"));
    }
    bytes.insert(bytes.end(), chunk, chunk + n);
  }
  // gzread stops quietly at a truncated stream; gzclose reports it.
  int rc = gzclose(f);
  if (rc != Z_OK)
    throw Error(str_cat(path, ": truncated or corrupt gzip stream (zlib error ", rc, ")"));
  return parse_idx(bytes, path);
}

}  // namespace collie::samples
