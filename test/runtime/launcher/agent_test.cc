// The agent loop (runtime/launcher/agent.h) against a scripted rendezvous
// and scripted workers, no process started: a failure restarts while
// --max-restarts allows and then ends the job, a success closes it, a
// membership change starts a new round without using a restart, and a
// signal, a lost store or a refused join end the launcher with their exit
// status.
#include <catch2/catch.hpp>

#include <signal.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/launcher/agent.h"

using namespace collie;
using namespace collie::launcher;
using Catch::Matchers::Contains;

namespace {

// What one round brings: the workers' outcome, and what the rendezvous says.
struct Script {
  AttemptOutcome outcome = AttemptOutcome::kSucceeded;
  std::optional<RoundEnd> check;                // kRemoteFailed: why the round ends
  std::optional<std::string> membership;        // kFailed: a membership change behind it
  std::optional<std::string> failure_recorded;  // what finish() returns
  bool store_lost = false;
};

class FakeRendezvous : public Membership {
 public:
  explicit FakeRendezvous(std::vector<Script> rounds) : rounds(std::move(rounds)) {}

  void set_interrupt_check(std::function<int()>) override {}
  Round next_round() override {
    calls.push_back(str_cat("next_round ", number + 1));
    if (join_error) std::rethrow_exception(join_error);
    REQUIRE(number + 1 < static_cast<int>(rounds.size()));
    return {.number = ++number, .node_rank = 0, .nnodes = 2, .rank_base = 0, .world_size = 4};
  }
  std::optional<RoundEnd> check() override { return script().check; }
  std::optional<std::string> membership_change() override { return script().membership; }
  void report_failure(const std::string& reason) override {
    calls.push_back(str_cat("report_failure ", reason));
  }
  std::optional<std::string> finish(bool succeeded) override {
    calls.push_back(str_cat("finish ", succeeded));
    return script().failure_recorded;
  }
  void close(const std::string& outcome) override { calls.push_back("close " + outcome); }

  RoundWords words() const override { return {"attempt", "failed attempt", "trying again"}; }
  std::string hosting_line() const override { return ""; }
  std::string round_line() const override {
    return str_cat("collie-run: attempt ", number, " starts");
  }
  std::string store_lost_line() const override { return "collie-run: the store is gone"; }
  std::string failed_elsewhere_line(const std::string& reason) const override {
    return "collie-run: failed elsewhere: " + reason;
  }

  const Script& script() const { return rounds.at(static_cast<size_t>(number)); }

  std::vector<Script> rounds;
  int number = -1;
  std::vector<std::string> calls;
  std::exception_ptr join_error;
};

// Two workers, as WorkerGroup::run would report them for the script.
AttemptResult run_workers(const Script& s, const RemoteCheck& check) {
  AttemptResult r;
  r.outcome = s.outcome;
  for (int lr = 0; lr < 2; ++lr)
    r.workers.push_back({.place = {.local_rank = lr, .global_rank = lr, .world_size = 4},
                         .pid = 100 + lr,
                         .exit = {.exit_code = 0}});
  if (s.outcome == AttemptOutcome::kFailed) {
    r.first_failure = 1;
    r.workers[1].exit = {.exit_code = 3};
  } else if (s.outcome == AttemptOutcome::kRemoteFailed) {
    // The group polls the check and stops its workers on what it says.
    std::optional<std::string> reason = check();
    REQUIRE(reason);
    r.remote_reason = *reason;
    r.store_lost = s.store_lost;
    for (WorkerResult& w : r.workers) {
      w.exit = {.signal = SIGTERM};
      w.stopped_by_launcher = true;
    }
  } else if (s.outcome == AttemptOutcome::kInterrupted) {
    r.signal = SIGINT;
    for (WorkerResult& w : r.workers) w.exit = {.signal = SIGINT};
  }
  return r;
}

struct Run {
  int status = -1;
  std::string said;
  std::vector<int> rounds_run;
};

Run run(FakeRendezvous& rdzv, int max_restarts) {
  Run out;
  const RunWorkers workers = [&](const Round& round, const RemoteCheck& check) {
    out.rounds_run.push_back(round.number);
    return run_workers(rdzv.script(), check);
  };
  out.status = run_agent(rdzv, workers, {.max_restarts = max_restarts, .hostname = "h"},
                         [&](const std::string& text) { out.said += text; });
  INFO(out.said);
  return out;
}

const Script kOk{};
const Script kFail{.outcome = AttemptOutcome::kFailed,
                   .failure_recorded = "rank 1 (local rank 1 on node 0) ended with exit code 3"};

}  // namespace

