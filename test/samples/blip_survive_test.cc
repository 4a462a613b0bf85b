// blip_train --survive-failures: real ranks (one process each, file://
// rendezvous, so that the store outlives any of them), a real SIGKILL in the
// middle of an epoch, and the survivors must finish the job: shrink, move
// DDP, agree on the furthest state, reshard the epoch. Checked: the job's
// accuracy on Fashion-MNIST, bit-identical survivors (a checksum of model and
// optimizer state printed by each), and every epoch's samples counted by
// dataset index (the dead rank's share included) - every sample exactly
// once, but for torch's padding in epochs that ran in one world.
// With collie-run --on-failure replace, a replacement joins the survivors
// and the job ends with the world it started with.
#include <signal.h>
#include <catch2/catch.hpp>

#include <map>
#include <regex>

#include "collie/base/str_cat.h"
#include "collie/nn/state_dict.h"
#include "collie/test/samples/blip_job.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

// `world` blip_train ranks, each started directly (RANK, WORLD_SIZE), with
// a file:// store in `dir`.
std::vector<Subprocess> spawn_ranks(int world, const TempDir& dir,
                                    const std::vector<std::string>& args, bool survive = true) {
  std::vector<Subprocess> procs;
  for (int rank = 0; rank < world; ++rank) {
    SpawnOptions o = without_launcher();
    o.env["RANK"] = std::to_string(rank);
    o.env["LOCAL_RANK"] = std::to_string(rank);
    o.env["WORLD_SIZE"] = std::to_string(world);
    std::vector<std::string> argv{kBlipTrain, "--dist-url", "file://" + dir.file("rdzv"),
                                  "--timeout", "120"};
    if (survive) argv.push_back("--survive-failures");
    argv.insert(argv.end(), args.begin(), args.end());
    procs.push_back(Subprocess::spawn(argv, o));
  }
  return procs;
}

struct EpochSamples {
  int64_t trained = -1, distinct = -1, of = -1, missing = -1, repeated = -1, world = -1;
};

// Every "epoch E samples: ..." line in `out`; a later line for the same
// epoch (the end of an epoch redone after a failure) replaces an earlier.
std::map<int, EpochSamples> epoch_samples(const std::string& out) {
  static const std::regex re(
      "epoch (\\d+) samples: trained (\\d+) distinct (\\d+) of (\\d+) \\(missing (\\d+), "
      "repeated (\\d+)\\) world (\\d+)");
  std::map<int, EpochSamples> by_epoch;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it) {
    const auto& m = *it;
    by_epoch[std::stoi(m[1])] = {std::stoll(m[2]), std::stoll(m[3]), std::stoll(m[4]),
                                 std::stoll(m[5]), std::stoll(m[6]), std::stoll(m[7])};
  }
  return by_epoch;
}

std::string checksum_of(const std::string& out) {
  static const std::regex re("final state checksum ([0-9a-f]{16}) rank (\\d+) of (\\d+)");
  std::smatch m;
  return std::regex_search(out, m, re) ? m[1].str() + " of " + m[3].str() : std::string();
}

// The worst "N ms from the error to ..." a survivor printed.
int64_t recovery_ms(const std::string& out) {
  static const std::regex re("recovered: .*; (\\d+) ms from the error to the");
  std::smatch m;
  return std::regex_search(out, m, re) ? std::stoll(m[1]) : -1;
}

}  // namespace

