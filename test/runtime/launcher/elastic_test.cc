// The elastic rendezvous (--rdzv-backend c10d): node ranks on arrival, a
// round that closes at MAX nodes or after the last call, a new round when a
// node joins or dies, and the job going on at the new world size. The main
// case runs blip_train on three "hosts" (network namespaces on one bridge):
// one is SIGKILLed mid-training, the other two go on at world size 2 from
// the last checkpoint, then it comes back and the job ends at world size 3.
// The job script is examples/resume_latest.sh, so the example is tested too.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <regex>
#include <set>
#include <thread>

#include "collie/base/str_cat.h"
#include "collie/test/runtime/launcher/launcher_harness.h"
#include "collie/test/support/child.h"
#include "collie/test/support/netns_lan.h"
#include "collie/test/support/netns_pair.h"
#include "collie/test/support/skip.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

TEST_CASE("elastic: a node killed mid-training, the job goes on at world size 2, then 3 again",
          "[launcher][elastic][netns]") {
  require_or_skip(::access((std::string(COLLIE_BIN_DIR) + "/blip_train").c_str(), X_OK) == 0,
                  "blip_train is not built (COLLIE_BUILD_SAMPLES=OFF?)");
  auto lan = namespaces_or_skip<NetnsLan>("e", "10.231.11", 3);
  TempDir dir;
  const int epochs = 14;
  // The job script resumes from the newest checkpoint, as a torchrun
  // user's does: the example's (examples/resume_latest.sh).
  const std::string script = std::string(COLLIE_SOURCE_DIR) + "/examples/resume_latest.sh";
  const std::string out = dir.file("run");
  const std::string log = out + "/log.txt";
  // The port is fixed, but inside namespaces made for this test nothing else
  // can hold it.
  const std::vector<std::string> flags{
      "--rdzv-backend",  "c10d",
      "--rdzv-endpoint", lan->addrs[0] + ":29400",
      "--rdzv-id",       "elastic",
      "--nnodes",        "2:3",
      "--max-restarts",  "3",
      "--rdzv-timeout",  "60s",
      "--rdzv-conf",     "last_call_timeout=1s,keep_alive_interval=1s",
      "--grace-period",  "2s"};
  const std::vector<std::string> train{script,
                                       out,
                                       std::string(COLLIE_BIN_DIR) + "/blip_train",
                                       "--synthetic",
                                       "--synthetic-size",
                                       "6144",
                                       "--epochs",
                                       std::to_string(epochs),
                                       "--batch-size",
                                       "32",
                                       "--hidden",
                                       "64",
                                       "--print-freq",
                                       "100000"};
  auto launch = [&](int host) {
    std::vector<std::string> argv = lan->exec_in(host);
    argv.push_back(collie_run_path());
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), train.begin(), train.end());
    return Subprocess::spawn(argv, {.env = clean_launch_env(), .new_process_group = true});
  };
  auto a = launch(0), b = launch(1);
  auto c = launch(2);

  // World size 3 trains at least one epoch; then host 2 dies with its workers.
  wait_for_epoch_at(log, 3, 0, kLaunchTimeout, {&a, &b, &c});
  c.kill(SIGKILL);
  c.wait(kLaunchTimeout);
  const size_t before = epochs_in_log(log).size();
  // The two survivors go on at world size 2 from the last checkpoint ...
  wait_for_epoch_at(log, 2, before, kLaunchTimeout, {&a, &b});
  // ... until host 2 comes back: world size 3 again.
  c = launch(2);
  auto sa = a.wait(kLaunchTimeout), sb = b.wait(kLaunchTimeout), sc = c.wait(kLaunchTimeout);
  INFO("--- host 0 ---\n"
       << a.err() << "\n--- host 1 ---\n"
       << b.err() << "\n--- host 2 ---\n"
       << c.err());
  CHECK(sa.ok());
  CHECK(sb.ok());
  CHECK(sc.ok());

  const auto seen = epochs_in_log(log);
  std::string text;
  for (const auto& [e, w] : seen) text += str_cat(" ", e, "@", w);
  INFO("epochs@world:" << text);
  REQUIRE(!seen.empty());
  // Runs of world sizes: 3, then 2, then 3; never back to epoch 0, and every
  // epoch trained (a restart repeats at most the epoch it interrupted).
  CHECK(world_size_runs(seen) == std::vector<int>{3, 2, 3});
  std::set<int> trained;
  for (size_t i = 0; i < seen.size(); ++i) {
    trained.insert(seen[i].first);
    if (i > 0) CHECK(seen[i].first >= seen[i - 1].first);
  }
  CHECK(trained.size() == static_cast<size_t>(epochs));
  CHECK(seen.back().first == epochs - 1);
  // The launchers say what happened: host 0 hosts the store, and the
  // survivors' new round has world size 2, the last one 3.
  CHECK_THAT(a.err(), Contains("rendezvous store listening on " + lan->addrs[0] + ":29400"));
  CHECK_THAT(a.err(), Contains("of world size 2"));
  // Whichever survivor saw the newcomer first says so.
  CHECK_THAT(a.err() + b.err(), Contains("waiting to join"));
  CHECK_THAT(c.err(), Contains("of world size 3"));
}

