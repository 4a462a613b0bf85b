// The training sample's data path and metrics: IDX parsing against bad
// files, the real Fashion-MNIST package, synthetic data, SmoothedValue.
#include <zlib.h>
#include <catch2/catch.hpp>

#include <fstream>

#include "collie/base/error.h"
#include "collie/samples/blip_train/fashion_mnist.h"
#include "collie/samples/blip_train/idx_file.h"
#include "collie/samples/blip_train/metric_logger.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::samples;
using Catch::Matchers::Contains;

namespace {

std::vector<uint8_t> idx_bytes(std::vector<uint32_t> dims, size_t data_bytes) {
  std::vector<uint8_t> b{0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    b.push_back(static_cast<uint8_t>(d >> 24));
    b.push_back(static_cast<uint8_t>(d >> 16));
    b.push_back(static_cast<uint8_t>(d >> 8));
    b.push_back(static_cast<uint8_t>(d));
  }
  for (size_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<uint8_t>(i));
  return b;
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

}  // namespace

TEST_CASE("parse_idx accepts a well-formed array and rejects each kind of damage by name") {
  auto ok = parse_idx(idx_bytes({2, 3, 4}, 24), "x.idx");
  CHECK(ok.dims == std::vector<uint32_t>{2, 3, 4});
  CHECK(ok.data.size() == 24);
  CHECK(ok.data[23] == 23);

  CHECK_THROWS_WITH(parse_idx(std::vector<uint8_t>{0, 0}, "a.idx"),
                    Contains("a.idx") && Contains("shorter"));
  auto bad_magic = idx_bytes({4}, 4);
  bad_magic[0] = 7;
  CHECK_THROWS_WITH(parse_idx(bad_magic, "b.idx"), Contains("magic"));
  auto bad_type = idx_bytes({4}, 4);
  bad_type[2] = 0x0D;  // float
  CHECK_THROWS_WITH(parse_idx(bad_type, "c.idx"), Contains("element type"));
  CHECK_THROWS_WITH(parse_idx(idx_bytes({10, 28, 28}, 7839), "d.idx"),
                    Contains("10x28x28 = 7840 bytes") && Contains("truncated"));
  CHECK_THROWS_WITH(parse_idx(idx_bytes({4}, 5), "e.idx"), Contains("trailing"));
  // Sizes whose product overflows must not allocate or wrap around.
  CHECK_THROWS_WITH(parse_idx(idx_bytes({0xFFFFFFF0u, 0xFFFFFFF0u}, 0), "f.idx"),
                    Contains("f.idx"));
  auto many_dims = idx_bytes({1}, 1);
  many_dims[3] = 200;
  CHECK_THROWS_WITH(parse_idx(many_dims, "g.idx"), Contains("200 dimensions"));
}

TEST_CASE("read_idx_file names a missing file, a corrupt gzip stream and a truncated one") {
  test::TempDir dir;
  CHECK_THROWS_WITH(read_idx_file(dir.file("missing.gz")),
                    Contains("missing.gz") && Contains("cannot open"));

  write_gz(dir.file("good.gz"), idx_bytes({3, 2}, 6));
  CHECK(read_idx_file(dir.file("good.gz")).dims == std::vector<uint32_t>{3, 2});

  // Cut a valid gzip file in half: zlib must report it, not return less data.
  write_gz(dir.file("big.gz"), idx_bytes({1000, 28, 28}, 784000));
  std::ifstream in(dir.file("big.gz"), std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(dir.file("cut.gz"), std::ios::binary) << all.substr(0, all.size() / 2);
  CHECK_THROWS_WITH(read_idx_file(dir.file("cut.gz")), Contains("cut.gz"));

  std::string garbage = all;
  for (size_t i = 20; i < 200; ++i) garbage[i] = static_cast<char>(garbage[i] ^ 0x5A);
  std::ofstream(dir.file("garbage.gz"), std::ios::binary) << garbage;
  CHECK_THROWS_WITH(read_idx_file(dir.file("garbage.gz")), Contains("garbage.gz"));
}

TEST_CASE("the real Fashion-MNIST package loads: 60000 + 10000 images, 10 balanced classes") {
  auto train = load_fashion_mnist(kFashionMnistDir, true);
  auto test = load_fashion_mnist(kFashionMnistDir, false);
  REQUIRE(train.size() == 60000);
  REQUIRE(test.size() == 10000);
  CHECK(train.images.size() == 60000u * 784u);
  std::vector<int> per_class(10);
  for (int32_t l : test.labels) per_class.at(l)++;
  for (int c : per_class) CHECK(c == 1000);  // the test split has 1000 per class
  double mean = 0;
  for (float v : train.images) mean += v;
  mean /= static_cast<double>(train.images.size());
  CHECK(std::abs(mean) < 0.01);  // normalised with the training set's mean
}

TEST_CASE("load_fashion_mnist names the missing file in another directory") {
  test::TempDir dir;
  CHECK_THROWS_WITH(load_fashion_mnist(dir.path(), true), Contains("train-images-idx3-ubyte.gz"));
}

TEST_CASE("synthetic data is deterministic in its seed") {
  auto a = make_synthetic(100, 7), b = make_synthetic(100, 7), c = make_synthetic(100, 8);
  CHECK(a.images == b.images);
  CHECK(a.labels == b.labels);
  CHECK(a.images != c.images);
}

TEST_CASE("SmoothedValue: window median and average, global average, BLIP's formats") {
  SmoothedValue v(3);
  for (double x : {1.0, 10.0, 2.0, 3.0}) v.update(x);
  CHECK(v.median() == 3.0);  // window {10, 2, 3}
  CHECK(v.avg() == Approx(5.0));
  CHECK(v.global_avg() == Approx(4.0));
  CHECK(v.max() == 10.0);
  CHECK(v.value() == 3.0);
  CHECK(v.str() == "3.0000 (4.0000)");
  SmoothedValue w(2);
  w.update(1.0, 4);  // a batch mean of 4 examples
  w.update(3.0, 1);
  CHECK(w.global_avg() == Approx(7.0 / 5.0));
  CHECK(w.median() == 1.0);  // lower middle, like torch.median
  CHECK(format_eta(3725.9) == "1:02:05");
  MetricLogger logger;
  logger.meter("lr", 1, "{value:.6f}");
  logger.update("lr", 0.001);
  logger.update("loss", 0.5);
  CHECK(logger.str() == "loss: 0.5000 (0.5000)  lr: 0.001000");
  CHECK_THROWS_AS(logger.at("nope"), InvalidArgument);
}
