// collie-run's failure handling with real processes: a worker that exits 3,
// one killed by SIGKILL, peers that ignore SIGTERM (killed after the grace
// period), Ctrl-C and SIGTERM to the launcher, the launcher itself SIGKILLed,
// and restarts. Each test checks the exit status, the summary, and that no
// worker survives the launcher.
#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>

#include "collie/base/str_cat.h"
#include "collie/test/runtime/launcher/launcher_harness.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

void check_none_alive(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    INFO("worker pid " << pid);
    CHECK_FALSE(process_alive(pid));
  }
}

}  // namespace

TEST_CASE("a worker exiting 3 stops the group and is named in the summary", "[launcher][failure]") {
  TempDir pids;
  auto p = start_launcher({"--standalone", "--nproc-per-node", "3"}, "fail",
                          {pids.path(), "1", "exit3", "wait"});
  auto st = p.wait(kLaunchTimeout);
  std::string err = p.err();
  INFO(err);
  CHECK(st.exit_code == 1);
  CHECK_THAT(err, Contains("root cause: rank 1 (local rank 1, pid "));
  CHECK_THAT(err, Contains(") ended with exit code 3 at "));
  CHECK_THAT(err, Contains("loss is NaN at step 7"));  // its stderr tail
  CHECK_THAT(err, Contains("signal 15 (SIGTERM)"));    // the peers we stopped
  CHECK_THAT(err, Contains("(stopped by collie-run)"));
  CHECK_THAT(err, Contains("job failed after 1 attempt"));
  check_none_alive(wait_for_pid_files(pids.path(), 3));
}

TEST_CASE("a worker killed by SIGKILL is reported by signal name", "[launcher][failure]") {
  TempDir pids;
  auto p = start_launcher({"--standalone", "--nproc-per-node", "2"}, "fail",
                          {pids.path(), "0", "sigkill", "wait"});
  auto st = p.wait(kLaunchTimeout);
  std::string err = p.err();
  INFO(err);
  CHECK(st.exit_code == 1);
  CHECK_THAT(err, Contains("root cause: rank 0"));
  CHECK_THAT(err, Contains("ended with signal 9 (SIGKILL)"));
  CHECK_THAT(err, Contains("rank 0 wrote nothing to stderr"));
  check_none_alive(wait_for_pid_files(pids.path(), 2));
}

TEST_CASE("peers that ignore SIGTERM are killed after the grace period", "[launcher][failure]") {
  TempDir pids;
  auto start = std::chrono::steady_clock::now();
  auto p = start_launcher({"--standalone", "--nproc-per-node", "3", "--grace-period", "300ms"},
                          "fail", {pids.path(), "2", "exit3", "ignore_term"});
  auto st = p.wait(kLaunchTimeout);
  auto elapsed = std::chrono::steady_clock::now() - start;
  std::string err = p.err();
  INFO(err);
  CHECK(st.exit_code == 1);
  CHECK(elapsed >= std::chrono::milliseconds(300));
  CHECK_THAT(err, Contains("root cause: rank 2"));
  // Both hanging peers needed the SIGKILL.
  CHECK(lines_with_prefix(err, "    0      0     0").size() == 1);
  CHECK_THAT(err, Contains("signal 9 (SIGKILL)"));
  CHECK(err.find("signal 15 (SIGTERM)") == std::string::npos);
  check_none_alive(wait_for_pid_files(pids.path(), 3));
}

TEST_CASE("SIGINT and SIGTERM to the launcher reach every worker", "[launcher][failure]") {
  for (int sig : {SIGINT, SIGTERM}) {
    TempDir pids;
    auto p = start_launcher({"--standalone", "--nproc-per-node", "3"}, "fail",
                            {pids.path(), "-1", "none", "wait"});
    auto workers = wait_for_pid_files(pids.path(), 3);
    wait_for_stderr(p, "agent store listening");
    p.kill(sig);  // the launcher only, as a terminal's Ctrl-C would (workers have their own groups)
    auto st = p.wait(kLaunchTimeout);
    std::string err = p.err();
    INFO(err);
    CHECK(st.exit_code == 128 + sig);
    CHECK_THAT(err,
               Contains(str_cat("collie-run received ", sig == SIGINT ? "SIGINT" : "SIGTERM")));
    // The workers died of the launcher's own signal.
    CHECK_THAT(err, Contains(sig == SIGINT ? "signal 2 (SIGINT)" : "signal 15 (SIGTERM)"));
    check_none_alive(workers);
  }
}

TEST_CASE("workers die with a launcher that is SIGKILLed", "[launcher][failure]") {
  TempDir pids;
  auto p = start_launcher({"--standalone", "--nproc-per-node", "2"}, "fail",
                          {pids.path(), "-1", "none", "ignore_term"});
  auto workers = wait_for_pid_files(pids.path(), 2);
  p.kill(SIGKILL);
  p.wait(kLaunchTimeout);
  // PR_SET_PDEATHSIG delivers SIGKILL to each worker as its parent dies.
  CHECK(wait_until_dead(workers, std::chrono::seconds(10)).empty());
}

TEST_CASE("max restarts restarts the whole group with the next restart count",
          "[launcher][restart]") {
  auto p = start_launcher({"--standalone", "--nproc-per-node", "2", "--max-restarts", "2"}, "flaky",
                          {"1"});
  auto st = p.wait(kLaunchTimeout);
  std::string out = p.out(), err = p.err();
  INFO(err);
  CHECK(st.ok());
  CHECK_THAT(err, Contains("attempt 0 failed (rank 1 (local rank 1 on node 0"));
  CHECK_THAT(err, Contains("restarting the group, restart 1 of 2"));
  CHECK_THAT(err, Contains("rank 1 failing on attempt 0"));
  // Rank 0 may be stopped before it prints on attempt 0; rank 1 prints, then fails.
  CHECK(lines_with_prefix(out, "[rank1]: restart_count=0").size() == 1);
  CHECK(lines_with_prefix(out, "[rank0]: restart_count=0").size() <= 1);
  for (int r = 0; r < 2; ++r)
    CHECK(lines_with_prefix(out, str_cat("[rank", r, "]: restart_count=1")).size() == 1);
  CHECK(out.find("restart_count=2") == std::string::npos);

  // A worker that always fails uses up the restarts, then the job fails.
  auto q = start_launcher({"--standalone", "--nproc-per-node", "2", "--max-restarts", "1"}, "flaky",
                          {"0", "always"});
  CHECK(q.wait(kLaunchTimeout).exit_code == 1);
  CHECK_THAT(q.err(), Contains("job failed after 2 attempts (--max-restarts 1)"));
  CHECK(lines_with_prefix(q.out(), "[rank0]: restart_count=1").size() == 1);
}

TEST_CASE("log files are kept per attempt across a restart", "[launcher][restart]") {
  TempDir dir;
  auto p = start_launcher({"--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                           "--log-dir", dir.path(), "--run-id", "r"},
                          "flaky", {"1"});
  REQUIRE(p.wait(kLaunchTimeout).ok());
  CHECK_THAT(read_text_file(dir.path() + "/r/attempt_0/1/stderr.log"),
             Contains("failing on attempt 0"));
  CHECK_THAT(read_text_file(dir.path() + "/r/attempt_1/1/stdout.log"), Contains("restart_count=1"));
  // Without --tee the console showed no worker output.
  CHECK(lines_with_prefix(p.out(), "[rank").empty());
}
