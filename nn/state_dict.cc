#include "collie/nn/state_dict.h"

#include <bit>
#include <cstring>

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/nn/atomic_file.h"

namespace collie::nn {

namespace {

constexpr char kMagic[8] = {'C', 'O', 'L', 'L', 'I', 'E', 'S', 'D'};
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 8;

uint64_t fnv1a64(std::span<const uint8_t> bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : bytes) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Little-endian appends; the hosts we build for are little-endian, which the
// static_assert below pins down.
static_assert(std::endian::native == std::endian::little,
              "state_dict format assumes a little-endian host");

template <typename U>
void put(std::vector<uint8_t>& out, U value) {
  const auto* p = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), p, p + sizeof(U));
}

// A cursor over untrusted bytes: every read checks what is left first.
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, const std::string& source)
      : bytes_(bytes), source_(source) {}

  template <typename U>
  U get(const char* what) {
    need(sizeof(U), what);
    U value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(U));
    pos_ += sizeof(U);
    return value;
  }
  std::span<const uint8_t> take(size_t n, const std::string& what) {
    need(n, what);
    auto out = bytes_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  size_t pos() const { return pos_; }
  size_t left() const { return bytes_.size() - pos_; }
  [[noreturn]] void corrupt(const std::string& what) const {
    throw Error(str_cat("state_dict '", source_, "' is corrupt: ", what));
  }

 private:
  void need(size_t n, const std::string& what) const {
    if (n > left())
      corrupt(str_cat("truncated: ", what, " needs ", n, " bytes at offset ", pos_, " but ", left(),
                      " remain"));
  }

  std::span<const uint8_t> bytes_;
  const std::string& source_;
  size_t pos_ = 0;
};

std::string type_name(const StateDict::Entry& e) {
  return str_cat(to_string(e.dtype), shape_to_string(e.shape));
}

}  // namespace

void StateDict::set_entry(const std::string& key, Entry entry) {
  COLLIE_ARG_CHECK(!key.empty() && key.size() <= kMaxStateDictKeyBytes, "state_dict key of ",
                   key.size(), " bytes");
  COLLIE_ARG_CHECK_LE(entry.shape.size(), kMaxTensorDims, "dimensions of '", key, "'");
  COLLIE_ARG_CHECK_EQ(entry.bytes.size(), shape_numel(entry.shape) * element_size(entry.dtype),
                      "data bytes of '", key, "' for ", type_name(entry));
  auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(entry);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(key, std::move(entry));
}

void StateDict::set_floats(const std::string& key, const Shape& shape,
                           std::span<const float> values) {
  Entry e{DataType::kFloat32, shape, {}};
  const auto* p = reinterpret_cast<const uint8_t*>(values.data());
  e.bytes.assign(p, p + values.size_bytes());
  set_entry(key, std::move(e));
}

void StateDict::set_int(const std::string& key, int64_t value) {
  Entry e{DataType::kInt64, {}, std::vector<uint8_t>(8)};
  std::memcpy(e.bytes.data(), &value, 8);
  set_entry(key, std::move(e));
}

void StateDict::set_double(const std::string& key, double value) {
  Entry e{DataType::kFloat64, {}, std::vector<uint8_t>(8)};
  std::memcpy(e.bytes.data(), &value, 8);
  set_entry(key, std::move(e));
}

void StateDict::set_string(const std::string& key, std::string_view value) {
  Entry e{DataType::kUInt8, {static_cast<int64_t>(value.size())}, {value.begin(), value.end()}};
  set_entry(key, std::move(e));
}

const StateDict::Entry& StateDict::at(const std::string& key) const {
  auto it = index_.find(key);
  if (it == index_.end()) throw InvalidArgument(str_cat("state_dict has no key '", key, "'"));
  return entries_[it->second].second;
}

const StateDict::Entry& StateDict::typed(const std::string& key, DataType dtype) const {
  const Entry& e = at(key);
  if (e.dtype != dtype)
    throw InvalidArgument(str_cat("state_dict key '", key, "' holds ", type_name(e), ", expected ",
                                  to_string(dtype)));
  return e;
}

std::vector<float> StateDict::get_floats(const std::string& key,
                                         const Shape& expected_shape) const {
  const Entry& e = typed(key, DataType::kFloat32);
  if (e.shape != expected_shape)
    throw InvalidArgument(str_cat("state_dict key '", key, "' has shape ", shape_to_string(e.shape),
                                  ", expected ", shape_to_string(expected_shape)));
  std::vector<float> out(shape_numel(e.shape));
  // An empty tensor has no buffer; memcpy must not see its null pointer.
  if (!e.bytes.empty()) std::memcpy(out.data(), e.bytes.data(), e.bytes.size());
  return out;
}

int64_t StateDict::get_int(const std::string& key) const {
  const Entry& e = typed(key, DataType::kInt64);
  COLLIE_ARG_CHECK_EQ(e.bytes.size(), 8u, "state_dict key '", key, "' is not a scalar");
  int64_t v;
  std::memcpy(&v, e.bytes.data(), 8);
  return v;
}

double StateDict::get_double(const std::string& key) const {
  const Entry& e = typed(key, DataType::kFloat64);
  COLLIE_ARG_CHECK_EQ(e.bytes.size(), 8u, "state_dict key '", key, "' is not a scalar");
  double v;
  std::memcpy(&v, e.bytes.data(), 8);
  return v;
}

std::string StateDict::get_string(const std::string& key) const {
  const Entry& e = typed(key, DataType::kUInt8);
  return std::string(e.bytes.begin(), e.bytes.end());
}

