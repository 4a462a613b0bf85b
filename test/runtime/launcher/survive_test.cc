// collie-run --on-failure: the flag's parsing, and real jobs in which a
// worker dies and collie-run does not stop the others. `shrink`: 4 workers
// in a collective loop, one SIGKILLed by the test; the 3 survivors call
// shrink_group and finish, and collie-run exits 0, saying what happened.
// `replace`: the dead worker's replacement starts with its environment plus
// COLLIE_REPLACEMENT=1 while the others keep running, and a failure with
// --max-restarts used up ends the job the old way. The workers are in
// survive_workers.cc. Two launchers show the rule is per node, and Ctrl-C
// still stops every worker.
#include <catch2/catch.hpp>

#include <signal.h>
#include <stdlib.h>

#include <map>
#include <regex>
#include <string>
#include <vector>

#include "collie/base/str_cat.h"
#include "collie/runtime/launcher/failure_events.h"
#include "collie/runtime/launcher/launch_options.h"
#include "collie/test/runtime/launcher/launcher_harness.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::launcher;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

ParseResult parse(std::vector<std::string> args) {
  args.insert(args.begin(), "collie-run");
  return parse_launch_options(args);
}

// The "orig K=V" / "repl K=V" lines rank `rank` printed, as K -> V.
std::map<std::string, std::string> env_lines(const std::string& out, int rank,
                                             const std::string& tag) {
  std::map<std::string, std::string> env;
  for (const std::string& line : lines_with_prefix(out, str_cat("[rank", rank, "]: ", tag, " "))) {
    const std::string kv = line.substr(str_cat("[rank", rank, "]: ", tag, " ").size());
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

// Whether `err` has a line with `event` that is timed since a failure.
bool timed_event(const std::string& err, const std::string& event) {
  static const std::regex timed(
      R"(collie-run: \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC, [+-]\d+\.\d{3}s after rank \d+ failed\] )");
  for (const std::string& line : lines_with_prefix(err, "collie-run: ["))
    if (line.find(event) != std::string::npos && std::regex_search(line, timed)) return true;
  return false;
}

void check_none_alive(const std::vector<pid_t>& pids) {
  CHECK(wait_until_dead(pids, std::chrono::seconds(10)).empty());
}

}  // namespace

TEST_CASE("collie-run --on-failure takes stop, shrink or replace and refuses anything else",
          "[launcher][options][survive]") {
  CHECK(parse({"./train"}).options->on_failure == OnFailure::kStop);
  CHECK(parse({"--on-failure", "shrink", "./train"}).options->on_failure == OnFailure::kShrink);
  CHECK(parse({"--on_failure=replace", "./train"}).options->on_failure == OnFailure::kReplace);
  CHECK(parse({"--on-failure=stop", "./train"}).options->on_failure == OnFailure::kStop);
  ::setenv("COLLIE_ON_FAILURE", "shrink", 1);
  const ParseResult from_env = parse({"./train"});
  ::unsetenv("COLLIE_ON_FAILURE");
  REQUIRE(from_env.options);
  CHECK(from_env.options->on_failure == OnFailure::kShrink);

  for (const char* bad : {"restart", "Shrink", ""}) {
    const ParseResult r = parse({"--on-failure", bad, "./train"});
    INFO(r.message);
    CHECK_FALSE(r.options);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.message, Contains(str_cat("--on-failure '", bad, "' is not a mode: use stop")) &&
                              Contains("shrink") && Contains("replace"));
  }
  const ParseResult elastic = parse({"--on-failure", "shrink", "--rdzv-backend", "c10d",
                                     "--rdzv-endpoint", "h:29400", "--nnodes", "1:2", "./train"});
  CHECK(elastic.exit_code == 2);
  CHECK_THAT(elastic.message, Contains("does not go with --rdzv-backend c10d"));
}

TEST_CASE("an event line has the UTC time and the signed time since its origin",
          "[launcher][survive]") {
  using std::chrono::milliseconds;
  const std::chrono::system_clock::time_point failed{milliseconds(1'796'000'000'123)};
  CHECK(event_line(failed + milliseconds(1637), failed, "rank 1 failed", "worker exited: x") ==
        "collie-run: [2026-11-30 00:53:21.760 UTC, +1.637s after rank 1 failed] worker exited: "
        "x\n");
  CHECK_THAT(event_line(failed - milliseconds(2), failed, "rank 1 failed", "y"),
             Contains(", -0.002s after rank 1 failed] y"));
}

