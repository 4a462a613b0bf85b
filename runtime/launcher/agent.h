// The launcher's one loop, torchrun's agent loop (SimpleElasticAgent's
// _invoke_run) over either membership (membership.h):
//
//   next round -> run this node's workers, checking the round -> then
//     succeeded everywhere        close, exit 0
//     the members changed         a new round; no restart used
//     failed, restarts left       a new round, one restart used
//     failed, none left           close, exit 1
//
// A termination signal, or the store going away, ends this launcher at once
// whatever the other launchers do.
#pragma once

#include <functional>
#include <string>

#include "collie/runtime/launcher/membership.h"
#include "collie/runtime/launcher/worker_group.h"

namespace collie::launcher {

struct AgentOptions {
  int max_restarts = 0;
  std::string run_id = "none";
  std::string hostname;  // this machine's, for the summary and the reports
};

// Runs this node's workers for one round and returns once every one is
// reaped; `check` is polled while they run (WorkerGroup::run).
using RunWorkers = std::function<AttemptResult(const Round& round, const RemoteCheck& check)>;
// Writes one message to collie-run's stderr.
using Say = std::function<void(const std::string& text)>;

// The exit status: 0 when every worker of the last round on every node
// exited 0; 1 when the job failed (after the restarts) or the launchers
// could not meet; 2 for launchers started with flags that do not go
// together; 128+N when the launcher got signal N.
int run_agent(Membership& membership, const RunWorkers& run_workers, const AgentOptions& options,
              const Say& say);

}  // namespace collie::launcher
