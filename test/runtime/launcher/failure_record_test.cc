// Failures as data: collie-run gives every worker its own
// TORCHELASTIC_ERROR_FILE, and blames the rank the failed workers' error
// records name, whatever their error messages say.
#include <catch2/catch.hpp>

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "collie/base/error_record.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/api/distributed.h"
#include "collie/runtime/launcher/culprit.h"
#include "collie/runtime/launcher/failure_summary.h"
#include "collie/test/runtime/launcher/launcher_harness.h"
#include "collie/test/support/child.h"
#include "collie/test/support/skip.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using namespace collie::launcher;
using Catch::Matchers::Contains;

namespace {

// A record of a timeout whose probe found `silent` unresponsive.
ErrorRecord unresponsive(int rank, std::vector<int> silent) {
  ErrorRecord r;
  r.error_type = "TimeoutError";
  r.message = str_cat("all_reduce(float32, 4, sum) as op #3 on rank ", rank, " timed out");
  r.cause = FailureCause::kTimeoutUnresponsive;
  r.global_rank = r.group_rank = rank;
  for (int s : silent) r.culprits.push_back({.rank = s, .global_rank = s, .address = "a:1"});
  return r;
}

WorkerResult failed_worker(int rank) {
  WorkerResult w;
  w.place.global_rank = w.place.local_rank = rank;
  w.exit.exit_code = 1;
  return w;
}

}  // namespace

// args: pid_dir call_timeout_ms stop_rank. An all_reduce loop; rank
// stop_rank stops itself (SIGSTOP) after a few calls, so that the others
// time out with it silent. A failing rank prints a false verdict instead of
// its error, naming rank 1 as the one that did not answer, and logs
// nothing else: the launcher's verdict must not move with it.
COLLIE_TEST_CHILD(lying_allreduce_loop) {
  // Nothing but the lie on stderr: collie's own log lines quote the true
  // error.
  set_log_level(LogLevel::kOff);
  init_process_group({.backend = "cpu", .timeout = std::chrono::seconds(60)});
  const int rank = get_rank();
  write_pid_file(args.at(0), rank);
  const Timeout call_timeout(std::stoi(args.at(1)));
  const int stop_rank = std::stoi(args.at(2));
  if (rank == 0) {
    const char* file = std::getenv("TORCHELASTIC_ERROR_FILE");
    std::printf("error file: %s\n", file != nullptr ? file : "(unset)");
    std::fflush(stdout);
  }
  try {
    for (int k = 0;; ++k) {
      std::vector<float> v(1 << 12, static_cast<float>(rank + 1));
      get_default_group()->all_reduce(view(v.data(), v.size()), {.timeout = call_timeout})->wait();
      if (k == 3 && rank == stop_rank) ::raise(SIGSTOP);
    }
  } catch (const std::exception&) {
    std::fprintf(stderr,
                 "rank %d failed: all_reduce(float32, 4096, sum) as op #5 on rank %d timed out; "
                 "ranks 0,2 answered a timeout probe, rank 1 (x:1) did not within 1.00s: it is "
                 "stopped, hung or unreachable (or outside any collective call)\n",
                 rank, rank);
    return 1;
  }
}

TEST_CASE("the verdict comes from the error records, not from the words of the errors",
          "[launcher][blame][error_record]") {
  // Rank 2 stops; ranks 0 and 1 time out, their probes find rank 2 silent,
  // and each writes so in its error record, while their stderr names rank
  // 1. Reading stderr, collie-run blamed rank 1.
  TempDir pids;
  auto p = start_launcher({"--standalone", "--nproc-per-node", "3", "--grace-period", "1s"},
                          "lying_allreduce_loop", {pids.path(), "2000", "2"});
  const auto workers = wait_for_pid_files(pids.path(), 3);
  auto st = p.wait(kLaunchTimeout);
  const std::string err = p.err();
  INFO(err);
  CHECK(st.exit_code == 1);
  CHECK_THAT(err, Contains("rank 1 (x:1) did not within 1.00s"));  // the lie was told
  for (const std::string& line : lines_with_prefix(err, "[rank"))  // and nothing true
    CHECK_THAT(line, !Contains("rank 2 (127.0.0.1"));
  CHECK_THAT(err, Contains("root cause: rank 2 (local rank 2, pid "));
  CHECK_THAT(err, Contains(") stopped responding: rank"));
  CHECK_THAT(err, Contains("named it in"));
  CHECK_THAT(err, Contains("; it was in the stopped state"));
  CHECK_THAT(err, !Contains("root cause: rank 0"));
  CHECK_THAT(err, !Contains("root cause: rank 1"));
  // The real error, from the record, is what the summary quotes.
  CHECK_THAT(err, Contains("  e.g. all_reduce(float32, 4096, sum"));
  CHECK(wait_until_dead(workers, std::chrono::seconds(10)).empty());

  // Each worker had a file of its own, in a folder collie-run removed.
  const auto shown = lines_with_prefix(p.out(), "[rank0]: error file: ");
  REQUIRE(shown.size() == 1);
  const std::string file = shown[0].substr(std::string("[rank0]: error file: ").size());
  CHECK(file.find("/collie-run-errors-") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(file));
  CHECK_FALSE(std::filesystem::exists(std::filesystem::path(file).parent_path()));
}

