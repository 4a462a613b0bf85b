// Launcher: collie-run's top level. It checks the program and the host's
// limits, opens the rendezvous the flags ask for (static: node ranks given,
// node 0 hosting the agent store; --rdzv-backend c10d: elastic), runs the
// agent loop (agent.h) over it with this node's worker group, and turns the
// outcome into the process's exit status.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "collie/runtime/launcher/launch_options.h"
#include "collie/runtime/launcher/membership.h"
#include "collie/runtime/launcher/worker_group.h"

namespace collie::launcher {

class OrphanGuard;

class Launcher {
 public:
  explicit Launcher(LaunchOptions options) : options_(std::move(options)) {}

  // 0 when every worker of the last attempt on every node exited 0; 1 when
  // the job failed (after the restarts) or the launchers could not meet; 2
  // for a bad program path or flags the host or the other launchers refuse;
  // 128+N when the launcher was stopped by signal N.
  int run();

 private:
  // What every job needs, settled before any rendezvous.
  struct Prepared {
    std::string host;
    std::string program_path;
    std::string log_dir;  // --log-dir, or the temporary one --tee makes
    bool default_omp = false;
  };

  // Checks the program and the host's limits, and makes the --tee folder;
  // an exit status when the launcher cannot go on.
  std::optional<int> prepare(Prepared& p);
  int run_job(const Prepared& p, OrphanGuard& guard);
  // The static or the elastic membership, its store started and reached.
  // Throws Error when it cannot be.
  std::unique_ptr<Membership> open_membership(const std::string& host) const;
  GroupSpec group_spec(const Prepared& p, const Round& round) const;
  // Writes to collie-run's stderr.
  static void say(const std::string& text);

  LaunchOptions options_;
};

}  // namespace collie::launcher
