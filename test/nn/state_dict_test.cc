// state_dict save/load: safetensors files laid out as the spec says, round
// trips, a strict module load, files of the earlier "COLLIESD" format still
// loading, and a parser that rejects every truncation and corruption with a
// message naming the file and the tensor.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "collie/base/sha256.h"
#include "collie/nn/atomic_file.h"
#include "collie/nn/sequential.h"
#include "collie/nn/state_dict.h"
#include "collie/nn/state_dict_legacy.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::nn;
using Catch::Contains;
using Json = nlohmann::ordered_json;

namespace {

StateDict sample_dict() {
  StateDict d;
  d.set_floats("1.weight", {2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  d.set_floats("1.bias", {2}, std::vector<float>{-1, 0.5f});
  d.set_int("optimizer.state.0.step", 7);
  d.set_double("optimizer.lr", 3e-4);
  d.set_string("config", R"({"epochs": 10, "note": "a \"quoted\" word, é"})");
  return d;
}

uint64_t header_length(const std::vector<uint8_t>& file) {
  uint64_t n;
  std::memcpy(&n, file.data(), 8);
  return n;
}

Json header_of(const std::vector<uint8_t>& file) {
  const uint64_t n = header_length(file);
  return Json::parse(file.begin() + 8, file.begin() + 8 + static_cast<ptrdiff_t>(n));
}

// A safetensors file from a header's text and data, as another writer might
// make it: no checksum, no padding.
std::vector<uint8_t> raw_file(const std::string& text, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(8 + text.size() + data.size());
  const uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + text.size(), data.data(), data.size());
  return out;
}

std::vector<uint8_t> file_of(const Json& header, const std::vector<uint8_t>& data) {
  return raw_file(header.dump(), data);
}

std::vector<uint8_t> floats_bytes(std::vector<float> v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

}  // namespace

TEST_CASE("a state_dict is a safetensors file: header length, JSON header, aligned raw data") {
  const auto file = serialize_state_dict(sample_dict());
  const uint64_t n = header_length(file);
  CHECK(n % 8 == 0);  // the data starts 8-byte aligned, the header padded with spaces
  REQUIRE(8 + n <= file.size());
  const std::string text(file.begin() + 8, file.begin() + 8 + static_cast<ptrdiff_t>(n));
  CHECK(text.front() == '{');
  CHECK(text.find_last_not_of(' ') + 1 >= n - 7);
  const Json header = header_of(file);
  CHECK(header["1.weight"]["dtype"] == "F32");
  CHECK(header["1.weight"]["shape"] == Json::array({2, 3}));
  CHECK(header["1.weight"]["data_offsets"] == Json::array({0, 24}));
  CHECK(header["1.bias"]["data_offsets"] == Json::array({24, 32}));
  CHECK(header["optimizer.state.0.step"]["dtype"] == "I64");
  CHECK(header["optimizer.state.0.step"]["shape"] == Json::array());
  CHECK(header["optimizer.lr"]["dtype"] == "F64");
  CHECK(header["optimizer.lr"]["data_offsets"] == Json::array({40, 48}));
  const Json& meta = header["__metadata__"];
  CHECK(meta["format"] == "pt");
  CHECK(meta["config"] == R"({"epochs": 10, "note": "a \"quoted\" word, é"})");
  const std::span<const uint8_t> data(file.data() + 8 + n, file.size() - 8 - n);
  REQUIRE(data.size() == 48);
  float w[6];
  std::memcpy(w, data.data(), 24);
  CHECK(w[5] == 6.0f);
  CHECK(meta[kDataSha256Key].get<std::string>().size() == 64);
  // The same dict gives the same bytes.
  CHECK(serialize_state_dict(sample_dict()) == file);
}