TEST_CASE("a user's TORCHELASTIC_ERROR_FILE is collie-run's own, not the workers'",
          "[launcher][error_record]") {
  TempDir dir;
  const std::string mine = dir.file("agent_error.json");
  TempDir pids;
  auto p = start_launcher({"--standalone", "--nproc-per-node", "2", "--grace-period", "1s"},
                          "lying_allreduce_loop", {pids.path(), "2000", "1"},
                          {{"TORCHELASTIC_ERROR_FILE", mine}});
  const auto workers = wait_for_pid_files(pids.path(), 2);
  auto st = p.wait(kLaunchTimeout);
  INFO(p.err());
  CHECK(st.exit_code == 1);
  const auto shown = lines_with_prefix(p.out(), "[rank0]: error file: ");
  REQUIRE(shown.size() == 1);
  CHECK_THAT(shown[0], !Contains(mine));
  // collie-run's own file holds the root cause: rank 1 stopped and left no
  // record, so the record is collie-run's, blaming it.
  const auto record = read_error_record(mine);
  REQUIRE(record);
  CHECK(record->error_type == "ChildFailedError");
  CHECK(record->cause == FailureCause::kTimeoutUnresponsive);
  CHECK(record->culprit_ranks() == std::vector<int>{1});
  CHECK(wait_until_dead(workers, std::chrono::seconds(10)).empty());
}

TEST_CASE("the failed workers' error records name the rank to blame", "[launcher][blame]") {
  AttemptResult r;
  r.outcome = AttemptOutcome::kFailed;
  r.first_failure = 0;
  r.workers = {failed_worker(0), failed_worker(1), failed_worker(2), failed_worker(3)};
  r.workers[0].error_record = unresponsive(0, {3});
  r.workers[1].error_record = unresponsive(1, {3, 1});  // naming itself does not count
  // A record of another cause names no one to blame.
  r.workers[2].error_record = unresponsive(2, {0});
  r.workers[2].error_record->cause = FailureCause::kPeerClosed;
  r.workers[3].exit.exit_code = -1;
  r.workers[3].exit.signal = SIGKILL;
  r.workers[3].stopped_by_launcher = true;
  // What the workers wrote to stderr does not count at all.
  r.workers[0].stderr_tail = {
      "rank 0 failed: ranks 0,3 answered a timeout probe, rank 2 (a:1) "
      "did not within 1.00s: it is stopped, hung or unreachable"};
  blame_named_culprit(r);
  REQUIRE(r.culprit);
  CHECK(r.first_failure == 3);
  CHECK(r.culprit->rank == 3);
  CHECK(r.culprit->address == "a:1");
  CHECK(r.culprit->named_by == std::vector<int>{0, 1});
  CHECK(r.culprit->message == "all_reduce(float32, 4, sum) as op #3 on rank 0 timed out");
  CHECK_THAT(describe_culprit(r), Contains("rank 3 (local rank 3, pid -1) stopped responding: "
                                           "ranks 0,1 named it in their error records"));

  // The culprit on another node: named with its address.
  r.workers.pop_back();
  r.first_failure = 0;
  r.culprit.reset();
  blame_named_culprit(r);
  REQUIRE(r.culprit);
  CHECK(r.first_failure == 0);
  CHECK_THAT(describe_failure(r, 1, "h"),
             Contains("rank 3 (a:1, on another node) stopped responding"));

  // No record naming anyone: the first to fail stays the root cause.
  for (auto& w : r.workers) w.error_record.reset();
  r.culprit.reset();
  blame_named_culprit(r);
  CHECK_FALSE(r.culprit);
  CHECK(r.first_failure == 0);
}

TEST_CASE("torchrun's agent reads collie's error record as one of its own",
          "[launcher][error_record][interop][torchrun]") {
  require_or_skip(torch_missing().empty(), torch_missing());
  TempDir dir;
  const std::string path = dir.file("error.json");
  ErrorRecord r = unresponsive(0, {2});
  r.time = std::chrono::system_clock::time_point(std::chrono::seconds(1733500000));
  REQUIRE(ErrorFile(path).record(r));
  // What torchrun's agent does with a failed worker's file: ProcessFailure
  // reads the message and the time, ChildFailedError picks the first
  // failure by it and prints the message as the traceback.
  auto p = Subprocess::spawn(
      {"/usr/bin/python3", "-c",
       "import sys\n"
       "from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, "
       "ProcessFailure\n"
       "f = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=sys.argv[1])\n"
       "print('message:', f.message['message'])\n"
       "print('timestamp:', f.timestamp)\n"
       "print(ChildFailedError('train', {0: f}))\n",
       path});
  const auto st = p.wait(std::chrono::seconds(120));
  INFO(p.out() << p.err());
  CHECK(st.exit_code == 0);
  CHECK_THAT(p.out(), Contains("message: TimeoutError: all_reduce(float32, 4, sum) as op #3 on "
                               "rank 0 timed out\n"));
  CHECK_THAT(p.out(), Contains("timestamp: 1733500000\n"));
  CHECK_THAT(p.out(), Contains("traceback : TimeoutError: all_reduce(float32, 4, sum)"));
}
