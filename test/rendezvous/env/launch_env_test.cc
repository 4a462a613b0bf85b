// detect_launch_env() over tables of environments: every launcher branch, the
// order between them, and every inconsistent value, whose message must name
// the variable and the value. No test touches the real environment.
#include <catch2/catch.hpp>

#include <map>

#include "collie/base/error.h"
#include "collie/rendezvous/env/launch_env.h"
#include "collie/test/support/env_table.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

using Env = EnvTable;

struct Row {
  const char* what;
  Env env;
  LaunchSource source;
  int rank, world_size, local_rank, local_world_size, group_rank;
};

}  // namespace

TEST_CASE("detect_launch_env: each launcher and the order between them", "[launch_env]") {
  using S = LaunchSource;
  const std::vector<Row> rows = {
      {"nothing set: not using distributed mode", {}, S::kNone, 0, 1, 0, 1, 0},
      {"unrelated variables only",
       {{"HOME", "/root"}, {"LOCAL_RANK", "0"}},
       S::kNone,
       0,
       1,
       0,
       1,
       0},
      {"torchrun, every variable",
       {{"RANK", "5"},
        {"WORLD_SIZE", "8"},
        {"LOCAL_RANK", "1"},
        {"LOCAL_WORLD_SIZE", "4"},
        {"GROUP_RANK", "1"}},
       S::kTorchrun,
       5,
       8,
       1,
       4,
       1},
      {"RANK and WORLD_SIZE by hand: the rest unknown",
       {{"RANK", "0"}, {"WORLD_SIZE", "1"}},
       S::kTorchrun,
       0,
       1,
       -1,
       -1,
       -1},
      {"torchrun inside a SLURM allocation is torchrun",
       {{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}},
       S::kTorchrun,
       2,
       4,
       -1,
       -1,
       -1},
      {"SLURM srun",
       {{"SLURM_PROCID", "3"},
        {"SLURM_NTASKS", "6"},
        {"SLURM_LOCALID", "0"},
        {"SLURM_NTASKS_PER_NODE", "3"},
        {"SLURM_NODEID", "1"}},
       S::kSlurm,
       3,
       6,
       0,
       3,
       1},
      {"SLURM without per-node counts",
       {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}},
       S::kSlurm,
       1,
       2,
       1,
       -1,
       -1},
      {"SLURM wins over Open MPI",
       {{"SLURM_PROCID", "1"},
        {"SLURM_NTASKS", "2"},
        {"OMPI_COMM_WORLD_RANK", "0"},
        {"OMPI_COMM_WORLD_SIZE", "1"}},
       S::kSlurm,
       1,
       2,
       -1,
       -1,
       -1},
      {"Open MPI mpirun",
       {{"OMPI_COMM_WORLD_RANK", "6"},
        {"OMPI_COMM_WORLD_SIZE", "7"},
        {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
        {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}},
       S::kOpenMpi,
       6,
       7,
       2,
       3,
       -1},
      {"large world",
       {{"RANK", "65535"}, {"WORLD_SIZE", "65536"}},
       S::kTorchrun,
       65535,
       65536,
       -1,
       -1,
       -1},
  };
  for (const auto& row : rows) {
    INFO(row.what);
    LaunchEnv env = detect_launch_env(env_table(row.env));
    CHECK(env.source == row.source);
    CHECK(env.distributed == (row.source != S::kNone));
    CHECK(env.rank == row.rank);
    CHECK(env.world_size == row.world_size);
    CHECK(env.local_rank == row.local_rank);
    CHECK(env.local_world_size == row.local_world_size);
    CHECK(env.group_rank == row.group_rank);
    CHECK_FALSE(env.describe().empty());
  }
}

