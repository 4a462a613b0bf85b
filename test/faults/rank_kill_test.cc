// A rank SIGKILLed in the middle of all_reduce, broadcast, barrier and DDP's
// backward: every surviving rank must get an error naming the dead rank
// within seconds (the socket's EOF/reset, not the 60 s group timeout), a
// later call must be refused at once, and under collie-run the launcher must
// stop the job, print its summary and exit non-zero with no process left.
#include <signal.h>
#include <catch2/catch.hpp>

#include <string>

#include "collie/base/str_cat.h"
#include "collie/test/faults/fault_harness.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

constexpr int kWorld = 3;
constexpr int kVictim = 1;
// Generous: the point is "seconds, not the 60 s group timeout".
constexpr double kDetectBoundMs = 10000;

void kill_during(const std::string& op) {
  TempDir dir;
  auto procs = spawn_loop_ranks(kWorld, dir.file("rdzv"), op);
  wait_all_output(procs, {0, 1, 2}, "looping", std::chrono::seconds(60));
  const int64_t fault_ns = monotonic_ns();
  procs[kVictim].kill(SIGKILL);
  double worst = 0;
  for (int rank = 0; rank < kWorld; ++rank) {
    if (rank == kVictim) continue;
    auto st = procs[rank].wait(std::chrono::seconds(30));
    std::string out = procs[rank].out();
    INFO("rank " << rank << " " << st.describe() << "\n" << out << procs[rank].err());
    CHECK(st.exit_code == 3);
    double ms = detection_ms(out, fault_ns);
    worst = std::max(worst, ms);
    CHECK(ms < kDetectBoundMs);
    // The survivor's message names the dead rank. A survivor that is not
    // the dead rank's neighbour may hear of it from the other survivor
    // (a BackendError relaying the abort), which still names rank 1.
    CHECK_THAT(out, Contains("type=NetworkError") || Contains("type=BackendError"));
    CHECK_THAT(out, Contains(str_cat("rank ", kVictim)));
    auto later = find_int(out, "later_ms");
    REQUIRE(later.has_value());
    CHECK(*later < 1000);
    record(str_cat("SIGKILL rank 1 of 3 during ", op),
           str_cat("rank ", rank, " detected after ", static_cast<int64_t>(ms), " ms: ",
                   out.substr(out.find("type="),
                              out.find('\n', out.find("type=")) - out.find("type="))));
  }
  record(str_cat("SIGKILL during ", op),
         str_cat("worst detection ", static_cast<int64_t>(worst), " ms"));
}

}  // namespace

TEST_CASE("a rank SIGKILLed during all_reduce is named by every survivor within seconds",
          "[faults][kill]") {
  kill_during("all_reduce");
}

TEST_CASE("a rank SIGKILLed during broadcast is named by every survivor within seconds",
          "[faults][kill]") {
  kill_during("broadcast");
}

TEST_CASE("a rank SIGKILLed during barrier is named by every survivor within seconds",
          "[faults][kill]") {
  kill_during("barrier");
}

TEST_CASE("a rank SIGKILLed during DDP backward is named by every survivor within seconds",
          "[faults][kill]") {
  kill_during("ddp");
}

TEST_CASE("under collie-run, a rank SIGKILLed mid-all_reduce stops the job with a summary",
          "[faults][kill][launcher]") {
  TempDir pids;
  auto launcher =
      Subprocess::spawn(collie_run_argv({"--standalone", "--nproc-per-node", "3"}, "loop_rank",
                                        {"env", "all_reduce", "-1", "-1", pids.path(), "0", "60"}),
                        {.env = clean_env(), .new_process_group = true});
  auto workers = wait_for_pid_files(pids.path(), kWorld, std::chrono::seconds(60));
  // Every rank prints "looping" (rank-prefixed by collie-run) once under way.
  for (int rank = 0; rank < kWorld; ++rank)
    launcher.wait_for_output(str_cat("[rank", rank, "]: looping rank ", rank),
                             std::chrono::seconds(60));
  const int64_t fault_ns = monotonic_ns();
  REQUIRE(::kill(workers[kVictim], SIGKILL) == 0);
  auto st = launcher.wait(std::chrono::seconds(30));
  const double ms = static_cast<double>(monotonic_ns() - fault_ns) / 1e6;
  std::string err = launcher.err();
  INFO(st.describe() << "\n" << err << launcher.out());
  CHECK(st.exit_code != 0);
  CHECK(st.signal == 0);
  CHECK_THAT(err, Contains("root cause: rank 1"));
  CHECK_THAT(err, Contains("signal 9 (SIGKILL)"));
  CHECK(wait_until_dead(workers, std::chrono::seconds(10)).empty());
  CHECK(ms < kDetectBoundMs);
  record("collie-run: SIGKILL rank 1 of 3 during all_reduce",
         str_cat("launcher exited ", st.describe(), " after ", static_cast<int64_t>(ms),
                 " ms with the summary; no worker left"));
}