TEST_CASE(
    "blip_train --survive-failures: 4 ranks, one SIGKILLed in epoch 2, the 3 survivors finish "
    "10 epochs of Fashion-MNIST at the main job's accuracy, identical, every sample once",
    "[survive]") {
  TempDir dir;
  auto procs = spawn_ranks(4, dir,
                           {"--epochs", "10", "--batch-size", "64", "--print-freq", "25",
                            "--output-dir", dir.file("out")});
  // Mid-epoch 2: 60000 / (4 * 64) = 235 steps per epoch in the first world.
  procs[0].wait_for_output("Train Epoch: [2]  [100/235]", std::chrono::minutes(4));
  procs[1].kill(SIGKILL);
  procs[1].wait(std::chrono::seconds(30));
  int64_t worst_ms = 0;
  std::string checksum;
  for (int rank : {0, 2, 3}) {
    auto st = procs[rank].wait(std::chrono::minutes(5));
    const std::string out = procs[rank].out();
    INFO("rank " << rank << " " << st.describe() << "\n" << out << procs[rank].err());
    REQUIRE(st.ok());
    CHECK_THAT(out, Contains("lost rank(s) 1"));
    const int64_t ms = recovery_ms(out);
    CHECK(ms >= 0);
    CHECK(ms < 15000);  // no timeout waited (generous for a loaded 2-core machine)
    worst_ms = std::max(worst_ms, ms);
    const std::string sum = checksum_of(out);
    CHECK(sum.size() == 16 + 5);  // "<16 hex> of 3"
    CHECK_THAT(sum, Contains(" of 3"));
    if (checksum.empty()) checksum = sum;
    CHECK(sum == checksum);  // bit-identical replicas
  }
  WARN("survive: SIGKILL of rank 1 of 4 in epoch 2: " << worst_ms
                                                      << " ms from the error to the next step");
  // The main process (rank 0 survives) counted every epoch's samples.
  const auto samples = epoch_samples(procs[0].out());
  REQUIRE(samples.size() == 10);
  for (const auto& [epoch, s] : samples) {
    INFO("epoch " << epoch);
    CHECK(s.of == 60000);
    CHECK(s.trained == 60000);  // 60000 divides by 4 and by 3: no padding
    CHECK(s.distinct == 60000);
    CHECK(s.missing == 0);
    CHECK(s.repeated == 0);
    CHECK(s.world == (epoch < 2 ? 4 : 3));
  }
  const auto log = lines_of(dir.file("out/log.txt"));
  REQUIRE(log.size() == 10);
  CHECK(json_number(log[1], "world_size") == 4);
  CHECK(json_number(log[2], "world_size") == 3);
  CHECK(json_number(log[9], "epoch") == 9);
  CHECK(json_number(log[9], "test_count") == 10000);
  WARN("survive: final test accuracy " << json_field(log[9], "test_acc"));
  CHECK(json_number(log[9], "test_acc") >= 0.885);  // the main job's goal
}

TEST_CASE(
    "blip_train --survive-failures: the main process SIGKILLed, uneven shards: the next rank "
    "takes over the log and the failed epoch uses every sample once",
    "[survive]") {
  // 2001 samples: world 4 pads 3 (torch's sampler), world 3 pads none; the
  // epoch of the failure drops the old padding and re-deals the rest. Rank
  // 0 SIGKILLs itself before step 24 of epoch 1 (of 63, 32 samples each):
  // the 1233 samples left are the failed step's 32, 50 steps of 24 and a
  // last step of 1, where two of the three survivors have empty shares.
  TempDir dir;
  auto procs = spawn_ranks(4, dir,
                           {"--synthetic", "--synthetic-size", "2001", "--hidden", "32",
                            "--batch-size", "8", "--print-freq", "1", "--epochs", "4",
                            "--kill-self-at", "0:1:24", "--output-dir", dir.file("out")});
  CHECK(procs[0].wait(std::chrono::minutes(2)).signal == SIGKILL);
  std::string all = procs[0].out();
  std::string checksum;
  for (int rank : {1, 2, 3}) {
    auto st = procs[rank].wait(std::chrono::minutes(2));
    const std::string out = procs[rank].out();
    INFO("rank " << rank << " " << st.describe() << "\n" << out << procs[rank].err());
    REQUIRE(st.ok());
    CHECK_THAT(out, Contains("lost rank(s) 0"));
    CHECK(recovery_ms(out) >= 0);
    const std::string sum = checksum_of(out);
    CHECK_THAT(sum, Contains(" of 3"));
    if (checksum.empty()) checksum = sum;
    CHECK(sum == checksum);
    all += out;
  }
  const auto samples = epoch_samples(all);
  INFO(all);
  // Rank 0 died before step 24 of epoch 1: the others failed in that step,
  // which nobody completed, so it is redone.
  const bool failed_in_a_step = all.find("of 4: epoch 1 step 24 of 63 failed") != std::string::npos;
  CHECK(failed_in_a_step);
  CHECK_THAT(all, Contains("at epoch 1 sample 768,"));
  REQUIRE(samples.size() == 4);
  for (const auto& [epoch, s] : samples) {
    INFO("epoch " << epoch);
    CHECK(s.of == 2001);
    CHECK(s.distinct == 2001);
    CHECK(s.missing == 0);
    if (epoch == 0) CHECK(s.repeated == 3);  // torch's padding for 4 ranks
    if (epoch == 1) CHECK(s.repeated == (failed_in_a_step ? 0 : 3));
    if (epoch >= 2) CHECK(s.repeated == 0);
    CHECK(s.world == (epoch == 0 ? 4 : 3));
  }
  // The old rank 1 is the main process now: log.txt goes on.
  const auto log = lines_of(dir.file("out/log.txt"));
  REQUIRE(log.size() == 4);
  for (int e = 0; e < 4; ++e) CHECK(json_number(log[e], "epoch") == e);
  CHECK(json_number(log.back(), "world_size") == 3);
}

