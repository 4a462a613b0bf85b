// Launcher: collie-run's top level. It checks the program and the host's
// limits, then either joins a static job (node ranks given, node 0 hosting
// the agent store: NodeRendezvous) or an elastic one (--rdzv-backend c10d:
// ElasticRendezvous), runs attempts of this node's worker group until one
// succeeds everywhere or the restarts run out, and turns the outcome into
// the process's exit status.
#pragma once

#include <exception>
#include <functional>
#include <optional>
#include <string>

#include "runtime/launcher/failure_summary.h"
#include "runtime/launcher/launch_options.h"
#include "runtime/launcher/worker_group.h"

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
  // What both kinds of job need, settled before any rendezvous.
  struct Prepared {
    std::string host;
    std::string program_path;
    std::string log_dir;  // --log-dir, or the temporary one --tee makes
    bool default_omp = false;
  };
  // Where this node sits in one attempt.
  struct Placement {
    int node_rank = 0;
    int nnodes = 1;
    int rank_base = 0;
    int world_size = 1;
    uint16_t master_port = 0;
    std::string master_addr;  // the workers' MASTER_ADDR; "": options' --master-addr
  };

  int run_static(const Prepared& p, OrphanGuard& guard);
  int run_elastic(const Prepared& p, OrphanGuard& guard);  // elastic_launcher.cc
  GroupSpec group_spec(const Prepared& p, const Placement& where, int attempt) const;
  // Writes to collie-run's stderr.
  static void say(const std::string& text);
  // The exit status once every worker succeeded: 0, or 1 (saying why) when
  // some of their output could not be written to the log files.
  static int success_status(const AttemptResult& result);
  // An attempt that ends this launcher whatever the others do: it got a
  // termination signal (the summary is printed and `report` tells the other
  // nodes; 128 + the signal), or lost the store (`lost` says why; 1).
  // nullopt for any other outcome.
  // The exit status when the rendezvous failed during an attempt (`error`
  // is a RendezvousInterrupted or another Error): what went wrong, and the
  // failure summary if this node's workers had failed.
  static int rendezvous_error_status(const std::exception_ptr& error, const AttemptResult& result,
                                     const SummaryContext& summary);
  static std::optional<int> stop_status(const AttemptResult& result, const SummaryContext& summary,
                                        int node_rank, const std::string& host,
                                        const std::function<void(const std::string&)>& report,
                                        const std::string& lost);

  LaunchOptions options_;
};

}  // namespace collie::launcher
