// collie-run under cluster schedulers, with the environment each one sets:
// `srun --ntasks-per-node=1 collie-run` (SLURM's step variables), Kubeflow's
// PET_* variables, and a master address whose DNS name resolves only after
// the launcher started (a Kubernetes pod that is not running yet), inside a
// network namespace whose /etc/hosts the test controls.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "collie/base/str_cat.h"
#include "collie/rendezvous/env/shared_secret.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/test/runtime/launcher/launcher_harness.h"
#include "collie/test/support/netns_pair.h"
#include "collie/test/support/skip.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

using EnvOverrides = std::map<std::string, std::optional<std::string>>;

EnvOverrides srun_env(int node, const std::string& job, uint16_t port) {
  return {{"SLURM_JOB_ID", job},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_STEP_NUM_TASKS", "2"},
          {"SLURM_NODEID", std::to_string(node)},
          {"SLURM_PROCID", std::to_string(node)},
          {"SLURM_STEP_NODELIST", "localhost,localhost"},
          {"SLURM_JOB_NODELIST", "localhost"},
          {"MASTER_PORT", std::to_string(port)}};
}

}  // namespace

TEST_CASE("srun collie-run: node rank, node count, store address and run id come from SLURM",
          "[launcher][cluster][slurm]") {
  // What srun gives each of two tasks, one per node; only the port is set
  // (as a job script may), since a port derived from the job id could be in
  // use on a shared machine.
  const uint16_t port = probe_free_port();
  auto node0 = start_launcher({"--nproc-per-node", "2"}, "env_dump", {}, srun_env(0, "4242", port));
  auto node1 = start_launcher({"--nproc-per-node", "2"}, "env_dump", {}, srun_env(1, "4242", port));
  auto s1 = node1.wait(kLaunchTimeout), s0 = node0.wait(kLaunchTimeout);
  INFO(node0.err() << "\n--- node 1 ---\n" << node1.err());
  REQUIRE(s0.ok());
  REQUIRE(s1.ok());
  CHECK_THAT(node0.err(),
             Contains(str_cat("agent store listening on 0.0.0.0:", port, " (node 0 of 2")) &&
                 Contains("workers reach it at localhost)"));
  CHECK(lines_with_prefix(node1.out(), "[rank3]: GROUP_RANK=1").size() == 1);
  CHECK(lines_with_prefix(node1.out(), "[rank3]: WORLD_SIZE=4").size() == 1);
  CHECK(lines_with_prefix(node1.out(), "[rank2]: MASTER_ADDR=localhost").size() == 1);
  CHECK(lines_with_prefix(node0.out(), "[rank0]: TORCHELASTIC_RUN_ID=4242").size() == 1);

  // Flags still win over SLURM's values.
  auto flagged = start_launcher({"--nnodes", "1", "--node-rank", "0", "--master-port", "0"},
                                "env_dump", {}, srun_env(1, "4243", port));
  INFO(flagged.err());
  CHECK(flagged.wait(kLaunchTimeout).ok());
  CHECK(lines_with_prefix(flagged.out(), "[rank0]: WORLD_SIZE=1").size() == 1);

  // One srun task per core would be one launcher per core: refused.
  auto env = srun_env(0, "4244", port);
  env["SLURM_STEP_NUM_TASKS"] = "16";
  auto many = start_launcher({}, "env_dump", {}, env);
  CHECK(many.wait(kLaunchTimeout).exit_code == 2);
  CHECK_THAT(many.err(), Contains("srun --ntasks-per-node=1"));
}

TEST_CASE("Kubeflow's PET_* variables place collie-run like torchrun",
          "[launcher][cluster][kubernetes]") {
  const uint16_t port = probe_free_port();
  auto pet = [&](int node) {
    return EnvOverrides{{"PET_NNODES", "2"},
                        {"PET_NODE_RANK", std::to_string(node)},
                        {"PET_NPROC_PER_NODE", "1"},
                        {"PET_MASTER_ADDR", "127.0.0.1"},
                        {"PET_MASTER_PORT", std::to_string(port)}};
  };
  auto node0 = start_launcher({}, "env_dump", {}, pet(0));
  auto node1 = start_launcher({}, "env_dump", {}, pet(1));
  auto s1 = node1.wait(kLaunchTimeout), s0 = node0.wait(kLaunchTimeout);
  INFO(node0.err() << "\n--- node 1 ---\n" << node1.err());
  REQUIRE(s0.ok());
  REQUIRE(s1.ok());
  CHECK(lines_with_prefix(node1.out(), "[rank1]: WORLD_SIZE=2").size() == 1);
  CHECK(lines_with_prefix(node1.out(), str_cat("[rank1]: MASTER_PORT=", port)).size() == 1);
}