TEST_CASE(
    "blip_train --survive-failures without a failure trains bit-identically to the plain loop "
    "(the epoch plans batch like torch's sampler and DataLoader)",
    "[survive]") {
  const std::vector<std::string> args = {"--synthetic", "--synthetic-size", "1001", "--hidden",
                                         "32",          "--batch-size",     "16",   "--epochs",
                                         "2",           "--print-freq",     "1000"};
  TempDir plain, surviving;
  auto with_dir = [&](const TempDir& d) {
    auto a = args;
    a.insert(a.end(), {"--output-dir", d.file("out")});
    return a;
  };
  auto p = spawn_ranks(3, plain, with_dir(plain), /*survive=*/false);
  auto q = spawn_ranks(3, surviving, with_dir(surviving));
  for (auto* procs : {&p, &q})
    for (auto& proc : *procs) {
      auto st = proc.wait(std::chrono::minutes(2));
      INFO(st.describe() << "\n" << proc.out() << proc.err());
      REQUIRE(st.ok());
    }
  // 1001 samples over 3 ranks: torch pads 1, and so does the plan.
  const auto samples = epoch_samples(q[0].out());
  REQUIRE(samples.size() == 2);
  for (const auto& [epoch, s] : samples) CHECK(s.repeated == 1);
  const auto a = nn::load_state_dict(plain.file("out/checkpoint_01.pth"));
  const auto b = nn::load_state_dict(surviving.file("out/checkpoint_01.pth"));
  REQUIRE(a.entries().size() == b.entries().size());
  size_t compared = 0;
  for (size_t i = 0; i < a.entries().size(); ++i) {  // the model's and optimizer's tensors
    const auto& [key, entry] = a.entries()[i];
    INFO(key);
    CHECK(b.entries()[i].first == key);
    CHECK(b.entries()[i].second.bytes == entry.bytes);  // bit for bit
    ++compared;
  }
  CHECK(compared > 4);
}

TEST_CASE(
    "blip_train --survive-failures: a rank dies at an epoch's end, the survivors redo the end, "
    "counting the dead rank's share of every step",
    "[survive]") {
  // Rank 2 SIGKILLs itself once its epoch-1 steps are done: the others fail
  // in the end's statistics; every step completed, so nothing is retrained,
  // and epoch 1 counts the dead rank's whole share (with world 4's padding).
  TempDir dir;
  auto procs = spawn_ranks(4, dir,
                           {"--synthetic", "--synthetic-size", "2001", "--hidden", "32",
                            "--batch-size", "8", "--print-freq", "1000", "--epochs", "3",
                            "--kill-self-at", "2:1:end", "--output-dir", dir.file("out")});
  auto victim = procs[2].wait(std::chrono::minutes(2));
  CHECK(victim.signal == SIGKILL);
  std::string checksum, all;
  for (int rank : {0, 1, 3}) {
    auto st = procs[rank].wait(std::chrono::minutes(2));
    const std::string out = procs[rank].out();
    INFO("rank " << rank << " " << st.describe() << "\n" << out << procs[rank].err());
    REQUIRE(st.ok());
    CHECK_THAT(out, Contains("of 4: epoch 1 end failed"));
    CHECK_THAT(out, Contains("lost rank(s) 2"));
    CHECK_THAT(out, Contains("ms from the error to the end of the epoch"));
    const std::string sum = checksum_of(out);
    CHECK_THAT(sum, Contains(" of 3"));
    if (checksum.empty()) checksum = sum;
    CHECK(sum == checksum);
    all += out;
  }
  const auto samples = epoch_samples(procs[0].out());
  INFO(all);
  REQUIRE(samples.size() == 3);
  for (const auto& [epoch, s] : samples) {
    INFO("epoch " << epoch);
    CHECK(s.distinct == 2001);
    CHECK(s.missing == 0);
    CHECK(s.repeated == (epoch < 2 ? 3 : 0));  // world 4's padding in epochs 0 and 1
    CHECK(s.world == (epoch == 0 ? 4 : 3));
  }
  const auto log = lines_of(dir.file("out/log.txt"));
  REQUIRE(log.size() == 3);
  CHECK(json_number(log[1], "epoch") == 1);
  CHECK(json_number(log[1], "world_size") == 3);
}

