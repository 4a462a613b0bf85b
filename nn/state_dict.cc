#include "collie/nn/state_dict.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <iterator>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/sha256.h"
#include "collie/base/str_cat.h"
#include "collie/nn/atomic_file.h"
#include "collie/nn/state_dict_legacy.h"

namespace collie::nn {

namespace {

// ordered_json keeps the header's keys in the order they were written or
// read: the writer's order is the data's, so the same dict gives the same
// bytes.
using Json = nlohmann::ordered_json;

constexpr std::string_view kMetadataKey = "__metadata__";

// Little-endian appends; the hosts we build for are little-endian, which the
// static_assert below pins down (safetensors' data is little-endian too).
static_assert(std::endian::native == std::endian::little,
              "state_dict format assumes a little-endian host");

template <typename U>
void put(std::vector<uint8_t>& out, U value) {
  const auto* p = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), p, p + sizeof(U));
}

[[noreturn]] void corrupt(const std::string& source, const std::string& what) {
  throw Error(str_cat("state_dict '", source, "' is corrupt: ", what));
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
  [[noreturn]] void corrupt(const std::string& what) const { nn::corrupt(source_, what); }

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

std::string type_name(DataType dtype, const Shape& shape) {
  return str_cat(to_string(dtype), shape_to_string(shape));
}
std::string type_name(const StateDict::Entry& e) { return type_name(e.dtype, e.shape); }

// What the JSON header can hold: nlohmann's writer refuses invalid UTF-8,
// so keys and strings are checked when they are set, not when saved.
bool is_utf8(std::string_view s) {
  try {
    (void)Json(std::string(s)).dump();
    return true;
  } catch (const Json::exception&) {
    return false;
  }
}

// Why `key` cannot name a tensor or a string ("" when it can).
std::string bad_key(std::string_view key) {
  if (key.empty() || key.size() > kMaxStateDictKeyBytes)
    return str_cat("a key of ", key.size(), " bytes (1 to ", kMaxStateDictKeyBytes, " allowed)");
  if (key == kMetadataKey) return "the key '__metadata__', which safetensors reserves";
  if (!is_utf8(key)) return "a key that is not valid UTF-8";
  return "";
}

struct DtypeName {
  DataType dtype;
  std::string_view name;
};
constexpr DtypeName kDtypeNames[] = {
    {DataType::kFloat32, "F32"},   {DataType::kFloat64, "F64"}, {DataType::kFloat16, "F16"},
    {DataType::kBFloat16, "BF16"}, {DataType::kInt32, "I32"},   {DataType::kInt64, "I64"},
    {DataType::kUInt8, "U8"},      {DataType::kInt8, "I8"},     {DataType::kBool, "BOOL"},
};
static_assert(std::size(kDtypeNames) == static_cast<size_t>(kNumDataTypes),
              "a DataType without a safetensors name");

// ---- safetensors -----------------------------------------------------------

struct TensorInfo {
  std::string key;
  DataType dtype;
  Shape shape;
  uint64_t begin, end;
};

// The JSON header, parsed. nlohmann keeps the last of repeated keys
// silently; a repeated key makes the file ambiguous, so it is refused.
Json parse_header(std::string_view text, const std::string& source) {
  std::vector<std::set<std::string>> keys_of_open_objects;
  std::string repeated;
  Json::parser_callback_t track = [&](int, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start: keys_of_open_objects.emplace_back(); break;
      case Json::parse_event_t::key:
        if (!keys_of_open_objects.back().insert(parsed.get<std::string>()).second &&
            repeated.empty())
          repeated = parsed.get<std::string>();
        break;
      case Json::parse_event_t::object_end: keys_of_open_objects.pop_back(); break;
      default: break;
    }
    return true;
  };
  Json header;
  try {
    header = Json::parse(text.begin(), text.end(), track);
  } catch (const Json::exception& e) {
    corrupt(source, str_cat("the JSON header is not valid JSON: ", e.what()));
  }
  if (!repeated.empty())
    corrupt(source, str_cat("the JSON header repeats the key '", repeated, "'"));
  if (!header.is_object()) corrupt(source, "the JSON header is not an object");
  return header;
}

