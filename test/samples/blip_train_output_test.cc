// Where blip_train writes and what it does when it cannot: --evaluate of a
// checkpoint, --resume into the checkpoint's own folder, and read-only or
// full output folders, which must stop the job loudly (exit 1, the file and
// the system's reason), before the first epoch where they can be seen then.
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "collie/test/samples/blip_job.h"
#include "collie/test/support/skip.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"
#include "collie/test/support/tmpfs.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

constexpr auto kJobLimit = std::chrono::minutes(3);

// The line rank 0 printed that starts with `prefix` (after "[rank0]: ").
std::string printed_line(const std::string& out, const std::string& prefix) {
  const std::string needle = "[rank0]: " + prefix;
  const size_t at = out.find(needle);
  INFO(out);
  REQUIRE(at != std::string::npos);
  const size_t end = out.find('\n', at);
  return out.substr(at + 9, end == std::string::npos ? std::string::npos : end - at - 9);
}

// Fills the file system at `dir` with a file of `bytes` bytes.
void write_filler(const std::string& dir, size_t bytes) {
  std::ofstream f(dir + "/filler", std::ios::binary);
  const std::string block(bytes, 'x');
  f << block;
  f.close();
  REQUIRE(f.good());
}

// Trains `epochs` short epochs on 2 ranks into `dir`; returns log.txt's lines.
std::vector<std::string> train_into(const std::string& dir, int epochs) {
  auto p = Subprocess::spawn(blip_job(
      2, quick({"--epochs", std::to_string(epochs), "--max-steps", "2", "--output-dir", dir})));
  auto st = p.wait(kJobLimit);
  INFO(p.out() << p.err());
  REQUIRE(st.ok());
  auto log = lines_of(dir + "/log.txt");
  REQUIRE(log.size() == static_cast<size_t>(epochs));
  return log;
}

// One process (no launcher): what the disk-full cases need, quickest.
Subprocess train_alone(const std::string& output_dir) {
  std::vector<std::string> argv{kBlipTrain};
  for (const auto& a : quick({"--epochs", "2", "--max-steps", "2", "--output-dir", output_dir}))
    argv.push_back(a);
  return Subprocess::spawn(argv, without_launcher());
}

}  // namespace

TEST_CASE(
    "blip_train --evaluate --resume of the last epoch's checkpoint gives the accuracy log.txt "
    "recorded, and writes nothing") {
  TempDir train, cwd;
  const auto log = train_into(train.path(), 2);

  // checkpoint_01 is the last epoch's; checkpoint_best is the same epoch
  // whenever the last epoch was the best (the README's example).
  for (const char* name : {"checkpoint_01.pth", "checkpoint_best.pth"}) {
    INFO(name);
    auto e = Subprocess::spawn(
        blip_job(2, quick({"--evaluate", "--resume", train.file(name), "--epochs", "2"})),
        {.cwd = cwd.path()});
    auto st = e.wait(kJobLimit);
    INFO(e.out() << e.err());
    REQUIRE(st.ok());
    const std::string got = printed_line(e.out(), "{\"epoch\": ");
    const int epoch = static_cast<int>(json_number(got, "epoch"));
    if (std::string(name) == "checkpoint_01.pth") CHECK(epoch == 1);
    REQUIRE(epoch >= 0);
    REQUIRE(epoch < 2);
    CHECK(json_field(got, "test_count") == "500");
    CHECK(json_field(got, "test_acc") == json_field(log[epoch], "test_acc"));
    CHECK(json_field(got, "test_loss") == json_field(log[epoch], "test_loss"));
    CHECK_THAT(e.out(), Contains("no files written"));
    CHECK(lines_of(train.file("log.txt")).size() == 2);  // not appended to
    CHECK_FALSE(fs::exists(cwd.file("output")));         // nor the default folder
  }
}