TEST_CASE("a state_dict round-trips through bytes and files in key order") {
  test::TempDir dir;
  const auto bytes = serialize_state_dict(sample_dict());
  save_state_dict(sample_dict(), dir.file("ckpt.pth"));
  for (const StateDict& d : {parse_state_dict(bytes), load_state_dict(dir.file("ckpt.pth"))}) {
    REQUIRE(d.size() == 4);
    CHECK(d.entries()[0].first == "1.weight");
    CHECK(d.entries()[3].first == "optimizer.lr");
    CHECK(d.get_floats("1.weight", {2, 3}) == std::vector<float>{1, 2, 3, 4, 5, 6});
    CHECK(d.get_int("optimizer.state.0.step") == 7);
    CHECK(d.get_double("optimizer.lr") == 3e-4);
    CHECK(d.get_string("config") == R"({"epochs": 10, "note": "a \"quoted\" word, é"})");
    CHECK(d.get_string("format") == "pt");
    CHECK_FALSE(d.has_string(kDataSha256Key));  // the checksum is the file's, not the dict's
  }
  auto d = parse_state_dict(bytes);
  CHECK_THROWS_WITH(d.get_floats("1.weight", {3, 2}),
                    Contains("'1.weight' has shape [2, 3], expected [3, 2]"));
  CHECK_THROWS_WITH(d.get_int("1.bias"), Contains("holds float32[2], expected int64"));
  CHECK_THROWS_WITH(d.get_int("missing"), Contains("no key 'missing'"));
  // Only the final file is left in the directory: no temporaries.
  size_t files = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir.path())) ++files;
  CHECK(files == 1);
}

TEST_CASE("every dtype collie holds round-trips under its safetensors name") {
  StateDict d;
  const std::pair<DataType, const char*> types[] = {
      {DataType::kFloat32, "F32"},   {DataType::kFloat64, "F64"}, {DataType::kFloat16, "F16"},
      {DataType::kBFloat16, "BF16"}, {DataType::kInt32, "I32"},   {DataType::kInt64, "I64"},
      {DataType::kUInt8, "U8"},      {DataType::kInt8, "I8"},     {DataType::kBool, "BOOL"}};
  for (const auto& [dtype, name] : types) {
    StateDict::Entry e{dtype, {3}, std::vector<uint8_t>(3 * element_size(dtype))};
    for (size_t i = 0; i < e.bytes.size(); ++i) e.bytes[i] = static_cast<uint8_t>(i % 2);
    d.set_entry(name, e);
    CHECK(safetensors_dtype(dtype) == name);
    CHECK(dtype_from_safetensors(name) == dtype);
  }
  d.set_floats("empty", {0, 4}, std::vector<float>{});
  const auto file = serialize_state_dict(d);
  const Json header = header_of(file);
  for (const auto& [dtype, name] : types) CHECK(header[name]["dtype"] == name);
  const StateDict back = parse_state_dict(file);
  REQUIRE(back.size() == d.size());
  for (size_t i = 0; i < d.size(); ++i) {
    CHECK(back.entries()[i].first == d.entries()[i].first);
    CHECK(back.entries()[i].second.dtype == d.entries()[i].second.dtype);
    CHECK(back.entries()[i].second.shape == d.entries()[i].second.shape);
    CHECK(back.entries()[i].second.bytes == d.entries()[i].second.bytes);
  }
  CHECK_FALSE(dtype_from_safetensors("U16").has_value());
}

TEST_CASE("another writer's safetensors file loads: no checksum, no padding, any key order") {
  // Keys not in data order, as safetensors' Python writer may put them.
  Json header = Json::object();
  header["b"] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {8, 16}}};
  header["a"] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}};
  header["__metadata__"] = {{"format", "pt"}};
  const StateDict d = parse_state_dict(file_of(header, floats_bytes({1, 2, 3, 4})), "torch.st");
  REQUIRE(d.size() == 2);
  CHECK(d.entries()[0].first == "a");  // in the order of the data
  CHECK(d.get_floats("a", {2}) == std::vector<float>{1, 2});
  CHECK(d.get_floats("b", {2}) == std::vector<float>{3, 4});
}

