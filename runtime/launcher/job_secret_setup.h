// collie-run's part of the job secret (rendezvous/job_secret.h,
// docs/security.md): make sure every process of the job has the same one.
#pragma once

#include "runtime/launcher/launch_options.h"

namespace collie::launcher {

// Before anything connects: keeps a COLLIE_JOB_SECRET from the environment
// (checked to be 64 hex digits), else generates one for a single-node job
// and exports it, so that this launcher's agent store and client and every
// worker (which inherits the environment) use it. A multi-node job needs the
// same value on every node, which only the user can arrange: without one it
// runs unauthenticated, with a WARN saying how to set it. --store-compat is
// exported as COLLIE_STORE_COMPAT=1 for the agent store.
void set_up_job_secret(const LaunchOptions& options);

}  // namespace collie::launcher
