// blip_train end to end: real processes under collie-run on the socket
// backend. Synthetic data keeps these quick; one run uses the real package.
#include <signal.h>
#include <catch2/catch.hpp>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "collie/nn/atomic_file.h"
#include "collie/nn/state_dict.h"
#include "collie/test/samples/blip_job.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using Catch::Matchers::Contains;
using collie::test::Subprocess;
using test::blip_job;
using test::json_number;
using test::lines_of;
using test::quick;
namespace fs = std::filesystem;

namespace {

// The model and optimizer tensors of a checkpoint, by key (the epoch and
// configuration are metadata strings).
std::vector<std::pair<std::string, std::vector<uint8_t>>> tensors_of(const std::string& path) {
  nn::StateDict d = nn::load_state_dict(path);
  std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
  for (const auto& [key, entry] : d.entries()) out.emplace_back(key, entry.bytes);
  return out;
}

// quick()'s arguments with other hidden sizes (--hidden appends to a list).
std::vector<std::string> quick_hidden(std::vector<std::string> hidden,
                                      std::vector<std::string> more) {
  std::vector<std::string> a = {"--synthetic", "--synthetic-size", "2000", "--batch-size",
                                "50",          "--print-freq",     "1000", "--hidden"};
  a.insert(a.end(), hidden.begin(), hidden.end());
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// A checkpoint blip_train wrote in the earlier "COLLIESD" format (before
// checkpoints were safetensors): quick_hidden({"8"}, {"--epochs", "1"}) on 2
// ranks. That run logged test_acc 0.546, test_loss 0.983993 (500 examples);
// resumed for epoch 1 it logged train_loss 0.875279, test_acc 0.762,
// test_loss 0.715343 (6 digits then).
const std::string kLegacyCheckpoint =
    std::string(COLLIE_SOURCE_DIR) + "/test/samples/data/blip_legacy_checkpoint_00.pth";

}  // namespace

TEST_CASE(
    "blip_train on 2 ranks writes config.json, one log line per epoch and atomic checkpoints") {
  test::TempDir dir;
  auto p = Subprocess::spawn(blip_job(2, quick({"--epochs", "2", "--output-dir", dir.path()})));
  auto st = p.wait(std::chrono::minutes(3));
  INFO(p.out() << p.err());
  REQUIRE(st.ok());
  CHECK_THAT(p.out(), Contains("[rank0]: final test accuracy"));
  CHECK(p.out().find("[rank1]: final test accuracy") == std::string::npos);  // print on rank 0 only
  CHECK(fs::exists(dir.file("config.json")));
  auto log = lines_of(dir.file("log.txt"));
  REQUIRE(log.size() == 2);
  for (const char* key :
       {"epoch", "train_loss", "train_lr", "test_acc", "test_loss", "world_size", "samples_per_s"})
    CHECK_THAT(log[1], Contains(std::string("\"") + key + "\""));
  CHECK(json_number(log[1], "world_size") == 2);
  CHECK(json_number(log[1], "test_acc") > 0.5);  // synthetic classes are learnable
  CHECK(fs::exists(dir.file("checkpoint_00.pth")));
  CHECK(fs::exists(dir.file("checkpoint_01.pth")));
  CHECK(fs::exists(dir.file("checkpoint_best.pth")));
  for (const auto& e : fs::directory_iterator(dir.path()))  // no temporary left behind
    CHECK(e.path().filename().string().find("tmp") == std::string::npos);
}

TEST_CASE("an interrupted run resumed from its checkpoint ends with the same parameters") {
  test::TempDir full, cut, resumed;
  auto a = Subprocess::spawn(blip_job(2, quick({"--epochs", "3", "--output-dir", full.path()})));
  REQUIRE(a.wait(std::chrono::minutes(3)).ok());

  // A real interruption: stop the job once epoch 1's checkpoint is on disk.
  auto b = Subprocess::spawn(blip_job(2, quick({"--epochs", "3", "--output-dir", cut.path()})));
  b.wait_for_output("saved checkpoint " + cut.file("checkpoint_01.pth"), std::chrono::minutes(3));
  b.kill(SIGTERM);
  b.wait(std::chrono::minutes(1));
  REQUIRE(fs::exists(cut.file("checkpoint_01.pth")));

  auto c = Subprocess::spawn(blip_job(2, quick({"--epochs", "3", "--output-dir", resumed.path(),
                                                "--resume", cut.file("checkpoint_01.pth")})));
  auto st = c.wait(std::chrono::minutes(3));
  INFO(c.out() << c.err());
  REQUIRE(st.ok());
  CHECK_THAT(c.out(), Contains("resume checkpoint from"));
  CHECK_THAT(c.out(), !Contains("warning"));             // the same world size and batch
  CHECK(lines_of(resumed.file("log.txt")).size() == 1);  // only epoch 2 ran
  auto want = tensors_of(full.file("checkpoint_02.pth"));
  auto got = tensors_of(resumed.file("checkpoint_02.pth"));
  REQUIRE(want.size() == got.size());
  REQUIRE(!want.empty());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(want[i].first);
    CHECK(got[i].first == want[i].first);
    CHECK(got[i].second == want[i].second);  // bit for bit
  }
}