TEST_CASE(
    "blip_train --survive-failures: a second rank dies while the survivors recover: they shrink "
    "again and the epoch still uses every sample once",
    "[survive]") {
  // Rank 0 is SIGKILLed in epoch 1; rank 3 SIGKILLs itself in the
  // recovery, right after the first shrink, so ranks 1 and 2 fail in the
  // agreement and recover again, as a group of 2.
  TempDir dir;
  auto procs = spawn_ranks(4, dir,
                           {"--synthetic", "--synthetic-size", "2001", "--hidden", "32",
                            "--batch-size", "8", "--print-freq", "1", "--epochs", "4",
                            "--kill-self-at", "3:1:recover", "--output-dir", dir.file("out")});
  procs[0].wait_for_output("Train Epoch: [1]  [20/63]", std::chrono::minutes(2));
  procs[0].kill(SIGKILL);
  procs[0].wait(std::chrono::seconds(30));
  CHECK(procs[3].wait(std::chrono::minutes(2)).signal == SIGKILL);
  std::string all = procs[0].out() + procs[3].out(), checksum;
  for (int rank : {1, 2}) {
    auto st = procs[rank].wait(std::chrono::minutes(2));
    const std::string out = procs[rank].out();
    INFO("rank " << rank << " " << st.describe() << "\n" << out << procs[rank].err());
    REQUIRE(st.ok());
    CHECK_THAT(out, Contains("the recovery failed too"));
    CHECK_THAT(out, Contains("world 3 -> 2 (lost rank(s) 2)"));
    const std::string sum = checksum_of(out);
    CHECK_THAT(sum, Contains(" of 2"));
    if (checksum.empty()) checksum = sum;
    CHECK(sum == checksum);
    all += out;
  }
  const auto samples = epoch_samples(all);
  INFO(all);
  REQUIRE(samples.size() == 4);
  for (const auto& [epoch, s] : samples) {
    INFO("epoch " << epoch);
    CHECK(s.distinct == 2001);
    CHECK(s.missing == 0);
    // World 4 pads 3, the epoch of the failures none, world 2 pads 1.
    CHECK(s.repeated == (epoch == 0 ? 3 : epoch == 1 ? 0 : 1));
    CHECK(s.world == (epoch == 0 ? 4 : 2));
  }
}

TEST_CASE(
    "blip_train --survive-failures under collie-run --on-failure replace: a rank SIGKILLed in "
    "epoch 2, its replacement joins, 4 ranks finish 10 epochs of Fashion-MNIST, identical, every "
    "sample once",
    "[survive][replace]") {
  // The real user path: collie-run starts the replacement in the dead
  // worker's slot (COLLIE_REPLACEMENT=1), blip_train's init_process_group
  // joins the running group, and the members admit it at their next step
  // boundary: it gets rank 0's state and the epoch's position and everyone
  // trains the rest of the epoch in the world of 4. 60000 divides by 3 and
  // by 4: no epoch has padding, so every count is exact.
  TempDir dir;
  std::vector<std::string> argv{kCollieRun,         "--standalone",
                                "--nproc-per-node", "4",
                                "--on-failure",     "replace",
                                "--max-restarts",   "1",
                                kBlipTrain,         "--survive-failures",
                                "--timeout",        "120",
                                "--epochs",         "10",
                                "--batch-size",     "64",
                                "--print-freq",     "100",
                                "--kill-self-at",   "1:2:100",
                                "--output-dir",     dir.file("out")};
  auto job = Subprocess::spawn(argv, without_launcher());
  auto st = job.wait(std::chrono::minutes(5));
  const std::string out = job.out(), err = job.err();
  INFO(st.describe() << "\n" << out << err);
  REQUIRE(st.ok());
  CHECK_THAT(err, Contains("replacement started: rank 1"));
  // The survivors shrank, then admitted the replacement, which joined as
  // rank 3 of 4 in epoch 2 (or, on a slow machine, later).
  for (int launched : {0, 2, 3}) {
    CHECK_THAT(out,
               Contains(str_cat("[rank", launched, "]: shrunk: world 4 -> 3 (lost rank(s) 1)")));
    CHECK_THAT(out, Contains(str_cat("[rank", launched, "]: admitted: world 3 -> 4 at epoch ")));
  }
  CHECK_THAT(out, Contains("[rank1]: joined: world 3 -> 4 as rank 3 at epoch "));
  // Every rank (the replacement included) ends bit-identical, in a world of 4.
  static const std::regex sum_re(
      "\\[rank(\\d+)\\]: final state checksum ([0-9a-f]{16}) rank (\\d+) of (\\d+)");
  std::map<int, std::string> sums;  // by rank at the end
  for (auto it = std::sregex_iterator(out.begin(), out.end(), sum_re); it != std::sregex_iterator();
       ++it) {
    CHECK((*it)[4] == "4");
    sums[std::stoi((*it)[3])] = (*it)[2];
  }
  REQUIRE(sums.size() == 4);
  for (const auto& [rank, sum] : sums) CHECK(sum == sums.at(0));
  CHECK(recovery_ms(out) >= 0);
  // Rank 0 (never lost) counted every epoch's samples: each once.
  const auto samples = epoch_samples(out);
  REQUIRE(samples.size() == 10);
  for (const auto& [epoch, s] : samples) {
    INFO("epoch " << epoch);
    CHECK(s.of == 60000);
    CHECK(s.trained == 60000);
    CHECK(s.distinct == 60000);
    CHECK(s.missing == 0);
    CHECK(s.repeated == 0);
    if (epoch < 2) CHECK(s.world == 4);
  }
  CHECK(samples.at(9).world == 4);
  const auto log = lines_of(dir.file("out/log.txt"));
  REQUIRE(log.size() == 10);
  CHECK(json_number(log[9], "world_size") == 4);
  CHECK(json_number(log[9], "test_count") == 10000);
  WARN("survive with a replacement: final test accuracy " << json_field(log[9], "test_acc"));
  CHECK(json_number(log[9], "test_acc") >= 0.885);
}