TEST_CASE("every truncation of a valid state_dict is rejected, none crashes") {
  const auto bytes = serialize_state_dict(sample_dict());
  for (size_t n = 0; n < bytes.size(); ++n) {
    INFO("prefix of " << n << " bytes");
    CHECK_THROWS_AS(parse_state_dict(std::span(bytes).first(n), "ckpt.pth"), Error);
  }
  const size_t data_at = 8 + header_length(bytes);
  CHECK_THROWS_WITH(parse_state_dict(std::span(bytes).first(40), "ckpt.pth"),
                    Contains("state_dict 'ckpt.pth' is corrupt: its first 8 bytes declare a "
                             "JSON header of") &&
                        Contains("truncated"));
  CHECK_THROWS_WITH(parse_state_dict(std::span(bytes).first(4), "ckpt.pth"),
                    Contains("truncated: 4 bytes"));
  // Cut inside the data: the error names the tensor that no longer fits.
  CHECK_THROWS_WITH(parse_state_dict(std::span(bytes).first(data_at + 30), "ckpt.pth"),
                    Contains("'ckpt.pth'") && Contains("tensor '1.bias' ends at data byte 32") &&
                        Contains("truncated file"));
}

TEST_CASE("corrupt state_dicts get errors naming the file, the tensor and the problem") {
  const auto good = serialize_state_dict(sample_dict());
  // A flipped bit in tensor data fails the checksum.
  auto flipped = good;
  flipped[flipped.size() - 20] ^= 0x10;
  CHECK_THROWS_WITH(parse_state_dict(flipped, "f"),
                    Contains("state_dict 'f' is corrupt") && Contains("checksum mismatch"));
  auto extra = good;
  extra.push_back(0);
  CHECK_THROWS_WITH(parse_state_dict(extra, "f"), Contains("trailing garbage"));
  CHECK_THROWS_WITH(parse_state_dict(std::vector<uint8_t>(16, 0), "f"),
                    Contains("does not start with '{'"));

  const auto data = floats_bytes({1, 2, 3, 4});
  auto with = [&](const char* key, Json info) {
    Json h = Json::object();
    h["a"] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}};
    h[key] = std::move(info);
    return file_of(h, data);
  };
  auto tensor = [](Json dtype, Json shape, Json offsets) {
    return Json{{"dtype", dtype}, {"shape", shape}, {"data_offsets", offsets}};
  };
  CHECK_NOTHROW(parse_state_dict(with("b", tensor("F32", {2}, {8, 16})), "f"));  // well-formed
  CHECK_THROWS_WITH(parse_state_dict(with("b", tensor("U16", {4}, {8, 16})), "f"),
                    Contains("tensor 'b' has dtype 'U16', which collie's tensors do not hold"));
  CHECK_THROWS_WITH(parse_state_dict(with("b", tensor("F32", {3}, {8, 16})), "f"),
                    Contains("tensor 'b' is float32[3], 12 bytes, but its data_offsets [8, 16] "
                             "hold 8"));
  CHECK_THROWS_WITH(parse_state_dict(with("b", tensor("F32", {-2}, {8, 16})), "f"),
                    Contains("tensor 'b' has dimension -2, not a count"));
  CHECK_THROWS_WITH(
      parse_state_dict(with("b", tensor("F32", {1ull << 62, 1ull << 62}, {8, 16})), "f"),
      Contains("tensor 'b' declares more elements than"));
  // Empty (a 0 dimension), but the other dimensions overflow int64 strides.
  CHECK_THROWS_WITH(
      parse_state_dict(with("b", tensor("F32", {0, 1ull << 62, 1ull << 62}, {8, 8})), "f"),
      Contains("tensor 'b' has dimensions that multiply past 2^63 - 1"));
  CHECK_THROWS_WITH(parse_state_dict(with("b", tensor("F32", {0, ~0ull}, {8, 8})), "f"),
                    Contains("tensor 'b' has dimensions that multiply past 2^63 - 1"));
  CHECK_THROWS_WITH(parse_state_dict(with("b", tensor("F32", {1}, {12, 16})), "f"),
                    Contains("tensor 'b' starts at data byte 12 but the previous tensor ('a') "
                             "ends at 8: 4 bytes belong to no tensor"));
  CHECK_THROWS_WITH(parse_state_dict(with("b", tensor("F32", {2}, {4, 12})), "f"),
                    Contains("overlaps"));
  CHECK_THROWS_WITH(parse_state_dict(with("b", tensor("F32", {4}, {8, 24})), "f"),
                    Contains("tensor 'b' ends at data byte 24 but the file holds 16 bytes"));
  CHECK_THROWS_WITH(parse_state_dict(with("b", tensor("F32", {2}, {16, 8})), "f"),
                    Contains("end before they begin"));
  CHECK_THROWS_WITH(parse_state_dict(with("b", Json::array()), "f"),
                    Contains("tensor 'b' is not an object"));
  CHECK_THROWS_WITH(parse_state_dict(with("__metadata__", {{"x", 1}}), "f"),
                    Contains("__metadata__ 'x' is number, not a string"));
  Json clash = Json::object();
  clash["a"] = tensor("F32", {2}, {0, 8});
  clash["__metadata__"] = {{"a", "also a tensor"}};
  CHECK_THROWS_WITH(parse_state_dict(file_of(clash, floats_bytes({1, 2})), "f"),
                    Contains("'a' names both a tensor and a __metadata__ string"));
  // A repeated key: nlohmann would keep the last one silently.
  std::string text = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  auto repeated = raw_file(text, data);
  CHECK_THROWS_WITH(parse_state_dict(repeated, "f"), Contains("repeats the key 'a'"));
  text[text.size() - 2] = ']';  // not JSON any more
  CHECK_THROWS_WITH(parse_state_dict(raw_file(text, data), "f"), Contains("is not valid JSON"));
}

