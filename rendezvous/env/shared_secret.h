// Where a multi-node job's secret comes from when nobody exported
// COLLIE_JOB_SECRET (docs/security.md, "Multi-node jobs"). Every process of
// the job must end up with the same 256 bits without a channel to hand them
// over, so they come from one input all of them share:
//
//   1. COLLIE_JOB_SECRET (the scheduler's: a Kubernetes Secret mounted as
//      an environment variable, or the job script's export);
//   2. COLLIE_JOB_SECRET_FILE: a file on a shared file system, mode 0600
//      (the first process of the job creates it with a fresh secret,
//      atomically; the others read it). Only its owner can read it, so this
//      is a real secret;
//   3. derived: SHA-256 over what every process of the job knows: the
//      rendezvous endpoint and run id (collie-run), or SLURM's job id, node
//      list and user (srun). Anyone who knows those values can compute it,
//      so it keeps out strangers, other jobs and port scanners, not another
//      user of the cluster who reads the queue. Jobs that need that use 1 or
//      2; collie-run says which source it used.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/rendezvous/env/job_secret.h"
#include "collie/rendezvous/env/launch_env.h"

namespace collie {

inline constexpr const char* kJobSecretFileEnv = "COLLIE_JOB_SECRET_FILE";

struct SharedSecret {
  JobSecret secret;
  std::string source;  // for the log: "COLLIE_JOB_SECRET_FILE /path", "derived from ..."
};

// Reads the secret file, creating it with a fresh secret first when it does
// not exist (mode 0600, written to a temporary file and linked into place,
// so a reader never sees half of it). Throws InvalidArgument naming the path
// when it is readable by others, not 64 hex digits, or cannot be made.
JobSecret secret_from_file(const std::string& path);

// SHA-256 of "collie derived job secret v1", `kind` and `parts`, each
// length-prefixed: the same inputs give the same secret on every node.
JobSecret derive_job_secret(const std::string& kind, const std::vector<std::string>& parts);

// For a process started by a scheduler without collie-run: the secret file
// when COLLIE_JOB_SECRET_FILE is set, else, under srun with more than one
// task, one derived from the job (SLURM_JOB_ID, SLURM_JOB_NODELIST,
// SLURM_JOB_UID). nullopt otherwise. COLLIE_JOB_SECRET itself is not read
// here (JobSecret::from_env() does that first).
std::optional<SharedSecret> scheduler_secret(const EnvLookup& env = process_env);

}  // namespace collie