TEST_CASE(
    "blip_train --resume continues in the checkpoint's folder; at another global batch it is a "
    "new run, refused there and warned about elsewhere") {
  TempDir run, cwd, other;
  train_into(run.path(), 1);

  // 3 ranks now: the global batch grows from 2 x 50 to 3 x 50, a different
  // run, which must not overwrite the first one's files.
  auto refused = Subprocess::spawn(blip_job(3, quick({"--epochs", "2", "--max-steps", "2",
                                                      "--resume", run.file("checkpoint_00.pth")})),
                                   {.cwd = cwd.path()});
  INFO(refused.out() << refused.err());
  CHECK_FALSE(refused.wait(kJobLimit).ok());
  CHECK_THAT(refused.out() + refused.err(), Contains("world size 2 x batch 50") &&
                                                Contains("world size 3 x batch 50") &&
                                                Contains("another --output-dir"));
  CHECK(lines_of(run.file("log.txt")).size() == 1);

  // Elsewhere it goes on, with the warning.
  auto b = Subprocess::spawn(
      blip_job(3, quick({"--epochs", "2", "--max-steps", "2", "--resume",
                         run.file("checkpoint_00.pth"), "--output-dir", other.path()})),
      {.cwd = cwd.path()});
  auto st = b.wait(kJobLimit);
  INFO(b.out() << b.err());
  REQUIRE(st.ok());
  CHECK_THAT(b.out(), Contains("warning: resuming " + run.file("checkpoint_00.pth")) &&
                          Contains("world size 2 x batch 50 = 100") &&
                          Contains("world size 3 x batch 50 = 150"));
  CHECK(lines_of(other.file("log.txt")).size() == 1);

  // At the same global batch it continues in the checkpoint's folder.
  auto same = Subprocess::spawn(blip_job(2, quick({"--epochs", "2", "--max-steps", "2", "--resume",
                                                   run.file("checkpoint_00.pth")})),
                                {.cwd = cwd.path()});
  INFO(same.out() << same.err());
  REQUIRE(same.wait(kJobLimit).ok());
  const auto log = lines_of(run.file("log.txt"));
  REQUIRE(log.size() == 2);  // epoch 0, then the resumed epoch 1, in one log
  CHECK(json_number(log[1], "epoch") == 1);
  CHECK(json_number(log[1], "world_size") == 2);
  CHECK(fs::exists(run.file("checkpoint_01.pth")));
  CHECK_FALSE(fs::exists(cwd.file("output")));

  // Past the last epoch there is nothing to train: said, not a silent exit 0.
  auto c = Subprocess::spawn(
      blip_job(2, quick({"--epochs", "2", "--resume", run.file("checkpoint_01.pth")})));
  CHECK_FALSE(c.wait(kJobLimit).ok());
  CHECK_THAT(c.out() + c.err(), Contains("nothing to train"));
}

TEST_CASE("blip_train stops before the first epoch when its output folder is read-only") {
  // root writes through permissions, so for root the folder is a read-only
  // mount; for anyone else, mode 0555 is enough.
  TempDir dir;
  std::optional<Tmpfs> mount;
  std::string out = dir.file("ro");
  if (::geteuid() == 0) {
    mount.emplace(1 << 20, MS_RDONLY);
    out = mount->path();
  } else {
    fs::create_directory(out);
    REQUIRE(::chmod(out.c_str(), 0555) == 0);
  }

  auto p = Subprocess::spawn(blip_job(2, quick({"--epochs", "1", "--output-dir", out})));
  auto st = p.wait(kJobLimit);
  const std::string all = p.out() + p.err();
  INFO(all);
  CHECK(st.signal == 0);
  CHECK(st.exit_code == 1);
  CHECK_THAT(all, Contains(out + "/config.json") &&
                      (Contains("Read-only file system") || Contains("Permission denied")));
  // Every rank that gets to say something gives the reason, so the
  // launcher's root cause does too, whichever rank exits first.
  std::istringstream lines(all);
  for (std::string line; std::getline(lines, line);)
    if (line.find("blip_train: error:") != std::string::npos)
      CHECK_THAT(line, Contains("cannot write " + out + "/config.json"));
  CHECK_THAT(all, !Contains("Train Epoch"));  // found before the first epoch
}

