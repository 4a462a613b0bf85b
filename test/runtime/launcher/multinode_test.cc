// The agent store and multi-node jobs: workers rendezvous through node 0's
// store under torchrun's per-attempt prefix (and a restart starts on fresh
// keys), two launchers on loopback form one job, a failure on one node stops
// the other, a launcher that cannot reach node 0 says where it looked, and
// two network namespaces joined by a veth pair run one job over addresses that
// exist only inside them.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <thread>

#include "collie/base/str_cat.h"
#include "collie/test/runtime/launcher/launcher_harness.h"
#include "collie/test/support/netns_pair.h"
#include "collie/test/support/skip.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

TEST_CASE("workers rendezvous and all_reduce through the agent store", "[launcher][store]") {
  auto p =
      start_launcher({"--standalone", "--nproc-per-node", "3"}, "store_rdv", {"-1", "allreduce"});
  auto st = p.wait(kLaunchTimeout);
  INFO(p.err());
  REQUIRE(st.ok());
  for (int r = 0; r < 3; ++r) {
    CHECK(lines_with_prefix(p.out(), str_cat("[rank", r, "]: rdv ok rank ", r, " of 3 local ", r,
                                             " attempt 0 via agent store"))
              .size() == 1);
    CHECK(lines_with_prefix(p.out(), str_cat("[rank", r, "]: allreduce ok rank ", r, " sum 6"))
              .size() == 1);
  }
}

TEST_CASE("a restarted attempt rendezvous on fresh keys under /worker/attempt_1",
          "[launcher][store][restart]") {
  // Rank 1 fails after attempt 0's rendezvous; attempt 1 must not see
  // attempt 0's 'joined' counter or addresses (store_rdv checks the counter
  // stays within the world size and that the raw key carries the prefix).
  auto p = start_launcher({"--standalone", "--nproc-per-node", "2", "--max-restarts", "1"},
                          "store_rdv", {"1"});
  auto st = p.wait(kLaunchTimeout);
  INFO(p.err());
  REQUIRE(st.ok());
  CHECK(lines_with_prefix(p.out(), "[rank0]: rdv ok rank 0 of 2 local 0 attempt 0").size() == 1);
  CHECK(lines_with_prefix(p.out(), "[rank0]: rdv ok rank 0 of 2 local 0 attempt 1").size() == 1);
  CHECK(lines_with_prefix(p.out(), "[rank1]: rdv ok rank 1 of 2 local 1 attempt 1").size() == 1);
}

TEST_CASE("two launchers on loopback form one job with global ranks", "[launcher][multinode]") {
  auto node0 = start_launcher({"--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1",
                               "--master-port", "0", "--nproc-per-node", "2", "--run-id", "mn"},
                              "store_rdv", {"-1", "allreduce"});
  uint16_t port = agent_store_port(wait_for_stderr(node0, "agent store listening"));
  auto node1 = start_launcher(
      {"--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port",
       std::to_string(port), "--nproc-per-node", "2", "--run-id", "mn"},
      "store_rdv", {"-1", "allreduce"});
  auto s1 = node1.wait(kLaunchTimeout);
  auto s0 = node0.wait(kLaunchTimeout);
  INFO(node0.err() << "\n--- node 1 ---\n" << node1.err());
  REQUIRE(s0.ok());
  REQUIRE(s1.ok());
  // global rank = node_rank * nproc + local rank
  CHECK(lines_with_prefix(node0.out(), "[rank1]: rdv ok rank 1 of 4 local 1").size() == 1);
  CHECK(lines_with_prefix(node1.out(), "[rank2]: rdv ok rank 2 of 4 local 0").size() == 1);
  CHECK(lines_with_prefix(node1.out(), "[rank3]: rdv ok rank 3 of 4 local 1").size() == 1);
  CHECK(lines_with_prefix(node1.out(), "[rank3]: allreduce ok rank 3 sum 10").size() == 1);
}

TEST_CASE("nodes with different worker counts get torchrun's prefix-sum ranks",
          "[launcher][multinode]") {
  auto node0 =
      start_launcher({"--nnodes", "2", "--node-rank", "0", "--master-port", "0"}, "env_dump");
  uint16_t port = agent_store_port(wait_for_stderr(node0, "agent store listening"));
  auto node1 = start_launcher({"--nnodes", "2", "--node-rank", "1", "--master-port",
                               std::to_string(port), "--nproc-per-node", "2"},
                              "env_dump");
  REQUIRE(node1.wait(kLaunchTimeout).ok());
  REQUIRE(node0.wait(kLaunchTimeout).ok());
  CHECK(lines_with_prefix(node0.out(), "[rank0]: WORLD_SIZE=3").size() == 1);
  CHECK(lines_with_prefix(node1.out(), "[rank1]: LOCAL_RANK=0").size() == 1);
  CHECK(lines_with_prefix(node1.out(), "[rank2]: LOCAL_RANK=1").size() == 1);
  CHECK(lines_with_prefix(node1.out(), "[rank2]: GROUP_RANK=1").size() == 1);
  CHECK(lines_with_prefix(node1.out(), "[rank2]: LOCAL_WORLD_SIZE=2").size() == 1);
}