TEST_CASE("blip_train writes safetensors checkpoints named as torch's, JSON through nlohmann") {
  test::TempDir dir;
  auto p = Subprocess::spawn(
      blip_job(2, quick_hidden({"16", "8"}, {"--epochs", "1", "--output-dir", dir.path()})));
  REQUIRE(p.wait(std::chrono::minutes(3)).ok());
  const auto bytes = nn::read_file(dir.file("checkpoint_00.pth"));
  REQUIRE(bytes.size() > 8);
  CHECK(std::string(bytes.begin() + 8, bytes.begin() + 10) == "{\"");  // a JSON header
  const nn::StateDict d = nn::load_state_dict(dir.file("checkpoint_00.pth"));
  // nn.Sequential(Flatten, Linear(784, 16), ReLU, Linear(16, 8), ReLU, Linear(8, 10)).
  CHECK(d.at("1.weight").shape == nn::Shape{16, 784});
  CHECK(d.at("3.weight").shape == nn::Shape{8, 16});
  CHECK(d.at("5.bias").shape == nn::Shape{10});
  CHECK(d.contains("optimizer.state.0.exp_avg"));
  CHECK(d.get_string("epoch") == "0");
  const auto config = nlohmann::json::parse(d.get_string("config"));
  CHECK(config["world_size"] == 2);
  CHECK(config["hidden"] == nlohmann::json::array({16, 8}));
  // config.json and the log lines are JSON, laid out as Python's json.dumps.
  CHECK(nlohmann::json::parse(lines_of(dir.file("config.json")).at(0)) == config);
  const std::string line = lines_of(dir.file("log.txt")).at(0);
  CHECK_THAT(line, Contains("{\"epoch\": 0, \"train_loss\": "));
  CHECK(nlohmann::json::parse(line)["test_count"] == 500);
}

TEST_CASE("a checkpoint of the earlier format evaluates and resumes as it did") {
  test::TempDir resumed;
  auto e = Subprocess::spawn(
      blip_job(2, quick_hidden({"8"}, {"--evaluate", "--resume", kLegacyCheckpoint})));
  auto st = e.wait(std::chrono::minutes(3));
  INFO(e.out() << e.err());
  REQUIRE(st.ok());
  CHECK_THAT(e.out(), Contains("\"test_acc\": 0.546, ") && Contains("\"test_count\": 500"));
  CHECK_THAT(e.out(), Contains("\"test_loss\": 0.98399"));

  auto r = Subprocess::spawn(
      blip_job(2, quick_hidden({"8"}, {"--epochs", "2", "--resume", kLegacyCheckpoint,
                                       "--output-dir", resumed.path()})));
  st = r.wait(std::chrono::minutes(3));
  INFO(r.out() << r.err());
  REQUIRE(st.ok());
  CHECK_THAT(r.out(), !Contains("warning"));  // its config's world size and batch were read
  auto log = lines_of(resumed.file("log.txt"));
  REQUIRE(log.size() == 1);
  CHECK(json_number(log[0], "epoch") == 1);
  CHECK(json_number(log[0], "train_loss") == Approx(0.875279).margin(1e-6));
  CHECK(json_number(log[0], "test_acc") == 0.762);
  CHECK(json_number(log[0], "test_loss") == Approx(0.715343).margin(1e-6));
  // The new checkpoint is safetensors, with the epoch as metadata.
  CHECK(nn::load_state_dict(resumed.file("checkpoint_01.pth")).get_string("epoch") == "1");
}