TEST_CASE(
    "blip_train --survive-failures --join over file://: a replacement started by hand joins the 3 "
    "survivors and the 4 ranks end identical, every sample once",
    "[survive][replace]") {
  // The launcher's part done by the test: once rank 1 has SIGKILLed itself
  // (epoch 2, before step 20 of 75), a process with its RANK and --join
  // takes its place (40 short epochs: it joins long before the end). 2400
  // samples divide by 3 and by 4: no padding.
  TempDir dir;
  const std::vector<std::string> args = {
      "--synthetic", "--synthetic-size", "2400",         "--hidden", "32", "--batch-size",
      "8",           "--print-freq",     "1000",         "--epochs", "40", "--kill-self-at",
      "1:2:20",      "--output-dir",     dir.file("out")};
  auto procs = spawn_ranks(4, dir, args);
  CHECK(procs[1].wait(std::chrono::minutes(2)).signal == SIGKILL);
  SpawnOptions o = without_launcher();
  o.env["RANK"] = "1";
  o.env["LOCAL_RANK"] = "1";
  o.env["WORLD_SIZE"] = "4";
  std::vector<std::string> argv{kBlipTrain,  "--dist-url", "file://" + dir.file("rdzv"),
                                "--timeout", "120",        "--survive-failures",
                                "--join"};
  argv.insert(argv.end(), args.begin(), args.end());
  procs[1] = Subprocess::spawn(argv, o);
  std::map<int, std::string> sums;
  std::string all;
  for (int launched : {0, 1, 2, 3}) {
    auto st = procs[launched].wait(std::chrono::minutes(2));
    const std::string out = procs[launched].out();
    INFO("rank " << launched << " " << st.describe() << "\n" << out << procs[launched].err());
    REQUIRE(st.ok());
    CHECK_THAT(out, Contains(launched == 1 ? "joined: world 3 -> 4 as rank 3 at epoch "
                                           : "admitted: world 3 -> 4 at epoch "));
    std::smatch m;
    static const std::regex re("final state checksum ([0-9a-f]{16}) rank (\\d+) of 4");
    REQUIRE(std::regex_search(out, m, re));
    sums[std::stoi(m[2])] = m[1];
    all += out;
  }
  REQUIRE(sums.size() == 4);
  for (const auto& [rank, sum] : sums) CHECK(sum == sums.at(0));
  const auto samples = epoch_samples(procs[0].out());
  INFO(all);
  REQUIRE(samples.size() == 40);
  for (const auto& [epoch, s] : samples) {
    INFO("epoch " << epoch);
    CHECK(s.trained == 2400);
    CHECK(s.distinct == 2400);
    CHECK(s.repeated == 0);
  }
  CHECK(samples.at(39).world == 4);
}