TEST_CASE("a second launcher with the same node rank, or other flags, is refused",
          "[launcher][multinode][failure]") {
  auto node0 = start_launcher(
      {"--nnodes", "3", "--node-rank", "0", "--master-port", "0", "--rdzv-timeout", "20s"},
      "env_dump");
  uint16_t port = agent_store_port(wait_for_stderr(node0, "agent store listening"));
  std::vector<std::string> as_node1{
      "--nnodes",       "3",  "--node-rank", "1", "--master-port", std::to_string(port),
      "--rdzv-timeout", "20s"};
  auto first = start_launcher(as_node1, "env_dump");
  auto second = start_launcher(as_node1, "env_dump");
  // One of the two claims node rank 1 first; the other is refused at once.
  Deadline deadline(kLaunchTimeout);
  while (first.running() && second.running() && !deadline.expired())
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  Subprocess& refused = first.running() ? second : first;
  CHECK(refused.wait(kLaunchTimeout).exit_code == 2);
  CHECK_THAT(refused.err(),
             Contains("another launcher already joined run 'none' as --node-rank 1"));

  auto other = start_launcher(
      {"--nnodes", "2", "--node-rank", "1", "--master-port", std::to_string(port)}, "env_dump");
  CHECK(other.wait(kLaunchTimeout).exit_code == 2);
  CHECK_THAT(other.err(),
             Contains("node 1 was started with nnodes=2 max_restarts=0 but another node with "
                      "nnodes=3 max_restarts=0"));
}

TEST_CASE("a failure on node 1 stops node 0's workers too", "[launcher][multinode][failure]") {
  TempDir pids;
  // Rank 3 (node 1) exits 3 once all four workers are up.
  auto node0 = start_launcher(
      {"--nnodes", "2", "--node-rank", "0", "--master-port", "0", "--nproc-per-node", "2"}, "fail",
      {pids.path(), "3", "exit3", "wait"});
  uint16_t port = agent_store_port(wait_for_stderr(node0, "agent store listening"));
  auto node1 = start_launcher({"--nnodes", "2", "--node-rank", "1", "--master-port",
                               std::to_string(port), "--nproc-per-node", "2"},
                              "fail", {pids.path(), "3", "exit3", "wait"});
  auto s1 = node1.wait(kLaunchTimeout);
  auto s0 = node0.wait(kLaunchTimeout);
  INFO(node0.err() << "\n--- node 1 ---\n" << node1.err());
  CHECK(s0.exit_code == 1);
  CHECK(s1.exit_code == 1);
  CHECK_THAT(node1.err(), Contains("root cause: rank 3 (local rank 1"));
  CHECK_THAT(node0.err(), Contains("cause: another node failed: rank 3 (local rank 1 on node 1"));
  for (pid_t pid : wait_for_pid_files(pids.path(), 4)) CHECK_FALSE(process_alive(pid));
}

TEST_CASE("losing node 0 stops the workers on node 1", "[launcher][multinode][failure]") {
  TempDir pids;
  auto node0 = start_launcher({"--nnodes", "2", "--node-rank", "0", "--master-port", "0"}, "fail",
                              {pids.path(), "-1", "none", "wait"});
  uint16_t port = agent_store_port(wait_for_stderr(node0, "agent store listening"));
  auto node1 =
      start_launcher({"--nnodes", "2", "--node-rank", "1", "--master-port", std::to_string(port)},
                     "fail", {pids.path(), "-1", "none", "wait"});
  auto workers = wait_for_pid_files(pids.path(), 2);
  node0.kill(SIGKILL);  // the store goes with it
  auto st = node1.wait(kLaunchTimeout);
  INFO(node1.err());
  CHECK(st.exit_code == 1);
  CHECK_THAT(node1.err(), Contains("lost contact with the agent store"));
  CHECK(wait_until_dead(workers, std::chrono::seconds(10)).empty());
}