TEST_CASE("agent: a success closes the rendezvous and exits 0", "[launcher][agent]") {
  FakeRendezvous rdzv({kOk});
  Run r = run(rdzv, 0);
  CHECK(r.status == 0);
  CHECK(rdzv.calls == std::vector<std::string>{"next_round 0", "finish 1", "close succeeded"});
  CHECK_THAT(r.said, Contains("collie-run: attempt 0 starts\n"));
}

TEST_CASE("agent: a failure restarts while --max-restarts allows, then the job succeeds",
          "[launcher][agent]") {
  FakeRendezvous rdzv({kFail, kFail, kOk});
  Run r = run(rdzv, 2);
  CHECK(r.status == 0);
  CHECK(r.rounds_run == std::vector<int>{0, 1, 2});
  // This node's failure is reported before the round is finished.
  CHECK(rdzv.calls.at(1) ==
        "report_failure rank 1 (local rank 1 on node 0, host h, pid 101) "
        "ended with exit code 3");
  CHECK(rdzv.calls.at(2) == "finish 0");
  CHECK(rdzv.calls.back() == "close succeeded");
  CHECK_THAT(r.said, Contains("root cause: rank 1 (local rank 1, pid 101) ended with exit code 3"));
  CHECK_THAT(r.said, Contains("collie-run: attempt 0 failed (rank 1 (local rank 1 on node 0) ended "
                              "with exit code 3); trying again, restart 1 of 2\n"));
  CHECK_THAT(r.said, Contains("attempt 1 failed (") && Contains("restart 2 of 2\n"));
}

TEST_CASE("agent: out of restarts the job fails, closing with the reason", "[launcher][agent]") {
  FakeRendezvous rdzv({kFail, kFail});
  Run r = run(rdzv, 1);
  CHECK(r.status == 1);
  CHECK(r.rounds_run == std::vector<int>{0, 1});
  CHECK_THAT(r.said, Contains("collie-run: job failed after 2 failed attempts (--max-restarts 1): "
                              "rank 1 (local rank 1 on node 0) ended with exit code 3\n"));
  CHECK(rdzv.calls.back() ==
        "close failed: rank 1 (local rank 1 on node 0) ended with exit code 3");

  FakeRendezvous once({kFail});
  CHECK_THAT(run(once, 0).said, Contains("job failed after 1 failed attempt (--max-restarts 0)"));
}

TEST_CASE("agent: a membership change starts a new round without using a restart",
          "[launcher][agent]") {
  // Seen by the check while the workers run ...
  const Script arrival{
      .outcome = AttemptOutcome::kRemoteFailed,
      .check = RoundEnd{.reason = "1 launcher is waiting to join", .membership_change = true}};
  // ... or behind a failure of this node's workers, which is then not reported.
  const Script lost_peers{.outcome = AttemptOutcome::kFailed, .membership = "peers stopped for it"};
  FakeRendezvous rdzv({arrival, lost_peers, kOk});
  Run r = run(rdzv, 0);  // no restart to spend
  CHECK(r.status == 0);
  CHECK(r.rounds_run == std::vector<int>{0, 1, 2});
  CHECK_THAT(r.said, Contains("collie-run: attempt 0 ends: 1 launcher is waiting to join; stopping "
                              "the workers to rendezvous again\n"));
  CHECK_THAT(r.said, Contains("collie-run: attempt 1 ends: peers stopped for it; stopping"));
  CHECK_THAT(r.said, !Contains("failed"));
  for (const std::string& call : rdzv.calls) CHECK_THAT(call, !Contains("report_failure"));
}