TEST_CASE("detect_launch_env: master address, port and torchelastic variables", "[launch_env]") {
  LaunchEnv env = detect_launch_env(env_table({{"RANK", "0"},
                                               {"WORLD_SIZE", "2"},
                                               {"MASTER_ADDR", "node-7.cluster"},
                                               {"MASTER_PORT", "29500"},
                                               {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                               {"TORCHELASTIC_RESTART_COUNT", "3"}}));
  CHECK(env.master_addr == "node-7.cluster");
  REQUIRE(env.master_port.has_value());
  CHECK(*env.master_port == 29500);
  CHECK(env.use_agent_store);
  CHECK(env.restart_count == 3);
  CHECK(std::string(to_string(env.source)) == "torchrun/env");

  LaunchEnv plain = detect_launch_env(env_table({{"TORCHELASTIC_USE_AGENT_STORE", "False"}}));
  CHECK_FALSE(plain.use_agent_store);
  CHECK(plain.master_addr.empty());
  CHECK_FALSE(plain.master_port.has_value());
  CHECK(plain.restart_count == 0);
  CHECK(std::string(to_string(plain.source)) == "none");
  CHECK_THAT(plain.describe(), Contains("not using distributed mode"));
}

TEST_CASE("detect_launch_env: inconsistent values name the variable and its value",
          "[launch_env]") {
  struct Bad {
    Env env;
    std::vector<std::string> named;  // each must appear in the message
  };
  const std::vector<Bad> rows = {
      {{{"RANK", "4"}, {"WORLD_SIZE", "4"}}, {"RANK=4", "WORLD_SIZE=4"}},
      {{{"RANK", "9"}, {"WORLD_SIZE", "4"}}, {"RANK=9", "WORLD_SIZE=4"}},
      {{{"RANK", "-1"}, {"WORLD_SIZE", "4"}}, {"RANK='-1'"}},
      {{{"RANK", "3x"}, {"WORLD_SIZE", "4"}}, {"RANK='3x'"}},
      {{{"RANK", ""}, {"WORLD_SIZE", "4"}}, {"RANK=''"}},
      {{{"RANK", " 1"}, {"WORLD_SIZE", "4"}}, {"RANK=' 1'"}},
      {{{"RANK", "+1"}, {"WORLD_SIZE", "4"}}, {"RANK='+1'"}},
      {{{"RANK", "1"}, {"WORLD_SIZE", "two"}}, {"WORLD_SIZE='two'"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, {"WORLD_SIZE='0'", "at least 1"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "99999999999"}},
       {"WORLD_SIZE='99999999999'", "out of range"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}},
       {"LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "x"}}, {"LOCAL_RANK='x'"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "0"}}, {"LOCAL_WORLD_SIZE='0'"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "3"}},
       {"LOCAL_WORLD_SIZE=3", "WORLD_SIZE=2"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"GROUP_RANK", "-2"}}, {"GROUP_RANK='-2'"}},
      {{{"RANK", "1"}}, {"RANK='1'", "WORLD_SIZE is not"}},
      {{{"WORLD_SIZE", "4"}}, {"WORLD_SIZE='4'", "RANK is not"}},
      {{{"SLURM_PROCID", "0"}}, {"SLURM_PROCID='0'", "SLURM_NTASKS is not"}},
      {{{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}}, {"SLURM_PROCID=2", "SLURM_NTASKS=2"}},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "3x"}},
       {"SLURM_LOCALID='3x'"}},
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", ""}}, {"OMPI_COMM_WORLD_SIZE=''"}},
      {{{"OMPI_COMM_WORLD_RANK", "0"},
        {"OMPI_COMM_WORLD_SIZE", "2"},
        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
        {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}},
       {"OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=1"}},
      {{{"MASTER_PORT", "70000"}}, {"MASTER_PORT='70000'"}},
      {{{"MASTER_PORT", "http"}}, {"MASTER_PORT='http'"}},
      {{{"MASTER_ADDR", ""}}, {"MASTER_ADDR=''"}},
      {{{"TORCHELASTIC_USE_AGENT_STORE", "maybe"}}, {"TORCHELASTIC_USE_AGENT_STORE='maybe'"}},
      {{{"TORCHELASTIC_RESTART_COUNT", "-3"}}, {"TORCHELASTIC_RESTART_COUNT='-3'"}},
  };
  for (const auto& row : rows) {
    std::string shown;
    for (const auto& [k, v] : row.env) shown += k + "='" + v + "' ";
    INFO("environment: " << shown);
    try {
      detect_launch_env(env_table(row.env));
      FAIL("accepted");
    } catch (const InvalidArgument& e) {
      for (const auto& part : row.named) CHECK_THAT(e.what(), Contains(part));
    }
  }
}