TEST_CASE("a StateDict refuses keys a safetensors file cannot hold") {
  StateDict d;
  d.set_floats("w", {1}, std::vector<float>{1});
  d.set_string("s", "text");
  CHECK_THROWS_WITH(d.set_string("w", "x"), Contains("'w' already names a tensor"));
  CHECK_THROWS_WITH(d.set_int("s", 1), Contains("'s' already names a string"));
  CHECK_THROWS_WITH(d.set_int("__metadata__", 1), Contains("safetensors reserves"));
  CHECK_THROWS_WITH(d.set_int("", 1), Contains("a key of 0 bytes"));
  CHECK_THROWS_WITH(d.set_string("bad", std::string("\xff\xfe")), Contains("not valid UTF-8"));
  CHECK_THROWS_WITH(d.set_int(std::string("k\xff"), 1), Contains("not valid UTF-8"));
  CHECK_THROWS_AS(d.set_string(kDataSha256Key, "x"), InvalidArgument);
  d.set_string("s", "replaced");
  CHECK(d.get_string("s") == "replaced");
  CHECK(d.strings().size() == 1);
}

TEST_CASE("files of the earlier COLLIESD format still load") {
  test::TempDir dir;
  const auto old = legacy::serialize_state_dict_v1(sample_dict());
  REQUIRE(std::memcmp(old.data(), "COLLIESD", 8) == 0);
  write_file_atomically(dir.file("old.pth"), old);
  const StateDict d = load_state_dict(dir.file("old.pth"));
  CHECK(d.get_floats("1.weight", {2, 3}) == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(d.get_int("optimizer.state.0.step") == 7);
  CHECK(d.get_double("optimizer.lr") == 3e-4);
  // Strings were uint8 tensors then; get_string reads them.
  CHECK(d.get_string("config") == R"({"epochs": 10, "note": "a \"quoted\" word, é"})");
  // Saved again, it is a safetensors file with the same contents.
  const StateDict again = parse_state_dict(serialize_state_dict(d));
  CHECK(again.get_floats("1.weight", {2, 3}) == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(again.get_string("config") == d.get_string("config"));

  // Its integrity checks stay: truncation, checksum, structure.
  for (size_t n = 0; n < old.size(); ++n) {
    INFO("prefix of " << n << " bytes");
    CHECK_THROWS_AS(parse_state_dict(std::span(old).first(n), "old.pth"), Error);
  }
  CHECK_THROWS_WITH(
      parse_state_dict(std::span(old).first(40), "old.pth"),
      Contains("state_dict 'old.pth' is corrupt: header declares") && Contains("truncated"));
  auto with = [&](size_t offset, std::vector<uint8_t> patch) {
    auto b = old;
    std::memcpy(b.data() + offset, patch.data(), patch.size());
    return b;
  };
  CHECK_THROWS_WITH(parse_state_dict(with(8, {9}), "f"), Contains("unsupported version 9"));
  CHECK_THROWS_WITH(parse_state_dict(with(16, {0xff, 0xff, 0xff, 0xff}), "f"),
                    Contains("entry count"));
  CHECK_THROWS_WITH(parse_state_dict(with(old.size() - 20, {0x55}), "f"),
                    Contains("checksum mismatch"));
  auto extra = old;
  extra.push_back(0);
  CHECK_THROWS_WITH(parse_state_dict(extra, "f"), Contains("trailing garbage"));
  // Structural lies inside a payload with a valid checksum.
  StateDict one;
  one.set_floats("w", {2}, std::vector<float>{1, 2});
  auto b = legacy::serialize_state_dict_v1(one);
  const size_t dims_at = 40 + 4 + 1 + 1 + 1 + 2;  // header, key length, key, dtype, ndim, reserved
  auto refit = [](std::vector<uint8_t> v) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 40; i < v.size(); ++i) h = (h ^ v[i]) * 0x100000001b3ull;
    std::memcpy(v.data() + 32, &h, 8);
    return v;
  };
  auto lie = b;
  int64_t huge = int64_t(1) << 40;
  std::memcpy(lie.data() + dims_at, &huge, 8);
  CHECK_THROWS_WITH(parse_state_dict(refit(lie), "f"), Contains("entry 0 ('w')"));
  lie = b;
  lie[40 + 4 + 1] = 42;  // dtype
  CHECK_THROWS_WITH(parse_state_dict(refit(lie), "f"), Contains("unknown dtype 42"));
  lie = b;
  lie[40 + 4 + 1 + 1] = 200;  // ndim
  CHECK_THROWS_WITH(parse_state_dict(refit(lie), "f"), Contains("200 dimensions"));
}

