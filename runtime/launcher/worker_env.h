// The environment every worker starts with: torchrun's variables on top of
// the launcher's own environment. A program written for torchrun (or for
// collie's init_process_group) reads the same names with the same meanings.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace collie::launcher {

// Where one worker sits in the job.
struct WorkerPlace {
  int local_rank = 0;
  int global_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = 0;        // the node rank
  int group_world_size = 1;  // the number of nodes
};

// What is the same for every worker of one attempt.
struct AttemptEnv {
  std::string master_addr;
  uint16_t master_port = 0;
  int restart_count = 0;
  int max_restarts = 0;
  std::string run_id = "none";
  std::string role = "default";
  // Set OMP_NUM_THREADS=1 (torchrun does when it is unset and nproc > 1).
  bool default_omp_threads = false;
};

// The variables collie-run sets for one worker (only those, not the whole
// environment): RANK, LOCAL_RANK, ..., TORCHELASTIC_USE_AGENT_STORE=True.
std::map<std::string, std::string> worker_variables(const WorkerPlace& place,
                                                    const AttemptEnv& attempt);

// torchrun's notice, printed once when OMP_NUM_THREADS is defaulted.
extern const char* const kOmpNotice;

}  // namespace collie::launcher