namespace {

std::vector<std::string> elastic_flags(uint16_t port, const std::string& nnodes,
                                       std::vector<std::string> more = {},
                                       const std::string& timeout = "30s",
                                       const std::string& last_call = "0") {
  std::vector<std::string> f{
      "--rdzv-backend",  "c10d",
      "--rdzv-endpoint", str_cat("127.0.0.1:", port),
      "--rdzv-id",       "loop",
      "--nnodes",        nnodes,
      "--rdzv-conf",     str_cat("last_call_timeout=", last_call, ",keep_alive_interval=1s"),
      "--rdzv-timeout",  timeout,
      "--grace-period",  "2s"};
  f.insert(f.end(), more.begin(), more.end());
  return f;
}

}  // namespace

TEST_CASE("elastic on loopback: the first launcher hosts the store and a newcomer starts a round",
          "[launcher][elastic]") {
  // A alone makes round 0 (--nnodes 1:2, after a 3 s last call); B's
  // arrival ends it, and round 1 runs both at world size 2,
  // TORCHELASTIC_RESTART_COUNT 1. The last call is what keeps B, which
  // waits at round 1's door, from starting it alone (min 1 reached) before
  // A has stopped its workers and rejoined; at max (2) it closes at once.
  const uint16_t port = probe_free_port();
  auto a = start_launcher(elastic_flags(port, "1:2", {}, "30s", "3s"), "elastic_child", {"2"});
  wait_for_stderr(a, "round 0 of run 'loop': node 0 of 1");
  auto b = start_launcher(elastic_flags(port, "1:2", {}, "30s", "3s"), "elastic_child", {"2"});
  auto sb = b.wait(kLaunchTimeout), sa = a.wait(kLaunchTimeout);
  INFO("--- a ---\n" << a.err() << a.out() << "\n--- b ---\n" << b.err() << b.out());
  CHECK(sa.ok());
  CHECK(sb.ok());
  CHECK_THAT(a.err(), Contains(str_cat("rendezvous store listening on 127.0.0.1:", port)));
  CHECK_THAT(b.err(), !Contains("rendezvous store listening"));
  CHECK_THAT(a.out(), Contains("[rank0]: elastic rank 0 of 1 node 0/1 restart 0"));
  CHECK_THAT(a.err(), Contains("round 0 ends: 1 launcher is waiting to join run 'loop'"));
  // Round 1: ranks by arrival, B first (it was waiting), then A.
  CHECK_THAT(b.out(), Contains("elastic rank 0 of 2 node 0/2 restart 1"));
  CHECK_THAT(a.out(), Contains("elastic rank 1 of 2 node 1/2 restart 1"));
  CHECK_THAT(a.err() + b.err(), !Contains("failed"));
}