TEST_CASE("load_state_dict names the file that is missing or corrupt") {
  test::TempDir dir;
  CHECK_THROWS_WITH(load_state_dict(dir.file("nope.pth")), Contains("nope.pth"));
  std::ofstream(dir.file("junk.pth")) << "not a checkpoint at all, definitely not";
  CHECK_THROWS_WITH(load_state_dict(dir.file("junk.pth")),
                    Contains("junk.pth") && Contains("not a safetensors file"));
}

TEST_CASE(
    "module state uses torch's keys, loads strictly and leaves the model untouched on error") {
  auto a = make_mlp<float>({.sizes = {4, 3, 2}, .seed = 1});
  auto b = make_mlp<float>({.sizes = {4, 3, 2}, .seed = 2});
  StateDict d;
  save_module_state(a, d);
  // nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)).state_dict():
  // Linear weights are [out, in].
  REQUIRE(d.size() == 4);
  CHECK(d.entries()[0].first == "1.weight");
  CHECK(d.entries()[0].second.shape == Shape{3, 4});
  CHECK(d.entries()[1].first == "1.bias");
  CHECK(d.entries()[2].first == "3.weight");
  CHECK(d.entries()[2].second.shape == Shape{2, 3});
  load_module_state(b, parse_state_dict(serialize_state_dict(d)));
  for (size_t k = 0; k < a.parameters().size(); ++k)
    for (size_t i = 0; i < a.parameters()[k]->numel(); ++i)
      CHECK(a.parameters()[k]->data()[i] == b.parameters()[k]->data()[i]);
  auto wide = make_mlp<float>({.sizes = {4, 5, 2}, .seed = 3});
  const float before = wide.parameters()[0]->data()[0];
  CHECK_THROWS_WITH(load_module_state(wide, d),
                    Contains("'1.weight' has shape [3, 4], expected [5, 4]"));
  CHECK(wide.parameters()[0]->data()[0] == before);
}

TEST_CASE("write_file_atomically replaces a file whole and reports failures") {
  test::TempDir dir;
  const std::string path = dir.file("f.bin");
  std::vector<uint8_t> one(1000, 1), two(10, 2);
  write_file_atomically(path, one);
  write_file_atomically(path, two);
  CHECK(read_file(path) == two);
  CHECK_THROWS_WITH(write_file_atomically(dir.file("no/such/dir/f"), two),
                    Contains("no/such/dir/f"));
  CHECK_THROWS_WITH(read_file(path, 5), Contains("more than the limit of 5"));
}
