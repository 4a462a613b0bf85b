// The cluster schedulers' environment contract: SLURM's compressed node
// lists (odd cases included), srun's variables as collie-run and as
// programs started directly see them, the port derived from the job id, and
// the wait for a DNS name that does not resolve yet (Kubernetes).
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "collie/base/error.h"
#include "collie/rendezvous/env/cluster_env.h"
#include "collie/rendezvous/env/launch_env.h"
#include "collie/rendezvous/env/slurm_nodelist.h"
#include "collie/test/support/env_table.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

using Env = EnvTable;
using Hosts = std::vector<std::string>;

}  // namespace

TEST_CASE("SLURM node lists expand like scontrol show hostnames", "[cluster][slurm]") {
  CHECK(expand_nodelist("node[001-004,007],gpu-[1-2]") ==
        Hosts{"node001", "node002", "node003", "node004", "node007", "gpu-1", "gpu-2"});
  CHECK(expand_nodelist("host") == Hosts{"host"});
  CHECK(expand_nodelist("a,b,c") == Hosts{"a", "b", "c"});
  // Width comes from the bound as written: zero-padded or not.
  CHECK(expand_nodelist("h[08-11]") == Hosts{"h08", "h09", "h10", "h11"});
  CHECK(expand_nodelist("h[8-11]") == Hosts{"h8", "h9", "h10", "h11"});
  CHECK(expand_nodelist("h[098-101]") == Hosts{"h098", "h099", "h100", "h101"});
  // Single numbers, a one-element range, suffixes and several groups (the
  // last one varies fastest).
  CHECK(expand_nodelist("h[3]") == Hosts{"h3"});
  CHECK(expand_nodelist("h[5-5]x") == Hosts{"h5x"});
  CHECK(expand_nodelist("rack[1-2]-n[8-9]") ==
        Hosts{"rack1-n8", "rack1-n9", "rack2-n8", "rack2-n9"});
  CHECK(expand_nodelist("[1-2]") == Hosts{"1", "2"});
  CHECK(expand_nodelist("n[1,3-4],m") == Hosts{"n1", "n3", "n4", "m"});
  CHECK(expand_nodelist("a-b.c[1-2].d") == Hosts{"a-b.c1.d", "a-b.c2.d"});

  CHECK(first_host("node[001-004,007],gpu-[1-2]") == "node001");
  CHECK(first_host("gpu-[10-12],node1") == "gpu-10");
  CHECK(first_host("r[7-9]n[2-3]") == "r7n2");
  // Huge lists are counted without being expanded.
  CHECK(first_host("n[0000000-9999999]") == "n0000000");
  CHECK(count_hosts("n[0000000-9999999],m[1-2]") == 10000002);
  CHECK_THROWS_WITH(expand_nodelist("n[1-999999999]"),
                    Contains("names 999999999 hosts, more than the"));

  for (const char* bad : {"", "h[", "h[1-", "h]", "h[2-1]", "h[a-b]", "h[]", "h[1,,2]", "h[1-2",
                          ",h", "h,", "h,,g", "h[[1]]", "h[-1]", "h[1-]"}) {
    INFO("'" << bad << "'");
    CHECK_THROWS_AS(expand_nodelist(bad), InvalidArgument);
    CHECK_THROWS_WITH(expand_nodelist(bad),
                      Contains("SLURM node list '") && Contains("is malformed at position"));
  }
}

