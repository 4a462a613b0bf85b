// Where a launcher sits in a cluster job, read from what the scheduler left
// in the environment, and the waits a cluster start needs.
//
// SLURM: `srun --ntasks-per-node=1 collie-run ...` runs one launcher per node;
// srun gives each the step's node list and node count and the node's index.
// Node 0 of the step hosts the store on the first host of the list, at a
// port derived from the job id unless MASTER_PORT is set, and the run id is
// the job id. (Programs started by srun directly, one task per rank, are
// detect_launch_env()'s business; it uses the same host and port.)
//
// Kubernetes: Kubeflow Trainer and PyTorchJob (with nprocPerNode) give each
// pod torchrun's PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE,
// PET_MASTER_ADDR and PET_MASTER_PORT, which collie-run reads as flags;
// PyTorchJob without nprocPerNode gives MASTER_ADDR/MASTER_PORT/RANK/
// WORLD_SIZE, one process per pod. MASTER_ADDR is then the DNS name of the
// master pod's service, which resolves only once that pod runs: whoever
// connects to it waits for the name first (wait_until_resolvable), until the
// rendezvous deadline, and says so when it never resolves.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "collie/base/deadline.h"
#include "collie/rendezvous/env/launch_env.h"

namespace collie {

// The node-level placement of a launcher started by srun (one task per
// node); every field unset when this is not such a start.
struct SlurmPlacement {
  bool active = false;
  int nnodes = 0;
  int node_rank = 0;
  std::string master_addr;   // first host of SLURM_STEP_NODELIST (or the job's)
  uint16_t master_port = 0;  // MASTER_PORT, else slurm_port(SLURM_JOB_ID)
  std::string job_id;
};

// Reads SLURM_STEP_NUM_NODES, SLURM_STEP_NUM_TASKS, SLURM_NODEID,
// SLURM_STEP_NODELIST / SLURM_JOB_NODELIST, SLURM_JOB_ID and MASTER_PORT.
// Active only inside an srun step (SLURM_STEP_NUM_NODES set). Throws
// InvalidArgument naming the variables when the step runs more than one
// task per node (each would be a launcher of its own) or a value is bad.
SlurmPlacement slurm_placement(const EnvLookup& env = process_env);

// The store's port for SLURM job `job_id`: 10000 + id % 20000, below the
// kernel's ephemeral range, so that two jobs sharing a node rarely collide
// and every task computes the same port without talking; but never torch's
// defaults, 29400 (torchrun's --rdzv-endpoint) and 29500 (MASTER_PORT),
// which become 30000 and 30001 (no other id's port). Throws
// InvalidArgument for a job id that is not a number.
uint16_t slurm_port(const std::string& job_id);

// Resolves `host` (getaddrinfo), retrying with back-off until `deadline`:
// Kubernetes creates a pod's DNS name only once the pod runs, and SLURM
// nodes may come up in any order. Throws TimeoutError naming the host, the
// wait, the last resolver error and `who` ("node 1's launcher") when it
// never resolves. Returns at once for numeric addresses.
// `on_wait`, when given, is called once, at the first failure, with a line
// saying what is awaited (so that a long wait is not a silent one).
void wait_until_resolvable(const std::string& host, const Deadline& deadline,
                           const std::string& who,
                           const std::function<void(const std::string&)>& on_wait = {});

}  // namespace collie
