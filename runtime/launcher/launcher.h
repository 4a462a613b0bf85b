// Launcher: collie-run's top level. It joins the job (hosting the agent store
// on node 0), then runs attempts of this node's worker group until one
// succeeds on every node or the restarts run out, and turns the outcome into
// the process's exit status.
#pragma once

#include <string>

#include "runtime/launcher/launch_options.h"
#include "runtime/launcher/worker_group.h"

namespace collie::launcher {

class NodeRendezvous;

class Launcher {
 public:
  explicit Launcher(LaunchOptions options) : options_(std::move(options)) {}

  // 0 when every worker of the last attempt on every node exited 0; 1 when
  // the job failed (after the restarts) or the launchers could not meet; 2
  // for a bad program path; 128+N when the launcher was stopped by signal N.
  int run();

 private:
  // What this node's worker group looks like in one attempt.
  GroupSpec group_spec(const std::string& program_path, const NodeRendezvous& rdzv, int attempt,
                       const std::string& log_dir, bool default_omp) const;

  LaunchOptions options_;
};

}  // namespace collie::launcher
