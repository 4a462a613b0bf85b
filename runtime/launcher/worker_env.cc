#include "collie/runtime/launcher/worker_env.h"

namespace collie::launcher {

// Word for word what torch.distributed.run logs (run.py, torch 1.13), so that
// a user grepping their logs for it finds it under collie too.
const char* const kOmpNotice =
    "\n*****************************************\n"
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid "
    "your system being overloaded, please further tune the variable for optimal performance in "
    "your application as needed. \n"
    "*****************************************\n";

std::map<std::string, std::string> worker_variables(const WorkerPlace& p, const AttemptEnv& a) {
  std::map<std::string, std::string> v{
      {"RANK", std::to_string(p.global_rank)},
      {"LOCAL_RANK", std::to_string(p.local_rank)},
      {"WORLD_SIZE", std::to_string(p.world_size)},
      {"LOCAL_WORLD_SIZE", std::to_string(p.local_world_size)},
      {"GROUP_RANK", std::to_string(p.group_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(p.group_world_size)},
      // One role per job, so role ranks are the global ones (as in torchrun
      // with its single "default" role).
      {"ROLE_RANK", std::to_string(p.global_rank)},
      {"ROLE_WORLD_SIZE", std::to_string(p.world_size)},
      {"ROLE_NAME", a.role},
      {"MASTER_ADDR", a.master_addr},
      {"MASTER_PORT", std::to_string(a.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(a.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(a.max_restarts)},
      {"TORCHELASTIC_RUN_ID", a.run_id},
      // The workers are clients of the store this launcher (or node 0's)
      // hosts, under the key prefix /worker/attempt_<restart count>.
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
  };
  // emplace, not operator[] = "1": GCC 12 warns falsely (-Wrestrict) on that.
  if (a.default_omp_threads) v.emplace("OMP_NUM_THREADS", "1");
  return v;
}

}  // namespace collie::launcher