TEST_CASE("elastic on loopback: a failure ends the round everywhere and uses up a restart",
          "[launcher][elastic][failure]") {
  const uint16_t port = probe_free_port();
  // Global rank 1 exits 3 on round 0; round 1 (both launchers again) succeeds.
  auto a = start_launcher(elastic_flags(port, "2", {"--max-restarts", "1"}), "elastic_child",
                          {"2", "1"});
  auto b = start_launcher(elastic_flags(port, "2", {"--max-restarts", "1"}), "elastic_child",
                          {"2", "1"});
  auto sa = a.wait(kLaunchTimeout), sb = b.wait(kLaunchTimeout);
  INFO("--- a ---\n" << a.err() << a.out() << "\n--- b ---\n" << b.err() << b.out());
  CHECK(sa.ok());
  CHECK(sb.ok());
  CHECK_THAT(a.err() + b.err(), Contains("round 0 failed (rank 1 (local rank 0 on node 1"));
  CHECK_THAT(a.err() + b.err(), Contains("rendezvous again, restart 1 of 1"));
  CHECK_THAT(a.out() + b.out(), Contains("elastic rank 1 of 2 node 1/2 restart 1"));

  // Without restarts left the job fails on both.
  const uint16_t port2 = probe_free_port();
  auto c = start_launcher(elastic_flags(port2, "2"), "elastic_child", {"2", "1", "always"});
  auto d = start_launcher(elastic_flags(port2, "2"), "elastic_child", {"2", "1", "always"});
  CHECK(c.wait(kLaunchTimeout).exit_code == 1);
  CHECK(d.wait(kLaunchTimeout).exit_code == 1);
  CHECK_THAT(c.err() + d.err(), Contains("job failed after 1 failed round (--max-restarts 0)"));
}

TEST_CASE("elastic: too few launchers, mismatched flags and bad flags are refused by name",
          "[launcher][elastic][failure]") {
  const uint16_t port = probe_free_port();
  auto alone = start_launcher(elastic_flags(port, "2:3", {}, "1s"), "env_dump");
  CHECK(alone.wait(kLaunchTimeout).exit_code == 1);
  CHECK_THAT(alone.err(), Contains("for round 0 of run 'loop' to gather --nnodes 2:3, but only 1 "
                                   "launcher joined"));

  const uint16_t port2 = probe_free_port();
  auto first = start_launcher(elastic_flags(port2, "2:3"), "env_dump");
  wait_for_stderr(first, "rendezvous store listening");
  auto other = start_launcher(elastic_flags(port2, "2:4"), "env_dump");
  CHECK(other.wait(kLaunchTimeout).exit_code == 2);
  CHECK_THAT(other.err(), Contains("was started with nnodes=2:4 max_restarts=0 but another "
                                   "launcher of run 'loop' with nnodes=2:3 max_restarts=0"));
  first.kill(SIGINT);
  CHECK(first.wait(kLaunchTimeout).exit_code == 130);
}

TEST_CASE("elastic launchers that spell the endpoint differently are told why they are refused",
          "[launcher][elastic]") {
  // The job secret is derived from the endpoint as spelled: 127.0.0.1:P
  // and localhost:P derive different ones. The second launcher is refused
  // at once, and its error says so instead of quoting a wait it never did.
  const uint16_t port = probe_free_port();
  auto a = start_launcher(elastic_flags(port, "2", {}, "20s"), "elastic_child", {"2"});
  wait_for_stderr(a, "rendezvous store listening");
  auto other = elastic_flags(port, "2", {}, "20s");
  for (auto& f : other)
    if (f == str_cat("127.0.0.1:", port)) f = str_cat("localhost:", port);
  auto b = start_launcher(other, "elastic_child", {"2"});
  const auto sb = b.wait(kLaunchTimeout);
  INFO("--- b ---\n" << b.err());
  CHECK(sb.exit_code != 0);
  CHECK_THAT(b.err(), Contains(str_cat("derived from --rdzv-endpoint localhost:", port)) &&
                          Contains("spell --rdzv-endpoint and --rdzv-id exactly alike") &&
                          Contains("refused after") && !Contains("within 20"));
  a.kill(SIGTERM);
  a.wait(kLaunchTimeout);
}
