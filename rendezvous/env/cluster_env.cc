#include "collie/rendezvous/env/cluster_env.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <thread>

#include "collie/base/backoff.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/env/slurm_nodelist.h"

namespace collie {

namespace {
constexpr int64_t kTorchrunRdzvPort = 29400;  // torchrun --rdzv-endpoint's default
constexpr int64_t kTorchMasterPort = 29500;   // torch's MASTER_PORT default
}  // namespace

uint16_t slurm_port(const std::string& job_id) {
  // SLURM_JOB_ID may be an array job's "123_4" in some tools' hands; the
  // variable itself is always the numeric id.
  const int64_t id = detail::parse_non_negative("SLURM_JOB_ID", job_id);
  const int64_t port = 10000 + id % 20000;
  // Not torch's defaults, which another job on the node may well use:
  // torchrun's rendezvous port and torch's MASTER_PORT go to the two ports
  // above the range, which no other id gets.
  if (port == kTorchrunRdzvPort) return 30000;
  if (port == kTorchMasterPort) return 30001;
  return static_cast<uint16_t>(port);
}

SlurmPlacement slurm_placement(const EnvLookup& env) {
  SlurmPlacement p;
  const auto step_nodes = env("SLURM_STEP_NUM_NODES");
  const auto job_id = env("SLURM_JOB_ID");
  if (!step_nodes || !job_id) return p;
  p.active = true;
  p.job_id = *job_id;
  p.nnodes = detail::parse_non_negative("SLURM_STEP_NUM_NODES", *step_nodes);
  if (p.nnodes < 1) throw InvalidArgument("SLURM_STEP_NUM_NODES='0' must be at least 1");
  if (auto tasks = env("SLURM_STEP_NUM_TASKS")) {
    const int n = detail::parse_non_negative("SLURM_STEP_NUM_TASKS", *tasks);
    if (n != p.nnodes)
      throw InvalidArgument(str_cat(
          "collie-run under srun runs one launcher per node, but this step has "
          "SLURM_STEP_NUM_TASKS=",
          n, " tasks on SLURM_STEP_NUM_NODES=", p.nnodes,
          " nodes: start it with srun --ntasks-per-node=1 (collie-run starts the workers), or "
          "run the program itself under srun without collie-run"));
  }
  const auto node_id = env("SLURM_NODEID");
  if (!node_id) throw InvalidArgument("SLURM_STEP_NUM_NODES is set but SLURM_NODEID is not");
  p.node_rank = detail::parse_non_negative("SLURM_NODEID", *node_id);
  if (p.node_rank >= p.nnodes)
    throw InvalidArgument(
        str_cat("SLURM_NODEID=", p.node_rank, " is not below SLURM_STEP_NUM_NODES=", p.nnodes));
  std::optional<std::string> list = env("SLURM_STEP_NODELIST");
  if (!list) list = env("SLURM_JOB_NODELIST");
  if (!list) list = env("SLURM_NODELIST");
  if (!list)
    throw InvalidArgument(
        "under srun, neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set: cannot tell "
        "which host runs node 0");
  p.master_addr = first_host(*list);
  if (auto port = env("MASTER_PORT"))
    p.master_port = detail::parse_port("MASTER_PORT", *port);
  else
    p.master_port = slurm_port(p.job_id);
  return p;
}

void wait_until_resolvable(const std::string& host, const Deadline& deadline,
                           const std::string& who,
                           const std::function<void(const std::string&)>& on_wait) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  Backoff backoff({.initial = std::chrono::milliseconds(20), .max = std::chrono::seconds(1)});
  int attempts = 0;
  for (;;) {
    ++attempts;
    addrinfo* list = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &list);
    if (rc == 0) {
      ::freeaddrinfo(list);
      return;
    }
    // EAI_NONAME / EAI_AGAIN (no such name yet, or the resolver is not
    // answering) are what a pod that does not run yet looks like; a
    // malformed name never gets better, but waiting costs only time.
    if (deadline.expired())
      throw TimeoutError(str_cat(
          who, ": the address '", host, "' did not resolve ", deadline.describe(), " (", attempts,
          " attempts; last: ", ::gai_strerror(rc),
          "). Under Kubernetes a pod's DNS name exists only once the pod runs: is the master "
          "pod scheduled, and is its headless service there? Under SLURM, is the node list "
          "right?"));
    if (attempts == 1 && on_wait)
      on_wait(str_cat(who, ": waiting for '", host, "' to resolve (", ::gai_strerror(rc),
                      "), for at most ", format_duration(deadline.remaining()),
                      "; a Kubernetes pod's name resolves once the pod runs"));
    backoff.sleep(deadline);
  }
}

}  // namespace collie