// One tensor's header entry, checked against the data's size `data_bytes`.
TensorInfo parse_tensor(const std::string& key, const Json& info, uint64_t data_bytes,
                        const std::string& source) {
  const std::string what = str_cat("tensor '", key, "'");
  if (const std::string why = bad_key(key); !why.empty())
    corrupt(source, str_cat("a tensor has ", why));
  if (!info.is_object())
    corrupt(source, str_cat(what, " is not an object with dtype, shape and data_offsets"));
  TensorInfo t{key, DataType::kFloat32, {}, 0, 0};

  auto dtype = info.find("dtype");
  if (dtype == info.end() || !dtype->is_string())
    corrupt(source, str_cat(what, " has no dtype string"));
  const auto known = dtype_from_safetensors(dtype->get_ref<const std::string&>());
  if (!known)
    corrupt(source, str_cat(what, " has dtype '", dtype->get_ref<const std::string&>(),
                            "', which collie's tensors do not hold"));
  t.dtype = *known;

  auto shape = info.find("shape");
  if (shape == info.end() || !shape->is_array())
    corrupt(source, str_cat(what, " has no shape array"));
  if (shape->size() > kMaxTensorDims)
    corrupt(source,
            str_cat(what, " has ", shape->size(), " dimensions (limit ", kMaxTensorDims, ")"));
  // Multiply with an overflow check: dims come from the file, and no tensor
  // holds more elements than the data has bytes. A 0 dimension makes the
  // tensor empty whatever follows, so the product of the other dimensions
  // (what strides are computed from) is bounded on its own.
  uint64_t numel = 1;
  uint64_t extent = 1;  // the product of the non-zero dimensions
  constexpr auto kMaxExtent = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  for (const Json& d : *shape) {
    if (!d.is_number_unsigned())
      corrupt(source, str_cat(what, " has dimension ", d.is_number() ? d.dump() : d.type_name(),
                              ", not a count"));
    const auto dim = d.get<uint64_t>();
    if (dim != 0 && numel > data_bytes / dim)
      corrupt(source, str_cat(what, " declares more elements than the file's ", data_bytes,
                              " bytes of data can hold"));
    if (dim != 0 && extent > kMaxExtent / dim)
      corrupt(source, str_cat(what, " has dimensions that multiply past 2^63 - 1"));
    if (dim != 0) extent *= dim;
    numel *= dim;
    t.shape.push_back(static_cast<int64_t>(dim));
  }

  auto offsets = info.find("data_offsets");
  if (offsets == info.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned())
    corrupt(source, str_cat(what, " has no data_offsets [begin, end]"));
  t.begin = (*offsets)[0].get<uint64_t>();
  t.end = (*offsets)[1].get<uint64_t>();
  if (t.begin > t.end)
    corrupt(source, str_cat(what, " has data_offsets [", t.begin, ", ", t.end,
                            "] that end before they begin"));
  if (t.end > data_bytes)
    corrupt(source, str_cat(what, " ends at data byte ", t.end, " but the file holds ", data_bytes,
                            " bytes of data (truncated file)"));
  const uint64_t nbytes = numel * element_size(t.dtype);  // numel <= data_bytes: no overflow
  if (t.end - t.begin != nbytes)
    corrupt(source, str_cat(what, " is ", type_name(t.dtype, t.shape), ", ", nbytes,
                            " bytes, but its data_offsets [", t.begin, ", ", t.end, "] hold ",
                            t.end - t.begin));
  return t;
}