TEST_CASE("a failure on one node restarts the group on every node",
          "[launcher][multinode][restart]") {
  // Rank 3 (node 1) fails on attempt 0 only; both nodes run attempt 1.
  auto node0 = start_launcher({"--nnodes", "2", "--node-rank", "0", "--master-port", "0",
                               "--nproc-per-node", "2", "--max-restarts", "1"},
                              "flaky", {"3"});
  uint16_t port = agent_store_port(wait_for_stderr(node0, "agent store listening"));
  auto node1 =
      start_launcher({"--nnodes", "2", "--node-rank", "1", "--master-port", std::to_string(port),
                      "--nproc-per-node", "2", "--max-restarts", "1"},
                     "flaky", {"3"});
  auto s1 = node1.wait(kLaunchTimeout);
  auto s0 = node0.wait(kLaunchTimeout);
  INFO(node0.err() << "\n--- node 1 ---\n" << node1.err());
  CHECK(s0.ok());
  CHECK(s1.ok());
  CHECK_THAT(node0.err(), Contains("restarting the group, restart 1 of 1"));
  CHECK_THAT(node1.err(), Contains("restarting the group, restart 1 of 1"));
  CHECK(lines_with_prefix(node0.out(), "[rank0]: restart_count=1").size() == 1);
  CHECK(lines_with_prefix(node1.out(), "[rank3]: restart_count=1").size() == 1);
}

TEST_CASE("a launcher that cannot reach node 0 fails naming the address",
          "[launcher][multinode][failure]") {
  uint16_t port = probe_free_port();  // nothing listens there
  auto p = start_launcher({"--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1",
                           "--master-port", std::to_string(port), "--rdzv-timeout", "1s"},
                          "env_dump");
  auto st = p.wait(kLaunchTimeout);
  CHECK(st.exit_code == 1);
  CHECK_THAT(p.err(),
             Contains(str_cat("could not reach the agent store of node 0 at 127.0.0.1:", port)));
  CHECK(lines_with_prefix(p.out(), "[rank").empty());
}

TEST_CASE("node 0 waits for the other nodes under the rendezvous timeout",
          "[launcher][multinode][failure]") {
  auto p = start_launcher(
      {"--nnodes", "2", "--node-rank", "0", "--master-port", "0", "--rdzv-timeout", "500ms"},
      "env_dump");
  auto st = p.wait(kLaunchTimeout);
  CHECK(st.exit_code == 1);
  CHECK_THAT(p.err(),
             Contains("for all 2 nodes to join the job, but only 1 did; missing node ranks: 1"));

  // Ctrl-C while waiting ends the wait at once.
  auto q = start_launcher({"--nnodes", "2", "--node-rank", "0", "--master-port", "0"}, "env_dump");
  wait_for_stderr(q, "agent store listening");
  q.kill(SIGINT);
  CHECK(q.wait(std::chrono::seconds(10)).exit_code == 130);
  CHECK_THAT(q.err(),
             Contains("node 0 was interrupted while waiting for all 2 nodes to join the job"));
}

TEST_CASE("two network namespaces joined by a veth pair run one job",
          "[launcher][multinode][netns]") {
  auto pair = namespaces_or_skip<NetnsPair>("v", "10.231.7");
  const NetnsPair& ns = *pair;
  // addr_a (10.231.7.1) exists only inside namespace a: node 1 reaches node 0 over the veth.
  auto node0 =
      start_launcher_in(ns.exec_in(ns.a),
                        {"--nnodes", "2", "--node-rank", "0", "--master-addr", ns.addr_a,
                         "--master-port", "0", "--nproc-per-node", "2", "--rdzv-timeout", "30s"},
                        "store_rdv", {"-1", "allreduce"});
  uint16_t port = agent_store_port(wait_for_stderr(node0, "agent store listening"));
  auto node1 = start_launcher_in(
      ns.exec_in(ns.b),
      {"--nnodes", "2", "--node-rank", "1", "--master-addr", ns.addr_a, "--master-port",
       std::to_string(port), "--nproc-per-node", "2", "--rdzv-timeout", "30s"},
      "store_rdv", {"-1", "allreduce"});
  auto s1 = node1.wait(kLaunchTimeout);
  auto s0 = node0.wait(kLaunchTimeout);
  INFO(node0.err() << "\n--- node 1 ---\n" << node1.err() << node1.out());
  REQUIRE(s0.ok());
  REQUIRE(s1.ok());
  CHECK(lines_with_prefix(node1.out(), "[rank3]: rdv ok rank 3 of 4 local 1").size() == 1);
  CHECK(lines_with_prefix(node1.out(), "[rank2]: allreduce ok rank 2 sum 10").size() == 1);
  // The address really is private to namespace a.
  CHECK(shell("ip -o addr show").second.find(ns.addr_a) == std::string::npos);
}
