// Failures as data at their origin: a rank whose communicator breaks writes
// its first failure to TORCHELASTIC_ERROR_FILE (base/error_record.h), with
// the cause as a kind and the culprit as a rank and an address, read here as
// collie-run reads it. A rank SIGKILLed, a rank SIGSTOPped, and mismatched
// calls, over real processes.
#include <signal.h>
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include "collie/base/error_record.h"
#include "collie/base/str_cat.h"
#include "collie/test/faults/fault_harness.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

// The children of `child` (args(rank)), each with an error file of its own
// in `dir` and the launch's RANK and WORLD_SIZE, as collie-run gives them.
std::vector<Subprocess> spawn_recording_ranks(
    int world, const TempDir& dir, const std::string& child,
    const std::function<std::vector<std::string>(int rank)>& args) {
  std::vector<Subprocess> procs;
  for (int rank = 0; rank < world; ++rank) {
    procs.push_back(Subprocess::spawn(
        child_argv(child, args(rank)),
        {.env = clean_env({{"TORCHELASTIC_ERROR_FILE", dir.file(str_cat("rank_", rank, ".json"))},
                           {"RANK", std::to_string(rank)},
                           {"WORLD_SIZE", std::to_string(world)}})}));
  }
  return procs;
}

std::vector<std::string> loop_args(const TempDir& dir, int rank, int world, int call_timeout_ms) {
  return {"file:" + dir.file("rdzv"),
          "all_reduce",
          std::to_string(rank),
          std::to_string(world),
          "-",
          std::to_string(call_timeout_ms),
          "60"};
}

// The fields every record of a broken default group has.
void check_common(const ErrorRecord& r, int rank, int world) {
  CHECK(r.global_rank == rank);
  CHECK(r.group_rank == rank);
  CHECK(r.group_size == world);
  CHECK(r.group == "socket/0");
  CHECK(r.seq >= 0);
  CHECK_FALSE(r.call.empty());
  CHECK(r.pid > 0);
  CHECK_FALSE(r.message.empty());
  for (const FailureCulprit& c : r.culprits) {
    CHECK(c.global_rank == c.rank);  // the default group spans the job
    CHECK_THAT(c.address, Contains("127.0.0.1:"));
  }
}

}  // namespace

TEST_CASE("error records: a SIGKILLed rank is named by the survivors as peer_closed",
          "[faults][error_record]") {
  constexpr int kWorld = 3, kVictim = 1;
  TempDir dir;
  auto procs = spawn_recording_ranks(kWorld, dir, "loop_rank",
                                     [&](int rank) { return loop_args(dir, rank, kWorld, 0); });
  wait_all_output(procs, {0, 1, 2}, "looping", std::chrono::seconds(60));
  procs[kVictim].kill(SIGKILL);
  int closed = 0;
  for (int rank = 0; rank < kWorld; ++rank) {
    if (rank == kVictim) continue;
    auto st = procs[rank].wait(std::chrono::seconds(30));
    INFO("rank " << rank << " " << st.describe() << "\n" << procs[rank].out());
    CHECK(st.exit_code == 3);
    const auto r = read_error_record(dir.file(str_cat("rank_", rank, ".json")));
    REQUIRE(r);
    INFO(error_record_json(*r));
    check_common(*r, rank, kWorld);
    CHECK_THAT(r->call, Contains("all_reduce("));
    // Its own neighbour's EOF, or the other survivor's notice relaying it.
    CHECK((r->cause == FailureCause::kPeerClosed || r->cause == FailureCause::kPeerFailed));
    if (r->cause == FailureCause::kPeerClosed) {
      ++closed;
      CHECK(r->culprit_ranks() == std::vector<int>{kVictim});
    } else {
      CHECK(r->culprits.empty());  // the relaying peer is alive: no culprit
    }
    // The first failure, not the later call the broken group refused.
    CHECK_THAT(procs[rank].out(), Contains("later_ms="));
    CHECK_THAT(r->message, !Contains("broken"));
  }
  CHECK(closed >= 1);
  CHECK_FALSE(read_error_record(dir.file(str_cat("rank_", kVictim, ".json"))));
}

TEST_CASE("error records: a SIGSTOPped rank is named by every survivor as timeout_unresponsive",
          "[faults][error_record][hang]") {
  constexpr int kWorld = 3, kStopped = 1;
  TempDir dir;
  auto procs = spawn_recording_ranks(kWorld, dir, "loop_rank",
                                     [&](int rank) { return loop_args(dir, rank, kWorld, 2000); });
  wait_all_output(procs, {0, 1, 2}, "looping", std::chrono::seconds(60));
  procs[kStopped].kill(SIGSTOP);
  for (int rank = 0; rank < kWorld; ++rank) {
    if (rank == kStopped) continue;
    auto st = procs[rank].wait(std::chrono::seconds(30));
    INFO("rank " << rank << " " << st.describe() << "\n" << procs[rank].out());
    CHECK(st.exit_code == 3);
    const auto r = read_error_record(dir.file(str_cat("rank_", rank, ".json")));
    REQUIRE(r);
    INFO(error_record_json(*r));
    check_common(*r, rank, kWorld);
    CHECK(r->error_type == "TimeoutError");
    CHECK(r->cause == FailureCause::kTimeoutUnresponsive);
    CHECK(r->culprit_ranks() == std::vector<int>{kStopped});
  }
  procs[kStopped].kill(SIGCONT);
  procs[kStopped].kill(SIGKILL);
  procs[kStopped].wait(std::chrono::seconds(10));
}

TEST_CASE("error records: mismatched calls are named as a mismatch with the peer",
          "[faults][error_record][mismatch]") {
  TempDir dir;
  auto procs = spawn_recording_ranks(2, dir, "mismatch_rank", [&](int rank) {
    return std::vector<std::string>{dir.file("rdzv"), std::to_string(rank), "collective"};
  });
  int mismatches = 0;
  for (int rank = 0; rank < 2; ++rank) {
    auto st = procs[rank].wait(std::chrono::seconds(60));
    INFO("rank " << rank << " " << st.describe() << "\n" << procs[rank].out());
    CHECK(st.ok());
    const auto r = read_error_record(dir.file(str_cat("rank_", rank, ".json")));
    REQUIRE(r);
    INFO(error_record_json(*r));
    check_common(*r, rank, 2);
    CHECK((r->cause == FailureCause::kMismatch || r->cause == FailureCause::kPeerFailed));
    if (r->cause == FailureCause::kMismatch) {
      ++mismatches;
      CHECK(r->error_type == "BackendError");
      CHECK(r->culprit_ranks() == std::vector<int>{1 - rank});
      CHECK_THAT(r->message, Contains("mismatch"));
    }
  }
  CHECK(mismatches >= 1);
}