StateDict parse_safetensors(std::span<const uint8_t> bytes, const std::string& source) {
  if (bytes.size() < 8)
    corrupt(source, str_cat("truncated: ", bytes.size(),
                            " bytes, fewer than the 8 of safetensors' header length"));
  uint64_t header_bytes;
  std::memcpy(&header_bytes, bytes.data(), 8);
  if (header_bytes > bytes.size() - 8)
    corrupt(source,
            str_cat("its first 8 bytes declare a JSON header of ", header_bytes, " bytes but ",
                    bytes.size() - 8, " follow them (truncated file, or not a safetensors file)"));
  if (header_bytes > kMaxSafetensorsHeaderBytes)
    corrupt(source, str_cat("a JSON header of ", header_bytes, " bytes exceeds the limit of ",
                            kMaxSafetensorsHeaderBytes));
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, header_bytes);
  if (text.empty() || text.front() != '{')
    corrupt(source, "the header does not start with '{': not a safetensors file");
  const Json header = parse_header(text, source);
  const auto data = bytes.subspan(8 + header_bytes);

  std::vector<TensorInfo> tensors;
  std::vector<std::pair<std::string, std::string>> strings;
  std::string checksum;
  for (const auto& [key, value] : header.items()) {
    if (key != kMetadataKey) {
      if (tensors.size() == kMaxStateDictEntries)
        corrupt(source, str_cat("more than ", kMaxStateDictEntries, " tensors"));
      tensors.push_back(parse_tensor(key, value, data.size(), source));
      continue;
    }
    if (value.is_null()) continue;
    if (!value.is_object()) corrupt(source, "__metadata__ is not an object of strings");
    for (const auto& [name, text_value] : value.items()) {
      if (!text_value.is_string())
        corrupt(source,
                str_cat("__metadata__ '", name, "' is ", text_value.type_name(), ", not a string"));
      if (name == kDataSha256Key) {
        checksum = text_value.get<std::string>();
        continue;
      }
      if (const std::string why = bad_key(name); !why.empty())
        corrupt(source, str_cat("__metadata__ has ", why));
      strings.emplace_back(name, text_value.get<std::string>());
    }
  }

  // The data must be the tensors back to back, every byte some tensor's:
  // in the order of their offsets (an empty tensor before one that starts
  // where it is), each begins where the previous one ended.
  std::stable_sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  uint64_t at = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : tensors) {
    if (t.begin != at) {
      const std::string before =
          previous ? str_cat("the previous tensor ('", previous->key, "') ends at ", at)
                   : std::string("the data starts at 0");
      corrupt(source, t.begin < at
                          ? str_cat("tensor '", t.key, "' at data bytes [", t.begin, ", ", t.end,
                                    ") overlaps another: ", before)
                          : str_cat("tensor '", t.key, "' starts at data byte ", t.begin, " but ",
                                    before, ": ", t.begin - at, " bytes belong to no tensor"));
    }
    at = t.end;
    previous = &t;
  }
  if (at != data.size())
    corrupt(source, str_cat(data.size() - at, " bytes after the end of the last tensor's data (at ",
                            at, ") belong to no tensor (trailing garbage)"));
  if (!checksum.empty()) {
    const std::string actual = to_hex(Sha256::digest(data));
    if (actual != checksum)
      corrupt(source,
              str_cat("checksum mismatch: the data's SHA-256 is ", actual, " but ", kDataSha256Key,
                      " records ", checksum, ": the data was modified or damaged"));
  }

  StateDict dict;
  for (const TensorInfo& t : tensors) {
    StateDict::Entry e{t.dtype, t.shape, {}};
    e.bytes.assign(data.begin() + static_cast<ptrdiff_t>(t.begin),
                   data.begin() + static_cast<ptrdiff_t>(t.end));
    dict.set_entry(t.key, std::move(e));
  }
  for (auto& [name, value] : strings) {
    if (dict.contains(name))
      corrupt(source, str_cat("'", name, "' names both a tensor and a __metadata__ string"));
    dict.set_string(name, value);
  }
  return dict;
}

uint64_t fnv1a64(std::span<const uint8_t> bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : bytes) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

std::string_view safetensors_dtype(DataType dtype) {
  for (const auto& d : kDtypeNames)
    if (d.dtype == dtype) return d.name;
  throw InvalidArgument(str_cat("no safetensors dtype for DataType ", int(dtype)));
}

std::optional<DataType> dtype_from_safetensors(std::string_view name) {
  for (const auto& d : kDtypeNames)
    if (d.name == name) return d.dtype;
  return std::nullopt;
}

void StateDict::set_entry(const std::string& key, Entry entry) {
  if (const std::string why = bad_key(key); !why.empty())
    throw InvalidArgument(str_cat("state_dict: ", why));
  COLLIE_ARG_CHECK(find_string(key) == nullptr, "state_dict key '", key,
                   "' already names a string");
  COLLIE_ARG_CHECK(is_valid(entry.dtype), "dtype ", int(entry.dtype), " of '", key, "'");
  COLLIE_ARG_CHECK_LE(entry.shape.size(), kMaxTensorDims, "dimensions of '", key, "'");
  for (int64_t d : entry.shape)
    COLLIE_ARG_CHECK_GE(d, 0, "dimension of '", key, "' ", shape_to_string(entry.shape));
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
  if (const std::string why = bad_key(key); !why.empty())
    throw InvalidArgument(str_cat("state_dict: string with ", why));
  COLLIE_ARG_CHECK(key != kDataSha256Key, "state_dict: '", key,
                   "' is reserved for the checksum the writer adds");
  COLLIE_ARG_CHECK(!contains(key), "state_dict key '", key, "' already names a tensor");
  COLLIE_ARG_CHECK(is_utf8(value), "state_dict string '", key,
                   "' is not valid UTF-8 (safetensors' metadata is JSON text)");
  for (auto& [k, v] : strings_)
    if (k == key) {
      v = value;
      return;
    }
  strings_.emplace_back(key, std::string(value));
}

const std::string* StateDict::find_string(const std::string& key) const {
  for (const auto& [k, v] : strings_)
    if (k == key) return &v;
  return nullptr;
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
  if (const std::string* s = find_string(key)) return *s;
  const Entry& e = typed(key, DataType::kUInt8);  // a string of the earlier format
  return std::string(e.bytes.begin(), e.bytes.end());
}