TEST_CASE("on-failure shrink: the survivors of a SIGKILLed worker shrink and finish, exit 0",
          "[launcher][survive]") {
  TempDir pids;
  constexpr int kWorld = 4, kVictim = 1;
  auto p = start_launcher({"--standalone", "--nproc-per-node", std::to_string(kWorld),
                           "--on-failure", "shrink", "--grace-period", "2s"},
                          "survive_shrink", {pids.path()});
  const std::vector<pid_t> workers = wait_for_pid_files(pids.path(), kWorld);
  for (int r = 0; r < kWorld; ++r)
    p.wait_for_output(str_cat("[rank", r, "]: looping rank ", r), kLaunchTimeout);
  REQUIRE(::kill(workers[kVictim], SIGKILL) == 0);
  const ExitStatus st = p.wait(kLaunchTimeout);
  const std::string out = p.out(), err = p.err();
  INFO(out << err);
  CHECK(st.exit_code == 0);
  // Every survivor is in the new group of 3, renumbered in the old order,
  // with the victim left out.
  for (int r : {0, 2, 3})
    CHECK_THAT(out, Contains(str_cat("[rank", r, "]: shrunk rank ", r, " -> ",
                                     r < kVictim ? r : r - 1, " of 3 excluded=", kVictim)));
  CHECK(timed_event(err, str_cat("failure seen: rank 1 (local rank 1, pid ", workers[kVictim],
                                 ") ended with signal 9 (SIGKILL); the 3 other workers go on "
                                 "without it (--on-failure shrink)")));
  for (int r : {0, 2, 3})
    CHECK(timed_event(err, str_cat("worker exited: rank ", r, " (local rank ", r, ", pid ",
                                   workers[r], ") with exit code 0")));
  CHECK_THAT(err,
             Contains("the workers succeeded without 1 of 4 (--on-failure shrink): 3 exited 0; "
                      "lost: rank 1"));
  // No stop-mode summary, no replacement, nothing stopped by collie-run.
  CHECK(err.find("root cause") == std::string::npos);
  CHECK(err.find("replacement started") == std::string::npos);
  CHECK(err.find("stopped by collie-run") == std::string::npos);
  check_none_alive(workers);
}

TEST_CASE(
    "on-failure shrink: one worker finishing 0 is a success, none is a failure as in stop mode",
    "[launcher][survive]") {
  auto p = start_launcher({"--standalone", "--nproc-per-node", "2", "--on-failure", "shrink"},
                          "flaky", {"0", "always"});
  // flaky: rank 0 exits 5, rank 1 exits 0: one survivor finished, exit 0.
  CHECK(p.wait(kLaunchTimeout).exit_code == 0);
  INFO(p.err());
  CHECK_THAT(p.err(), Contains("lost: rank 0 (local rank 0, pid "));
  // Both ranks fail: nobody survived, and the summary names the first.
  TempDir pids;
  auto q = start_launcher({"--standalone", "--nproc-per-node", "2", "--on-failure", "shrink"},
                          "fail", {pids.path(), "-1", "none", "wait"});
  const std::vector<pid_t> workers = wait_for_pid_files(pids.path(), 2);
  REQUIRE(::kill(workers[1], SIGKILL) == 0);
  q.wait_for_stderr("failure seen: rank 1", kLaunchTimeout);
  REQUIRE(::kill(workers[0], SIGKILL) == 0);
  CHECK(q.wait(kLaunchTimeout).exit_code == 1);
  const std::string err = q.err();
  INFO(err);
  CHECK(timed_event(err, "failure seen: rank 0 (local rank 0, pid " + std::to_string(workers[0]) +
                             ") ended with signal 9 (SIGKILL); no other worker is running"));
  CHECK_THAT(err, Contains("root cause: rank 1 (local rank 1, pid "));
  CHECK_THAT(err, Contains("job failed after 1 attempt (--max-restarts 0)"));
}

