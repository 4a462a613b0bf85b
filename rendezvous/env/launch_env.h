// detect_launch_env(): who started this process and where it sits in the job,
// read from the environment the launcher left behind. It mirrors the BLIP
// tutorial's init_distributed_mode() and covers more launchers:
//
//   1. torchrun / torch.distributed.launch: RANK and WORLD_SIZE (with
//      LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK)
//   2. SLURM (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
//   3. Open MPI (mpirun): OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   4. none of them: "not using distributed mode", one process of rank 0
//
// MASTER_ADDR/MASTER_PORT and torchelastic's TORCHELASTIC_USE_AGENT_STORE and
// TORCHELASTIC_RESTART_COUNT are read whatever the launcher. Under SLURM
// without them, MASTER_ADDR is the first host of SLURM_JOB_NODELIST (the
// compressed list expanded, rendezvous/env/slurm_nodelist.h) and MASTER_PORT is
// derived from SLURM_JOB_ID (slurm_port() in rendezvous/env/cluster_env.h). Values that make
// no sense (RANK >= WORLD_SIZE, negative, "3x", empty) throw InvalidArgument
// naming the variable and its value: a mis-launched job should stop at once,
// not hang in rendezvous. docs/rendezvous.md has the full table.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace collie {

// Looks up one environment variable; nullopt when it is not set. Tests pass a
// table instead of touching the real environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// The real environment (getenv).
std::optional<std::string> process_env(const std::string& name);

enum class LaunchSource {
  kNone,      // no launcher: a single process
  kTorchrun,  // torchrun, torch.distributed.launch, or RANK/WORLD_SIZE by hand
  kSlurm,
  kOpenMpi,
};

// "torchrun/env", "slurm", "openmpi", "none".
const char* to_string(LaunchSource source);

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  // -1 where the launcher does not tell (e.g. SLURM without
  // SLURM_NTASKS_PER_NODE, Open MPI has no node index).
  int local_rank = 0;
  int local_world_size = 1;
  int group_rank = 0;                   // the node's index: GROUP_RANK, SLURM_NODEID
  std::string master_addr;              // empty when MASTER_ADDR is unset
  std::optional<uint16_t> master_port;  // MASTER_PORT
  bool use_agent_store = false;         // TORCHELASTIC_USE_AGENT_STORE
  int restart_count = 0;                // TORCHELASTIC_RESTART_COUNT
  LaunchSource source = LaunchSource::kNone;
  bool distributed = false;  // false only for LaunchSource::kNone

  // "rank 3 of 8 (local 1 of 4, node 1) via slurm": for logs.
  std::string describe() const;
};

LaunchEnv detect_launch_env(const EnvLookup& env = process_env);

namespace detail {

// Parses a non-negative decimal int ("3", not "3x", "", "-1", " 3"); throws
// InvalidArgument "NAME='value' is not a non-negative integer". Shared with
// init_method.cc.
int parse_non_negative(const std::string& name, const std::string& value);
uint16_t parse_port(const std::string& name, const std::string& value);

}  // namespace detail
}  // namespace collie