TEST_CASE(
    "blip_train with --dist-eval counts every test example exactly once and agrees with rank-0 "
    "evaluation") {
  test::TempDir train, single, shard;
  // 2000 synthetic training examples -> 500 test examples: 3 ranks pad 1.
  auto t = Subprocess::spawn(blip_job(3, quick({"--epochs", "1", "--output-dir", train.path()})));
  REQUIRE(t.wait(std::chrono::minutes(3)).ok());
  const std::string ckpt = train.file("checkpoint_00.pth");
  auto a = Subprocess::spawn(
      blip_job(3, quick({"--evaluate", "--resume", ckpt, "--output-dir", single.path()})));
  auto b = Subprocess::spawn(blip_job(
      3, quick({"--evaluate", "--dist-eval", "--resume", ckpt, "--output-dir", shard.path()})));
  REQUIRE(a.wait(std::chrono::minutes(3)).ok());
  auto st = b.wait(std::chrono::minutes(3));
  INFO(b.out() << b.err());
  REQUIRE(st.ok());
  auto la = lines_of(single.file("log.txt")), lb = lines_of(shard.file("log.txt"));
  REQUIRE(la.size() == 1);
  REQUIRE(lb.size() == 1);
  CHECK(json_number(la[0], "test_count") == 500);
  CHECK(json_number(lb[0], "test_count") == 500);
  CHECK(json_number(lb[0], "test_acc") == Approx(json_number(la[0], "test_acc")).epsilon(1e-9));
}

TEST_CASE("blip_train on the real Fashion-MNIST: a short run learns") {
  test::TempDir dir;
  auto p =
      Subprocess::spawn(blip_job(2, {"--epochs", "1", "--max-steps", "60", "--batch-size", "64",
                                     "--print-freq", "1000", "--output-dir", dir.path()}));
  auto st = p.wait(std::chrono::minutes(4));
  INFO(p.out() << p.err());
  REQUIRE(st.ok());
  auto log = lines_of(dir.file("log.txt"));
  REQUIRE(log.size() == 1);
  CHECK(json_number(log[0], "test_count") == 10000);
  CHECK(json_number(log[0], "test_acc") > 0.6);  // chance is 0.1
}

TEST_CASE("blip_train: a missing data directory is an error naming the file, and no rank hangs") {
  test::TempDir dir;
  auto p =
      Subprocess::spawn(blip_job(2, {"--data-dir", dir.path(), "--output-dir", dir.file("out")}));
  auto st = p.wait(std::chrono::minutes(2));
  CHECK_FALSE(st.ok());
  CHECK_THAT(p.out() + p.err(), Contains("train-images-idx3-ubyte.gz"));
}

TEST_CASE("blip_train without a launcher: \"Not using distributed mode\"") {
  test::TempDir dir;
  auto p = Subprocess::spawn(
      std::vector<std::string>{test::kBlipTrain, "--synthetic", "--synthetic-size", "400",
                               "--epochs", "1", "--hidden", "32", "--output-dir", dir.path()},
      test::without_launcher());
  REQUIRE(p.wait(std::chrono::minutes(2)).ok());
  CHECK_THAT(p.out(), Contains("Not using distributed mode"));
  CHECK(lines_of(dir.file("log.txt")).size() == 1);
}