TEST_CASE(
    "on-failure replace: the replacement gets the dead worker's environment and "
    "COLLIE_REPLACEMENT=1",
    "[launcher][survive]") {
  TempDir pids, logs;
  constexpr int kVictim = 1;
  auto p = start_launcher(
      {"--standalone", "--nproc-per-node", "3", "--on-failure", "replace", "--max-restarts", "2",
       "--log-dir", logs.path(), "--run-id", "r", "--tee", "3"},
      "survive_replace", {pids.path(), std::to_string(kVictim), "once"});
  const ExitStatus st = p.wait(kLaunchTimeout);
  const std::string out = p.out(), err = p.err();
  INFO(out << err);
  CHECK(st.exit_code == 0);
  const std::vector<pid_t> originals = wait_for_pid_files(pids.path(), 3);

  auto orig = env_lines(out, kVictim, "orig"), repl = env_lines(out, kVictim, "repl");
  REQUIRE(orig.size() == 13);
  REQUIRE(repl.size() == 13);
  CHECK(orig["COLLIE_REPLACEMENT"] == "<unset>");
  CHECK(repl["COLLIE_REPLACEMENT"] == "1");
  CHECK(repl["RANK"] == "1");
  CHECK(repl["LOCAL_RANK"] == "1");
  CHECK(repl["WORLD_SIZE"] == "3");
  CHECK(repl["TORCHELASTIC_RESTART_COUNT"] == "0");  // it joins the running attempt
  CHECK(repl["pid"] != orig["pid"]);
  for (const auto& [k, v] : orig)
    if (k != "COLLIE_REPLACEMENT" && k != "pid") CHECK(repl[k] == v);
  // Only the victim was replaced; the others ran throughout and saw it.
  for (int r : {0, 2}) {
    CHECK(env_lines(out, r, "repl").empty());
    CHECK_THAT(out, Contains(str_cat("[rank", r, "]: rank ", r, " saw the replacement")));
  }

  CHECK(timed_event(err, str_cat("failure seen: rank 1 (local rank 1, pid ", originals[kVictim],
                                 ") ended with signal 9 (SIGKILL); replacing it "
                                 "(--on-failure replace, restart 1 of 2)")));
  CHECK(timed_event(err, str_cat("replacement started: rank 1 (local rank 1) as pid ", repl["pid"],
                                 " with COLLIE_REPLACEMENT=1")));
  CHECK(timed_event(err, str_cat("worker exited: rank 1 (local rank 1, pid ", repl["pid"],
                                 ") with exit code 0")));
  CHECK_THAT(err, Contains("the workers succeeded after 1 replacement (--on-failure replace); "
                           "replaced: rank 1 (local rank 1, pid " +
                           std::to_string(originals[kVictim]) + ") ended with signal 9 (SIGKILL)"));
  CHECK(err.find("root cause") == std::string::npos);
  // The replacement's lines go on in its predecessor's log file.
  CHECK_THAT(read_text_file(logs.path() + "/r/attempt_0/1/stdout.log"),
             Contains(str_cat("orig pid=", originals[kVictim])) &&
                 Contains(str_cat("repl pid=", repl["pid"])));
  check_none_alive(originals);
  check_none_alive({static_cast<pid_t>(std::stoi(repl["pid"]))});
}

TEST_CASE("on-failure replace: with --max-restarts used up a failure ends the job the old way",
          "[launcher][survive]") {
  TempDir pids;
  auto p = start_launcher({"--standalone", "--nproc-per-node", "3", "--on-failure", "replace",
                           "--max-restarts", "1", "--grace-period", "2s"},
                          "survive_replace", {pids.path(), "2", "always"});
  const ExitStatus st = p.wait(kLaunchTimeout);
  const std::string out = p.out(), err = p.err();
  INFO(out << err);
  CHECK(st.exit_code == 1);
  const std::vector<pid_t> originals = wait_for_pid_files(pids.path(), 3);
  auto repl = env_lines(out, 2, "repl");
  REQUIRE(repl.count("pid") == 1);
  CHECK(timed_event(err, "replacing it (--on-failure replace, restart 1 of 1)"));
  CHECK(
      timed_event(err, str_cat("replacement started: rank 2 (local rank 2) as pid ", repl["pid"])));
  CHECK(timed_event(err, str_cat("failure seen: rank 2 (local rank 2, pid ", repl["pid"],
                                 ") ended with signal 9 (SIGKILL); no restart left for a "
                                 "replacement (--max-restarts 1): stopping the other workers")));
  // The old way: the survivors stopped, the summary, exit 1.
  CHECK_THAT(err, Contains(str_cat("root cause: rank 2 (local rank 2, pid ", repl["pid"],
                                   ") ended with signal 9 (SIGKILL)")));
  CHECK_THAT(err, Contains("signal 15 (SIGTERM)") && Contains("(stopped by collie-run)"));
  CHECK_THAT(err, Contains(str_cat(" (replaced earlier: rank 2, pid ", originals[2],
                                   ", signal 9 (SIGKILL) at ")));
  CHECK_THAT(err, Contains("job failed: rank 2 (local rank 2 on node 0") &&
                      Contains("with no restart left after 1 replacement (--on-failure replace, "
                               "--max-restarts 1)"));
  check_none_alive(originals);
  check_none_alive({static_cast<pid_t>(std::stoi(repl["pid"]))});

  // Without restarts the first failure ends the job at once, as in stop mode.
  TempDir pids0;
  auto q = start_launcher({"--standalone", "--nproc-per-node", "2", "--on-failure", "replace"},
                          "survive_replace", {pids0.path(), "1", "always"});
  CHECK(q.wait(kLaunchTimeout).exit_code == 1);
  INFO(q.err());
  CHECK_THAT(q.err(), Contains("no restart left for a replacement (--max-restarts 0)") &&
                          Contains("root cause: rank 1") &&
                          Contains("job failed after 1 attempt (--max-restarts 0)"));
  CHECK(q.err().find("replacement started") == std::string::npos);
  check_none_alive(wait_for_pid_files(pids0.path(), 2));
}