TEST_CASE("agent: a failure elsewhere fails the round even when this node's workers succeeded",
          "[launcher][agent]") {
  const Script elsewhere{.failure_recorded = "rank 3 on node 1 ended with exit code 5"};
  const Script remote{.outcome = AttemptOutcome::kRemoteFailed,
                      .check = RoundEnd{.reason = "rank 3 failed"},
                      .failure_recorded = "rank 3 on node 1 ended with exit code 5"};
  FakeRendezvous rdzv({elsewhere, remote, kOk});
  Run r = run(rdzv, 2);
  CHECK(r.status == 0);
  CHECK_THAT(r.said, Contains("collie-run: failed elsewhere: rank 3 on node 1 ended with exit "
                              "code 5\ncollie-run: attempt 0 failed (rank 3 on node 1"));
  // The failure the round recorded first is the one the summary names.
  CHECK_THAT(r.said,
             Contains("cause: another node failed: rank 3 on node 1 ended with exit code 5"));
  CHECK_THAT(r.said, Contains("restart 2 of 2"));
}

TEST_CASE("agent: a signal or a lost store ends this launcher at once", "[launcher][agent]") {
  FakeRendezvous signalled({{.outcome = AttemptOutcome::kInterrupted}, kOk});
  Run r = run(signalled, 3);
  CHECK(r.status == 128 + SIGINT);
  CHECK(r.rounds_run == std::vector<int>{0});
  CHECK_THAT(r.said, Contains("cause: collie-run received SIGINT"));
  // The other nodes are told; nothing is finished or closed.
  CHECK(signalled.calls == std::vector<std::string>{"next_round 0",
                                                    "report_failure the launcher of node 0 (h) "
                                                    "received SIGINT"});

  FakeRendezvous lost({{.outcome = AttemptOutcome::kRemoteFailed,
                        .check = RoundEnd{.reason = "lost contact with the agent store"},
                        .store_lost = true},
                       kOk});
  r = run(lost, 3);
  CHECK(r.status == 1);
  CHECK_THAT(r.said, Contains("lost contact with the agent store"));
  CHECK_THAT(r.said, Contains("collie-run: the store is gone\n"));
  CHECK(lost.calls == std::vector<std::string>{"next_round 0"});
}

TEST_CASE("agent: a join that fails says why, with its exit status", "[launcher][agent]") {
  const std::map<std::string, std::pair<std::exception_ptr, int>> cases{
      {"job over, succeeded", {std::make_exception_ptr(JobOver(true, "over")), 0}},
      {"job over, failed", {std::make_exception_ptr(JobOver(false, "over")), 1}},
      {"interrupted", {std::make_exception_ptr(MembershipInterrupted(SIGTERM, "stopped")), 143}},
      {"mismatched flags", {std::make_exception_ptr(InvalidArgument("other flags")), 2}},
      {"timeout", {std::make_exception_ptr(TimeoutError("only 1 came")), 1}}};
  for (const auto& [name, error_and_status] : cases) {
    INFO(name);
    FakeRendezvous rdzv({kOk});
    rdzv.join_error = error_and_status.first;
    Run r = run(rdzv, 1);
    CHECK(r.status == error_and_status.second);
    CHECK(r.rounds_run.empty());
    CHECK(r.said.ends_with("\n"));
  }
}

TEST_CASE("agent: a rendezvous error during a round prints the summary of failed workers",
          "[launcher][agent]") {
  struct Throwing : FakeRendezvous {
    using FakeRendezvous::FakeRendezvous;
    std::optional<std::string> finish(bool) override {
      throw TimeoutError("collie-run: node 0 waited for all 2 nodes to finish attempt 0");
    }
  };
  Throwing rdzv({kFail});
  Run r = run(rdzv, 3);
  CHECK(r.status == 1);
  CHECK_THAT(r.said, Contains("root cause: rank 1") &&
                         Contains("waited for all 2 nodes to finish attempt 0\n"));
}