std::vector<uint8_t> serialize_state_dict(const StateDict& dict) {
  std::vector<uint8_t> payload;
  for (const auto& [key, e] : dict.entries()) {
    put<uint32_t>(payload, static_cast<uint32_t>(key.size()));
    payload.insert(payload.end(), key.begin(), key.end());
    put<uint8_t>(payload, static_cast<uint8_t>(e.dtype));
    put<uint8_t>(payload, static_cast<uint8_t>(e.shape.size()));
    put<uint16_t>(payload, 0);
    for (int64_t d : e.shape) put<int64_t>(payload, d);
    put<uint64_t>(payload, e.bytes.size());
    payload.insert(payload.end(), e.bytes.begin(), e.bytes.end());
  }
  std::vector<uint8_t> out(kHeaderBytes + payload.size());
  std::memcpy(out.data(), kMagic, sizeof(kMagic));
  out.resize(sizeof(kMagic));  // keeps the capacity; the rest is appended
  put<uint32_t>(out, kStateDictVersion);
  put<uint32_t>(out, 0);
  put<uint64_t>(out, dict.size());
  put<uint64_t>(out, payload.size());
  put<uint64_t>(out, fnv1a64(payload));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

StateDict parse_state_dict(std::span<const uint8_t> bytes, const std::string& source) {
  Reader in(bytes, source);
  auto magic = in.take(8, "the magic number");
  if (std::memcmp(magic.data(), kMagic, 8) != 0)
    in.corrupt("bad magic number: not a collie state_dict");
  const auto version = in.get<uint32_t>("the version");
  if (version != kStateDictVersion)
    in.corrupt(str_cat("unsupported version ", version, " (this build reads version ",
                       kStateDictVersion, ")"));
  if (in.get<uint32_t>("the flags") != 0) in.corrupt("unknown flags set");
  const auto count = in.get<uint64_t>("the entry count");
  const auto payload_bytes = in.get<uint64_t>("the payload size");
  const auto checksum = in.get<uint64_t>("the checksum");
  if (count > kMaxStateDictEntries)
    in.corrupt(str_cat("entry count ", count, " exceeds the limit of ", kMaxStateDictEntries));
  if (payload_bytes != in.left())
    in.corrupt(str_cat("header declares ", payload_bytes, " payload bytes but ", in.left(),
                       " follow it",
                       payload_bytes > in.left() ? " (truncated file)" : " (trailing garbage)"));
  if (fnv1a64(bytes.subspan(in.pos())) != checksum)
    in.corrupt("checksum mismatch: the data was modified or damaged");

  StateDict dict;
  for (uint64_t i = 0; i < count; ++i) {
    const std::string entry = str_cat("entry ", i);
    const auto key_len = in.get<uint32_t>("a key length");
    if (key_len == 0 || key_len > kMaxStateDictKeyBytes)
      in.corrupt(
          str_cat(entry, " has a key of ", key_len, " bytes (limit ", kMaxStateDictKeyBytes, ")"));
    auto key_bytes = in.take(key_len, str_cat(entry, "'s key"));
    const std::string key(key_bytes.begin(), key_bytes.end());
    const std::string what = str_cat(entry, " ('", key, "')");
    if (dict.contains(key)) in.corrupt(str_cat(what, " repeats a key"));
    StateDict::Entry e;
    const auto dtype = in.get<uint8_t>("a dtype");
    if (!is_valid(static_cast<DataType>(dtype)))
      in.corrupt(str_cat(what, " has unknown dtype ", int(dtype)));
    e.dtype = static_cast<DataType>(dtype);
    const auto ndim = in.get<uint8_t>("a dimension count");
    if (ndim > kMaxTensorDims)
      in.corrupt(str_cat(what, " has ", int(ndim), " dimensions (limit ", kMaxTensorDims, ")"));
    in.get<uint16_t>("reserved bytes");
    // Multiply with an overflow check: dims come from the file.
    uint64_t numel = 1;
    for (int d = 0; d < ndim; ++d) {
      const auto dim = in.get<int64_t>("a dimension");
      if (dim < 0) in.corrupt(str_cat(what, " has negative dimension ", dim));
      if (dim != 0 && numel > payload_bytes / static_cast<uint64_t>(dim))
        in.corrupt(str_cat(what, " declares more elements than the file can hold"));
      numel *= static_cast<uint64_t>(dim);
      e.shape.push_back(dim);
    }
    const auto nbytes = in.get<uint64_t>("a data size");
    if (numel > payload_bytes || nbytes != numel * element_size(e.dtype))
      in.corrupt(str_cat(what, " declares ", nbytes, " data bytes for ", type_name(e)));
    auto data = in.take(nbytes, str_cat(what, "'s data"));
    e.bytes.assign(data.begin(), data.end());
    dict.set_entry(key, std::move(e));
  }
  if (in.left() != 0)
    in.corrupt(str_cat(in.left(), " bytes after the last of ", count, " entries"));
  return dict;
}

void save_state_dict(const StateDict& dict, const std::string& path) {
  write_file_atomically(path, serialize_state_dict(dict));
}

StateDict load_state_dict(const std::string& path) {
  return parse_state_dict(read_file(path), path);
}

void save_module_state(Module& module, StateDict& out, const std::string& prefix) {
  for (auto& [name, p] : module.named_parameters())
    out.set_floats(prefix + name, p->shape(), p->value().span());
}

void load_module_state(Module& module, const StateDict& in, const std::string& prefix) {
  // Check everything before changing anything, so a bad checkpoint leaves the
  // model as it was.
  std::vector<std::vector<float>> values;
  for (auto& [name, p] : module.named_parameters())
    values.push_back(in.get_floats(prefix + name, p->shape()));
  size_t i = 0;
  for (auto* p : module.parameters()) std::copy(values[i].begin(), values[i].end(), p->data()), ++i;
}

}  // namespace collie::nn