TEST_CASE("on-failure shrink: two launchers, a worker of node 1 killed, both nodes finish",
          "[launcher][survive][multinode]") {
  // The rule is per launcher: node 1 keeps one survivor, so neither node
  // reports a failure, and the 3 survivors shrink across the two nodes.
  TempDir pids;
  const std::vector<std::string> common{"--nnodes",     "2",       "--master-addr",    "127.0.0.1",
                                        "--run-id",     "survive", "--nproc-per-node", "2",
                                        "--on-failure", "shrink",  "--grace-period",   "2s"};
  auto flags = [&](int node, uint16_t port) {
    std::vector<std::string> f = common;
    for (const std::string& s : {std::string("--node-rank"), std::to_string(node),
                                 std::string("--master-port"), std::to_string(port)})
      f.push_back(s);
    return f;
  };
  auto node0 = start_launcher(flags(0, 0), "survive_shrink", {pids.path()});
  const uint16_t port = agent_store_port(wait_for_stderr(node0, "agent store listening"));
  auto node1 = start_launcher(flags(1, port), "survive_shrink", {pids.path()});
  const std::vector<pid_t> workers = wait_for_pid_files(pids.path(), 4);
  for (int r = 0; r < 4; ++r)
    (r < 2 ? node0 : node1)
        .wait_for_output(str_cat("[rank", r, "]: looping rank ", r), kLaunchTimeout);
  REQUIRE(::kill(workers[2], SIGKILL) == 0);
  const ExitStatus s1 = node1.wait(kLaunchTimeout), s0 = node0.wait(kLaunchTimeout);
  INFO(node0.out() << node0.err() << "\n--- node 1 ---\n" << node1.out() << node1.err());
  CHECK(s0.exit_code == 0);
  CHECK(s1.exit_code == 0);
  CHECK_THAT(node0.out(), Contains("[rank0]: shrunk rank 0 -> 0 of 3 excluded=2") &&
                              Contains("[rank1]: shrunk rank 1 -> 1 of 3 excluded=2"));
  CHECK_THAT(node1.out(), Contains("[rank3]: shrunk rank 3 -> 2 of 3 excluded=2"));
  CHECK(timed_event(node1.err(), "failure seen: rank 2 (local rank 0, pid " +
                                     std::to_string(workers[2]) + ") ended with signal 9"));
  CHECK(node0.err().find("failure seen") == std::string::npos);
  check_none_alive(workers);
}

TEST_CASE("on-failure shrink: Ctrl-C to the launcher still stops every worker",
          "[launcher][survive]") {
  TempDir pids;
  auto p = start_launcher({"--standalone", "--nproc-per-node", "3", "--on-failure", "shrink"},
                          "fail", {pids.path(), "-1", "none", "wait"});
  const std::vector<pid_t> workers = wait_for_pid_files(pids.path(), 3);
  REQUIRE(::kill(workers[0], SIGKILL) == 0);
  p.wait_for_stderr("failure seen: rank 0", kLaunchTimeout);
  p.kill(SIGINT);
  CHECK(p.wait(kLaunchTimeout).exit_code == 128 + SIGINT);
  const std::string err = p.err();
  INFO(err);
  CHECK(timed_event(err, "worker exited: rank 1 (local rank 1, pid " + std::to_string(workers[1]) +
                             ") with signal 2 (SIGINT) (stopped by collie-run)"));
  CHECK_THAT(err, Contains("collie-run received SIGINT"));
  check_none_alive(workers);
}
