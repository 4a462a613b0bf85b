#include "collie/runtime/launcher/job_secret_setup.h"

#include <unistd.h>

#include <cstdlib>

#include "collie/base/str_cat.h"
#include "collie/rendezvous/env/shared_secret.h"
#include "collie/runtime/launcher/worker_stream.h"

namespace collie::launcher {
namespace {

// The secret every launcher of a multi-node job computes alike, and a line
// that says what it was computed from.
SharedSecret derived_secret(const LaunchOptions& o) {
  if (o.placement_source == "slurm") {
    const std::vector<std::string> parts{o.run_id, process_env("SLURM_JOB_NODELIST").value_or(""),
                                         process_env("SLURM_JOB_UID").value_or("")};
    return {derive_job_secret("slurm", parts),
            str_cat("derived from SLURM job ", o.run_id, " (its id, node list and user)")};
  }
  if (o.elastic)
    return {derive_job_secret("c10d", {o.master_addr, std::to_string(o.master_port), o.run_id}),
            str_cat("derived from --rdzv-endpoint ", o.master_addr, ":", o.master_port,
                    " and --rdzv-id ", o.run_id)};
  // Not the port: node 0 may be given 0 and print the one it bound. Not
  // the flags the rendezvous checks either (--nnodes): a mismatch there
  // deserves its own message, not a failed proof.
  return {derive_job_secret("static", {o.master_addr, o.run_id}),
          str_cat("derived from --master-addr ", o.master_addr, " and --run-id ", o.run_id)};
}

}  // namespace

std::string set_up_job_secret(const LaunchOptions& options) {
  if (options.store_compat) ::setenv("COLLIE_STORE_COMPAT", "1", 1);
  const char* given = std::getenv(kJobSecretEnv);
  if (given && *given) {
    JobSecret::from_hex(given);  // a malformed value stops the launch here, not in every worker
    return {};
  }
  // Exported before any thread or child exists: the workers inherit it, and
  // this process's own store server and client read it.
  if (auto path = process_env(kJobSecretFileEnv); path && !path->empty()) {
    ::setenv(kJobSecretEnv, secret_from_file(*path).to_hex().c_str(), 1);
    return {};
  }
  if (!options.elastic && options.nnodes == 1) {
    ::setenv(kJobSecretEnv, JobSecret::generate().to_hex().c_str(), 1);
    return {};
  }
  // Several nodes and no channel to hand a secret over: every launcher
  // derives the same one from what they all share (docs/security.md).
  const SharedSecret shared = derived_secret(options);
  ::setenv(kJobSecretEnv, shared.secret.to_hex().c_str(), 1);
  write_all(STDERR_FILENO,
            str_cat("collie-run: job secret ", shared.source,
                    ": it keeps out strangers and other jobs, but anyone who knows these values "
                    "can compute it; set ",
                    kJobSecretEnv, " or ", kJobSecretFileEnv,
                    " for a secret nobody else has (docs/security.md)\n"));
  return shared.source;
}

}  // namespace collie::launcher