TEST_CASE("blip_train fails loudly on a full disk: config.json first, then log.txt") {
  Tmpfs disk(4 * 4096);
  const std::string& out = disk.path();

  // Leaves `left` bytes free, trains, and expects the job to stop with exit
  // code 1, naming `file`, ENOSPC and its errno; returns the output.
  auto train_with_free = [&](uint64_t left, const std::string& file) {
    write_filler(out, static_cast<size_t>(disk.free_bytes() - left));
    REQUIRE(disk.free_bytes() == left);
    auto p = train_alone(out);
    auto st = p.wait(kJobLimit);
    const std::string all = p.out() + p.err();
    INFO(all);
    CHECK(st.exit_code == 1);
    CHECK_THAT(all, Contains(out + "/" + file) && Contains("No space left on device") &&
                        Contains("errno 28"));
    return all;
  };
  SECTION("a full disk: config.json cannot be written, before the first epoch") {
    const std::string all = train_with_free(0, "config.json");
    CHECK_THAT(all, !Contains("Train Epoch"));
    CHECK_FALSE(fs::exists(out + "/config.json"));  // never a 0-byte one
  }
  SECTION("one page left: config.json fits, the first log line does not") {
    const std::string all = train_with_free(4096, "log.txt");
    CHECK_THAT(all, !Contains("Train Epoch: [1]"));  // stopped at epoch 0's line
    CHECK(fs::file_size(out + "/config.json") > 0);
  }
}

// The README's main job writes output/blip_train; a second run pointed at
// the same folder (the README's 3-epoch example) must not append to its log
// or replace its checkpoints unless asked to.
TEST_CASE(
    "blip_train refuses a folder holding another run's files, unless it resumes it or "
    "--overwrite") {
  TempDir dir;
  train_into(dir.path(), 2);
  const auto before = lines_of(dir.path() + "/log.txt");
  // A new run into the same folder: refused on every rank, naming the
  // folder and the files, and nothing written.
  auto again = Subprocess::spawn(
      blip_job(2, quick({"--epochs", "1", "--max-steps", "2", "--output-dir", dir.path()})));
  const auto st = again.wait(kJobLimit);
  INFO(again.out() << again.err());
  CHECK_FALSE(st.ok());
  CHECK_THAT(again.out() + again.err(), Contains("holds another run's files") &&
                                            Contains(dir.path()) && Contains("checkpoint_01.pth") &&
                                            Contains("--overwrite"));
  CHECK(lines_of(dir.path() + "/log.txt") == before);
  // A resume of that run's checkpoint goes on in it.
  auto resumed = Subprocess::spawn(blip_job(
      2,
      quick({"--epochs", "3", "--max-steps", "2", "--resume", dir.path() + "/checkpoint_01.pth"})));
  INFO(resumed.out() << resumed.err());
  REQUIRE(resumed.wait(kJobLimit).ok());
  CHECK(lines_of(dir.path() + "/log.txt").size() == 3);
  // The same checkpoint at another world size is another run: refused in
  // the checkpoint's folder.
  auto other_world = Subprocess::spawn(blip_job(
      1,
      quick({"--epochs", "4", "--max-steps", "2", "--resume", dir.path() + "/checkpoint_02.pth"})));
  INFO(other_world.out() << other_world.err());
  CHECK_FALSE(other_world.wait(kJobLimit).ok());
  CHECK_THAT(other_world.out() + other_world.err(),
             Contains("a different run") && Contains("another --output-dir"));
  // --overwrite replaces it: a fresh log of one epoch, the old checkpoints gone.
  auto fresh = Subprocess::spawn(blip_job(
      2, quick({"--epochs", "1", "--max-steps", "2", "--output-dir", dir.path(), "--overwrite"})));
  INFO(fresh.out() << fresh.err());
  REQUIRE(fresh.wait(kJobLimit).ok());
  CHECK(lines_of(dir.path() + "/log.txt").size() == 1);
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/checkpoint_02.pth"));
}
