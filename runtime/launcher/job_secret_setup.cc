#include "runtime/launcher/job_secret_setup.h"

#include <cstdlib>

#include "rendezvous/job_secret.h"
#include "runtime/base/logging.h"

namespace collie::launcher {

void set_up_job_secret(const LaunchOptions& options) {
  if (options.store_compat) ::setenv("COLLIE_STORE_COMPAT", "1", 1);
  const char* given = std::getenv(kJobSecretEnv);
  if (given && *given) {
    JobSecret::from_hex(given);  // a malformed value stops the launch here, not in every worker
    return;
  }
  if (options.nnodes > 1) {
    COLLIE_LOG(kWarn) << "collie-run: a multi-node job without " << kJobSecretEnv
                      << " runs unauthenticated; export the same value on every node, e.g. "
                      << kJobSecretEnv
                      << "=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')";
    return;
  }
  // Exported before any thread or child exists: the workers inherit it, and
  // this process's own store server and client read it.
  ::setenv(kJobSecretEnv, JobSecret::generate().to_hex().c_str(), 1);
}

}  // namespace collie::launcher