TEST_CASE("srun collie-run: one launcher per node finds node 0 and the port", "[cluster][slurm]") {
  Env env{{"SLURM_JOB_ID", "123456"},
          {"SLURM_STEP_NUM_NODES", "4"},
          {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_NODEID", "2"},
          {"SLURM_STEP_NODELIST", "gpu[07-10]"},
          {"SLURM_JOB_NODELIST", "gpu[01-10]"}};
  SlurmPlacement p = slurm_placement(env_table(env));
  CHECK(p.active);
  CHECK(p.nnodes == 4);
  CHECK(p.node_rank == 2);
  CHECK(p.master_addr == "gpu07");  // the step's first node, not the job's
  CHECK(p.master_port == 10000 + 123456 % 20000);
  CHECK(p.job_id == "123456");
  env["MASTER_PORT"] = "29511";
  CHECK(slurm_placement(env_table(env)).master_port == 29511);
  env.erase("SLURM_STEP_NODELIST");
  CHECK(slurm_placement(env_table(env)).master_addr == "gpu01");

  // Not inside an srun step (the batch script itself): nothing applies.
  CHECK_FALSE(slurm_placement(env_table({{"SLURM_JOB_ID", "5"}, {"SLURM_NODEID", "0"}})).active);
  CHECK_FALSE(slurm_placement(env_table({})).active);

  // Several tasks per node would be several launchers per node.
  env["SLURM_STEP_NUM_TASKS"] = "32";
  CHECK_THROWS_WITH(slurm_placement(env_table(env)),
                    Contains("SLURM_STEP_NUM_TASKS=32 tasks on SLURM_STEP_NUM_NODES=4 nodes") &&
                        Contains("srun --ntasks-per-node=1"));
  env["SLURM_STEP_NUM_TASKS"] = "4";
  env["SLURM_NODEID"] = "4";
  CHECK_THROWS_WITH(slurm_placement(env_table(env)),
                    Contains("SLURM_NODEID=4 is not below SLURM_STEP_NUM_NODES=4"));
  env["SLURM_NODEID"] = "1";
  env["SLURM_JOB_NODELIST"] = "gpu[01-";
  CHECK_THROWS_WITH(slurm_placement(env_table(env)), Contains("SLURM node list 'gpu[01-'"));

  CHECK(slurm_port("0") == 10000);
  CHECK(slurm_port("19999") == 29999);
  CHECK(slurm_port("20000") == 10000);
  // torch's default ports are skipped: another job on the node may use them.
  CHECK(slurm_port("19400") == 30000);  // not 29400, torchrun's rendezvous
  CHECK(slurm_port("39500") == 30001);  // not 29500, torch's MASTER_PORT
  CHECK(slurm_port("19401") == 29401);
  std::set<uint16_t> ports;
  for (int id = 0; id < 20000; ++id) ports.insert(slurm_port(std::to_string(id)));
  CHECK(ports.size() == 20000);  // one port per id in a period: no new collisions
  CHECK(ports.count(29400) == 0);
  CHECK(ports.count(29500) == 0);
  CHECK(*ports.rbegin() == 30001);  // below the kernel's ephemeral range (32768)
  CHECK_THROWS_WITH(slurm_port("12_3"), Contains("SLURM_JOB_ID='12_3'"));
}

TEST_CASE("srun starting the program itself: MASTER_ADDR and MASTER_PORT from the job",
          "[cluster][slurm]") {
  Env env{{"SLURM_PROCID", "5"},
          {"SLURM_NTASKS", "8"},
          {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", "2"},
          {"SLURM_NTASKS_PER_NODE", "2"},
          {"SLURM_JOB_ID", "777"},
          {"SLURM_JOB_NODELIST", "node[001-004,007],gpu-[1-2]"}};
  LaunchEnv le = detect_launch_env(env_table(env));
  CHECK(le.source == LaunchSource::kSlurm);
  CHECK(le.rank == 5);
  CHECK(le.world_size == 8);
  CHECK(le.local_rank == 1);
  CHECK(le.group_rank == 2);
  CHECK(le.master_addr == "node001");
  CHECK(le.master_port == std::optional<uint16_t>(10777));
  // What the job script sets wins.
  env["MASTER_ADDR"] = "10.0.0.9";
  env["MASTER_PORT"] = "4000";
  le = detect_launch_env(env_table(env));
  CHECK(le.master_addr == "10.0.0.9");
  CHECK(le.master_port == std::optional<uint16_t>(4000));
  // torchrun inside an allocation is torchrun, and its values stand.
  LaunchEnv t = detect_launch_env(env_table({{"RANK", "0"},
                                             {"WORLD_SIZE", "2"},
                                             {"SLURM_JOB_ID", "777"},
                                             {"SLURM_JOB_NODELIST", "n[1-2]"}}));
  CHECK(t.source == LaunchSource::kTorchrun);
  CHECK(t.master_addr.empty());
}

TEST_CASE("Kubeflow's variables: PyTorchJob's RANK/WORLD_SIZE/MASTER_ADDR for a program",
          "[cluster][kubernetes]") {
  // A PyTorchJob pod without nprocPerNode runs one process: torchrun's
  // variables, MASTER_ADDR the master pod's service name.
  LaunchEnv le = detect_launch_env(env_table({{"RANK", "3"},
                                              {"WORLD_SIZE", "4"},
                                              {"MASTER_ADDR", "job-master-0"},
                                              {"MASTER_PORT", "23456"},
                                              {"PET_NNODES", "4"}}));
  CHECK(le.source == LaunchSource::kTorchrun);
  CHECK(le.rank == 3);
  CHECK(le.master_addr == "job-master-0");
  CHECK(le.master_port == std::optional<uint16_t>(23456));
}

TEST_CASE("a DNS name that does not resolve yet is waited for, and the error says so",
          "[cluster][kubernetes][dns]") {
  // Numeric addresses and names that resolve return at once.
  wait_until_resolvable("127.0.0.1", Deadline(std::chrono::seconds(5)), "test");
  wait_until_resolvable("::1", Deadline(std::chrono::seconds(5)), "test");
  wait_until_resolvable("localhost", Deadline(std::chrono::seconds(5)), "test");
  // .invalid never resolves (RFC 2606): the wait runs to its deadline.
  const auto start = Clock::now();
  CHECK_THROWS_AS(wait_until_resolvable("job-master-0.collie-test.invalid",
                                        Deadline(std::chrono::milliseconds(600)), "node 1"),
                  TimeoutError);
  CHECK(Clock::now() - start >= std::chrono::milliseconds(600));
  CHECK_THROWS_WITH(wait_until_resolvable("job-master-0.collie-test.invalid",
                                          Deadline(std::chrono::milliseconds(100)), "node 1"),
                    Contains("node 1: the address 'job-master-0.collie-test.invalid' did not "
                             "resolve after") &&
                        Contains("Under Kubernetes a pod's DNS name exists only once the pod "
                                 "runs"));
}
