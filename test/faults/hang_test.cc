// A rank that stops responding (SIGSTOP) in the middle of an all_reduce
// loop: its sockets stay open, so nothing tells the others it is gone; they
// must time out at the call's own short deadline with a message naming the
// collective, its sequence number and the silent rank, and a later call
// must be refused at once. The stopped rank is continued and killed after.
//
// In a ring only the stopped rank's right neighbour waits on it directly;
// every other survivor waits on a live neighbour. What names the stopped
// rank on every survivor is the timeout probe (collectives/
// transport_failure.cc): the first rank whose deadline passes asks every
// peer whether it is still running, every live rank answers and asks in
// turn, and the rank that never answers is the one each survivor names. So
// the test requires, of EVERY survivor, the exact verdict "ranks <all the
// survivors> answered a timeout probe, rank <stopped> (<address>) did not".
#include <signal.h>
#include <catch2/catch.hpp>

#include "collie/base/str_cat.h"
#include "collie/test/faults/fault_harness.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

void stop_one_rank_mid_all_reduce(int world, int stopped) {
  constexpr int kCallTimeoutMs = 2000;
  // The probe's grace is half the call's limit (at most 1 s).
  constexpr int kGraceMs = kCallTimeoutMs / 2;
  TempDir dir;
  auto procs = spawn_loop_ranks(world, dir.file("rdzv"), "all_reduce", kCallTimeoutMs);
  std::vector<int> all;
  for (int r = 0; r < world; ++r) all.push_back(r);
  wait_all_output(procs, all, "looping", std::chrono::seconds(60));
  const int64_t fault_ns = monotonic_ns();
  procs[stopped].kill(SIGSTOP);

  std::string survivors;
  for (int r = 0; r < world; ++r) {
    if (r == stopped) continue;
    survivors += str_cat(survivors.empty() ? "" : ",", r);
  }
  const std::string verdict =
      str_cat("ranks ", survivors, " answered a timeout probe, rank ", stopped, " (127.0.0.1:");
  for (int rank = 0; rank < world; ++rank) {
    if (rank == stopped) continue;
    auto st = procs[rank].wait(std::chrono::seconds(30));
    std::string out = procs[rank].out();
    INFO("rank " << rank << " " << st.describe() << "\n" << out << procs[rank].err());
    CHECK(st.exit_code == 3);
    double ms = detection_ms(out, fault_ns);
    // At least the call's timeout, then the probe's grace, and not much
    // more (a generous bound for a loaded machine).
    CHECK(ms < kCallTimeoutMs + kGraceMs + 8000);
    CHECK_THAT(out, Contains("type=TimeoutError"));
    CHECK_THAT(out, Contains("all_reduce(float32, 262144, sum, "));
    // Every survivor names the stopped rank as the one that did not answer,
    // and every other survivor as one that did.
    CHECK_THAT(out, Contains(verdict));
    CHECK_THAT(out, Contains("did not within 1.00s: it is stopped, hung or unreachable"));
    auto later = find_int(out, "later_ms");
    REQUIRE(later.has_value());
    CHECK(*later < 1000);
    size_t t = out.find("type=");
    record(
        str_cat("SIGSTOP rank ", stopped, " of ", world, " during all_reduce (call timeout 2 s)"),
        str_cat("rank ", rank, " failed after ", static_cast<int64_t>(ms),
                " ms: ", out.substr(t, out.find('\n', t) - t)));
  }
  procs[stopped].kill(SIGCONT);
  procs[stopped].kill(SIGKILL);
  procs[stopped].wait(std::chrono::seconds(10));
}

}  // namespace

TEST_CASE("a rank stopped by SIGSTOP mid-all_reduce: every other rank names it", "[faults][hang]") {
  stop_one_rank_mid_all_reduce(3, 2);
}

TEST_CASE("4 ranks, one in the middle of the ring stopped: every other rank names it",
          "[faults][hang]") {
  // Rank 1: ranks 2 and 3 wait on it only through a live neighbour.
  stop_one_rank_mid_all_reduce(4, 1);
}

TEST_CASE("8 ranks, one stopped: every other rank names it", "[faults][hang]") {
  stop_one_rank_mid_all_reduce(8, 5);
}