std::vector<uint8_t> serialize_state_dict(const StateDict& dict) {
  Json metadata = Json::object();
  // What transformers expects of a torch file; a dict of the earlier format
  // may hold a "format" tensor, which leaves the name alone.
  if (!dict.has_string("format") && !dict.contains("format")) metadata["format"] = "pt";
  for (const auto& [key, value] : dict.strings()) metadata[key] = value;
  Sha256 sha;
  uint64_t data_bytes = 0;
  for (const auto& [key, e] : dict.entries()) {
    sha.update(e.bytes);
    data_bytes += e.bytes.size();
  }
  metadata[kDataSha256Key] = to_hex(sha.finish());

  Json header = Json::object();
  header[std::string(kMetadataKey)] = std::move(metadata);
  uint64_t offset = 0;
  for (const auto& [key, e] : dict.entries()) {
    Json info = Json::object();
    info["dtype"] = safetensors_dtype(e.dtype);
    info["shape"] = e.shape;
    info["data_offsets"] = {offset, offset + e.bytes.size()};
    header[key] = std::move(info);
    offset += e.bytes.size();
  }
  // Keys and strings were checked for UTF-8 when set: dump cannot throw.
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned

  std::vector<uint8_t> out;
  out.reserve(8 + text.size() + data_bytes);
  put<uint64_t>(out, text.size());
  out.insert(out.end(), text.begin(), text.end());
  for (const auto& [key, e] : dict.entries()) out.insert(out.end(), e.bytes.begin(), e.bytes.end());
  return out;
}

StateDict parse_state_dict(std::span<const uint8_t> bytes, const std::string& source) {
  if (legacy::is_v1(bytes)) return legacy::parse_state_dict_v1(bytes, source);
  return parse_safetensors(bytes, source);
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

// ---- the earlier format ------------------------------------------------------

namespace legacy {

bool is_v1(std::span<const uint8_t> bytes) {
  return bytes.size() >= sizeof(kMagic) && std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) == 0;
}

std::vector<uint8_t> serialize_state_dict_v1(const StateDict& dict) {
  std::vector<uint8_t> payload;
  auto entry = [&](const std::string& key, DataType dtype, const Shape& shape,
                   std::span<const uint8_t> bytes) {
    put<uint32_t>(payload, static_cast<uint32_t>(key.size()));
    payload.insert(payload.end(), key.begin(), key.end());
    put<uint8_t>(payload, static_cast<uint8_t>(dtype));
    put<uint8_t>(payload, static_cast<uint8_t>(shape.size()));
    put<uint16_t>(payload, 0);
    for (int64_t d : shape) put<int64_t>(payload, d);
    put<uint64_t>(payload, bytes.size());
    payload.insert(payload.end(), bytes.begin(), bytes.end());
  };
  for (const auto& [key, e] : dict.entries()) entry(key, e.dtype, e.shape, e.bytes);
  for (const auto& [key, value] : dict.strings())
    entry(key, DataType::kUInt8, {static_cast<int64_t>(value.size())},
          {reinterpret_cast<const uint8_t*>(value.data()), value.size()});
  std::vector<uint8_t> out(kMagic, kMagic + sizeof(kMagic));
  out.reserve(kHeaderBytes + payload.size());
  put<uint32_t>(out, kVersion);
  put<uint32_t>(out, 0);
  put<uint64_t>(out, dict.size() + dict.strings().size());
  put<uint64_t>(out, payload.size());
  put<uint64_t>(out, fnv1a64(payload));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

StateDict parse_state_dict_v1(std::span<const uint8_t> bytes, const std::string& source) {
  Reader in(bytes, source);
  auto magic = in.take(8, "the magic number");
  if (std::memcmp(magic.data(), kMagic, 8) != 0)
    in.corrupt("bad magic number: not a collie state_dict");
  const auto version = in.get<uint32_t>("the version");
  if (version != kVersion)
    in.corrupt(str_cat("unsupported version ", version,
                       " of the COLLIESD format (this build reads ", "version ", kVersion,
                       ", and safetensors)"));
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
    if (const std::string why = bad_key(key); !why.empty())
      in.corrupt(str_cat(entry, " has ", why));
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
    // Multiply with an overflow check: dims come from the file. As in the
    // safetensors reader, the non-zero dimensions of an empty tensor are
    // bounded too.
    uint64_t numel = 1;
    uint64_t extent = 1;
    for (int d = 0; d < ndim; ++d) {
      const auto dim = in.get<int64_t>("a dimension");
      if (dim < 0) in.corrupt(str_cat(what, " has negative dimension ", dim));
      if (dim != 0 && numel > payload_bytes / static_cast<uint64_t>(dim))
        in.corrupt(str_cat(what, " declares more elements than the file can hold"));
      if (dim != 0 && extent > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) /
                                   static_cast<uint64_t>(dim))
        in.corrupt(str_cat(what, " has dimensions that multiply past 2^63 - 1"));
      if (dim != 0) extent *= static_cast<uint64_t>(dim);
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

}  // namespace legacy

}  // namespace collie::nn