TEST_CASE("a master address that resolves only later is waited for, then the job runs",
          "[launcher][cluster][kubernetes][netns]") {
  // `ip netns exec` mounts /etc/netns/<ns>/hosts over /etc/hosts: the test
  // makes the name "job-master-0" appear there while node 1 waits for it,
  // as a pod's DNS name appears once the pod runs.
  auto pair = namespaces_or_skip<NetnsPair>("k", "10.231.12");
  const NetnsPair& ns = *pair;
  const std::string etc = "/etc/netns/" + ns.b;
  std::filesystem::create_directories(etc);
  struct RemoveEtc {
    std::string path;
    ~RemoveEtc() { std::filesystem::remove_all(path); }
  } remove_etc{etc};
  { std::ofstream(etc + "/hosts") << "127.0.0.1 localhost\n"; }
  // The master "pod" itself knows its name from the start.
  const std::string etc_a = "/etc/netns/" + ns.a;
  std::filesystem::create_directories(etc_a);
  RemoveEtc remove_etc_a{etc_a};
  { std::ofstream(etc_a + "/hosts") << "127.0.0.1 localhost\n" << ns.addr_a << " job-master-0\n"; }

  auto node1 =
      start_launcher_in(ns.exec_in(ns.b),
                        {"--nnodes", "2", "--node-rank", "1", "--master-addr", "job-master-0",
                         "--master-port", "29500", "--rdzv-timeout", "30s"},
                        "env_dump");
  wait_for_stderr(node1, "waiting for 'job-master-0' to resolve");
  // The "pod" comes up: node 0 in namespace a, and its name in b's hosts.
  // Every node is given the same --master-addr (from which, with the run
  // id, the job secret is derived).
  auto node0 =
      start_launcher_in(ns.exec_in(ns.a),
                        {"--nnodes", "2", "--node-rank", "0", "--master-addr", "job-master-0",
                         "--master-port", "29500", "--rdzv-timeout", "30s"},
                        "env_dump");
  wait_for_stderr(node0, "agent store listening");
  { std::ofstream(etc + "/hosts", std::ios::app) << ns.addr_a << " job-master-0\n"; }
  auto s1 = node1.wait(kLaunchTimeout), s0 = node0.wait(kLaunchTimeout);
  INFO(node0.err() << "\n--- node 1 ---\n" << node1.err());
  CHECK(s0.ok());
  CHECK(s1.ok());
  CHECK(lines_with_prefix(node1.out(), "[rank1]: MASTER_ADDR=job-master-0").size() == 1);

  // A name that never comes: the error says what was awaited and for how long.
  auto never = start_launcher_in(ns.exec_in(ns.b),
                                 {"--nnodes", "2", "--node-rank", "1", "--master-addr",
                                  "job-master-9", "--rdzv-timeout", "1s"},
                                 "env_dump");
  CHECK(never.wait(kLaunchTimeout).exit_code == 1);
  CHECK_THAT(never.err(), Contains("the address 'job-master-9' did not resolve after"));
  CHECK_THAT(never.err(), Contains("a pod's DNS name exists only once the pod runs"));
}

TEST_CASE("a multi-node job is authenticated by default: strangers are refused",
          "[launcher][cluster][security]") {
  // No COLLIE_JOB_SECRET anywhere: both launchers derive the same secret
  // from --master-addr and --run-id, and a client without it is refused.
  auto node0 = start_launcher(
      {"--nnodes", "2", "--node-rank", "0", "--master-port", "0", "--run-id", "authjob"},
      "env_dump", {}, {{"COLLIE_JOB_SECRET", std::nullopt}});
  const std::string err0 = wait_for_stderr(node0, "agent store listening");
  CHECK_THAT(err0,
             Contains("job secret derived from --master-addr 127.0.0.1 and --run-id authjob"));
  const uint16_t port = agent_store_port(err0);
  TcpStoreOptions stranger;
  stranger.timeout = std::chrono::seconds(2);
  stranger.secret = JobSecret();  // none
  CHECK_THROWS(TcpStore::connect("127.0.0.1", port, stranger)->get("anything"));
  TcpStoreOptions other_job = stranger;
  other_job.secret = derive_job_secret("static", {"127.0.0.1", "otherjob"});
  CHECK_THROWS(TcpStore::connect("127.0.0.1", port, other_job)->get("anything"));

  // A node given another spelling of the master's address derives another
  // secret, and the error says which values must match.
  auto mismatch = start_launcher(
      {"--nnodes", "2", "--node-rank", "1", "--master-addr", "localhost", "--master-port",
       std::to_string(port), "--run-id", "authjob", "--rdzv-timeout", "3s"},
      "env_dump", {}, {{"COLLIE_JOB_SECRET", std::nullopt}});
  CHECK(mismatch.wait(kLaunchTimeout).exit_code == 1);
  CHECK_THAT(mismatch.err(), Contains("this node's job secret was derived from --master-addr "
                                      "localhost and --run-id authjob: every node must be given "
                                      "the same values"));

  auto node1 = start_launcher({"--nnodes", "2", "--node-rank", "1", "--master-port",
                               std::to_string(port), "--run-id", "authjob"},
                              "env_dump", {}, {{"COLLIE_JOB_SECRET", std::nullopt}});
  auto s1 = node1.wait(kLaunchTimeout), s0 = node0.wait(kLaunchTimeout);
  INFO(node0.err() << "\n--- node 1 ---\n" << node1.err());
  CHECK(s0.ok());
  CHECK(s1.ok());
}
