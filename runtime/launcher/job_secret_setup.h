// collie-run's part of the job secret (rendezvous/env/job_secret.h,
// docs/security.md): make sure every process of the job has the same one.
#pragma once

#include <string>

#include "collie/runtime/launcher/launch_options.h"

namespace collie::launcher {

// Before anything connects: keeps a COLLIE_JOB_SECRET from the environment
// (checked to be 64 hex digits), else reads COLLIE_JOB_SECRET_FILE (made
// with a fresh secret by the first launcher when missing), else generates
// one for a single-node job, else (several nodes, no channel to hand one
// over) derives one that every launcher of the job computes alike from the
// values they share (rendezvous/env/shared_secret.h): the SLURM job, the c10d
// endpoint and run id, or the master address, run id and node count. It is
// exported, so this launcher's agent store and client and every worker
// (which inherits the environment) use it. --store-compat is exported as
// COLLIE_STORE_COMPAT=1 for the agent store. Returns what a derived secret
// was derived from ("derived from --master-addr A and --run-id R"), empty
// otherwise: a launcher whose proof fails says which values must match.
std::string set_up_job_secret(const LaunchOptions& options);

}  // namespace collie::launcher
