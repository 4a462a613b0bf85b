#include "runtime/launcher/launcher.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "base/error.h"
#include "base/logging.h"
#include "base/str_cat.h"
#include "runtime/launcher/culprit.h"
#include "runtime/launcher/failure_summary.h"
#include "runtime/launcher/host_limits.h"
#include "runtime/launcher/log_hints.h"
#include "runtime/launcher/node_rendezvous.h"
#include "runtime/launcher/orphan_guard.h"
#include "runtime/launcher/program_path.h"
#include "runtime/launcher/signal_relay.h"
#include "runtime/launcher/worker_stream.h"

namespace collie::launcher {
namespace {

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

}  // namespace

GroupSpec Launcher::group_spec(const Prepared& p, const Placement& where, int attempt) const {
  const LaunchOptions& o = options_;
  GroupSpec spec;
  spec.program_path = p.program_path;
  spec.program_argv = o.program;
  spec.use_env = o.use_env;
  spec.node_rank = where.node_rank;
  spec.nnodes = where.nnodes;
  spec.nproc = o.nproc_per_node;
  spec.rank_base = where.rank_base;
  spec.world_size = where.world_size;
  spec.env = {.master_addr = where.master_addr.empty() ? o.master_addr : where.master_addr,
              .master_port = where.master_port,
              .restart_count = attempt,
              .max_restarts = o.max_restarts,
              .run_id = o.run_id,
              .role = o.role,
              .default_omp_threads = p.default_omp};
  if (!p.log_dir.empty())
    spec.attempt_log_dir = str_cat(p.log_dir, "/", o.run_id, "/attempt_", attempt);
  spec.tee = o.tee;
  spec.local_ranks_filter = o.local_ranks_filter;
  spec.line_prefix_template = o.line_prefix_template;
  spec.grace_period = o.grace_period;
  return spec;
}

void Launcher::say(const std::string& text) { write_all(STDERR_FILENO, text); }

int Launcher::success_status(const AttemptResult& result) {
  if (result.log_errors.empty()) return 0;
  // The workers did their job, but what they wrote is not all where the
  // user will look for it: that must not pass as a success.
  say(str_cat("collie-run: the workers succeeded, but ", result.log_errors.size(),
              " of their log files could not be written (", result.log_errors.front(),
              "); the lines that did not fit went to the console. Exit status 1.\n"));
  return 1;
}

std::optional<int> Launcher::stop_status(const AttemptResult& result, const SummaryContext& summary,
                                         int node_rank, const std::string& host,
                                         const std::function<void(const std::string&)>& report,
                                         const std::string& lost) {
  if (result.outcome == AttemptOutcome::kInterrupted) {
    say(format_failure_summary(result, summary));
    try {
      report(describe_failure(result, node_rank, host));
    } catch (const Error&) {
    }
    return 128 + result.signal;
  }
  if (result.store_lost) {
    say(format_failure_summary(result, summary));
    say(lost);
    return 1;
  }
  return std::nullopt;
}

int Launcher::rendezvous_error_status(const std::exception_ptr& error, const AttemptResult& result,
                                      const SummaryContext& summary) {
  try {
    std::rethrow_exception(error);
  } catch (const RendezvousInterrupted& e) {
    say(str_cat(e.what(), "\n"));
    return 128 + e.signal();
  } catch (const Error& e) {
    if (!result.workers.empty() && result.outcome != AttemptOutcome::kSucceeded)
      say(format_failure_summary(result, summary));
    say(str_cat(e.what(), "\n"));
    return 1;
  }
}

int Launcher::run() {
  const LaunchOptions& o = options_;
  Prepared p;
  p.host = hostname();
  try {
    p.program_path = resolve_program(o.program.front());
  } catch (const InvalidArgument& e) {
    say(str_cat(e.what(), "\n"));
    return 2;
  }

  // Before anything per worker is allocated: a count the host cannot run
  // is a usage error, not an out-of-memory kill minutes later.
  raise_fd_limit();
  try {
    check_worker_count(o.nproc_per_node, read_host_limits(), !o.log_dir.empty() || o.tee != 0);
  } catch (const InvalidArgument& e) {
    say(str_cat("collie-run: ", e.what(), "\n"));
    return 2;
  }

  p.default_omp = std::getenv("OMP_NUM_THREADS") == nullptr && o.nproc_per_node > 1;
  if (p.default_omp) say(kOmpNotice);

  p.log_dir = o.log_dir;
  if (p.log_dir.empty() && o.tee != 0) {
    // torchrun logs to a temporary folder when --tee comes without --log-dir.
    char tmpl[] = "/tmp/collie-run-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      say("collie-run: cannot create a temporary log folder for --tee\n");
      return 1;
    }
    p.log_dir = tmpl;
    say(str_cat("collie-run: --tee without --log-dir: logging to ", p.log_dir, "\n"));
  }

  // Forked now, while this process has one thread (the store server starts
  // threads): it kills what the workers started if this launcher dies.
  OrphanGuard guard;

  set_log_tap(&collect_hint);
  return o.elastic ? run_elastic(p, guard) : run_static(p, guard);
}

int Launcher::run_static(const Prepared& p, OrphanGuard& guard) {
  const LaunchOptions& o = options_;
  const std::string& host = p.host;
  std::unique_ptr<NodeRendezvous> rdzv;
  try {
    rdzv = NodeRendezvous::start({.nnodes = o.nnodes,
                                  .node_rank = o.node_rank,
                                  .nproc = o.nproc_per_node,
                                  .master_addr = o.master_addr,
                                  .master_port = o.master_port,
                                  .run_id = o.run_id,
                                  .max_restarts = o.max_restarts,
                                  .hostname = host,
                                  .timeout = o.rdzv_timeout,
                                  .secret_source = o.secret_source});
  } catch (const Error& e) {
    say(str_cat(e.what(), "\n"));
    return 1;
  }

  // From here on signals are handled by the supervision loop and the
  // rendezvous waits, never by the default action.
  SignalRelay relay;
  rdzv->set_interrupt_check([&relay] { return relay.first_signal(); });
  if (o.node_rank == 0)
    say(str_cat("collie-run: agent store listening on ", rdzv->listen_address(), " (node 0 of ",
                o.nnodes, ", run id '", o.run_id, "'; workers reach it at ", o.master_addr, ")\n"));
  try {
    rdzv->join();
  } catch (const RendezvousInterrupted& e) {
    say(str_cat(e.what(), "\n"));
    return 128 + e.signal();
  } catch (const InvalidArgument& e) {
    say(str_cat(e.what(), "\n"));  // launchers started with inconsistent flags
    return 2;
  } catch (const Error& e) {
    say(str_cat(e.what(), "\n"));
    return 1;
  }

  SummaryContext summary{.node_rank = o.node_rank,
                         .hostname = host,
                         .max_restarts = o.max_restarts,
                         .run_id = o.run_id};
  for (int attempt = 0;; ++attempt) {
    GroupSpec spec = group_spec(p,
                                {.node_rank = o.node_rank,
                                 .nnodes = o.nnodes,
                                 .rank_base = rdzv->rank_base(),
                                 .world_size = rdzv->world_size(),
                                 .master_port = rdzv->port(),
                                 .master_addr = rdzv->worker_master_addr()},
                                attempt);
    spec.guard = &guard;
    AttemptResult result;
    std::optional<std::string> failure;
    try {
      rdzv->begin_attempt(attempt);
      RemoteCheck remote;
      if (o.nnodes > 1) remote = [&] { return rdzv->remote_failure(attempt); };
      result = WorkerGroup(spec).run(relay, remote);
      blame_named_culprit(result);
      summary.attempt = attempt;
      summary.hints = collected_hints();
      // Without node 0's store no barrier can be passed: give up at once
      // rather than retry the connection for the whole rendezvous timeout.
      if (auto rc = stop_status(
              result, summary, o.node_rank, host,
              [&](const std::string& why) { rdzv->report_failure(attempt, why); },
              str_cat("collie-run: node ", o.node_rank,
                      " gives up: the job cannot go on without node 0\n")))
        return *rc;
      if (result.outcome == AttemptOutcome::kFailed)
        rdzv->report_failure(attempt, describe_failure(result, o.node_rank, host));
      failure = rdzv->finish_attempt(attempt);
    } catch (const Error&) {
      // The store went away, a barrier timed out or Ctrl-C came: the job
      // cannot go on, and this node's workers are already stopped.
      return rendezvous_error_status(std::current_exception(), result, summary);
    }
    if (!failure && result.outcome == AttemptOutcome::kSucceeded) {
      try {
        rdzv->close();
      } catch (const Error&) {
      }
      return success_status(result);
    }
    if (result.outcome != AttemptOutcome::kSucceeded) {
      if (result.outcome == AttemptOutcome::kRemoteFailed && failure)
        result.remote_reason = *failure;
      say(format_failure_summary(result, summary));
    } else {
      say(str_cat("collie-run: node ", o.node_rank,
                  "'s workers succeeded, but another node failed: ", *failure, "\n"));
    }
    if (attempt >= o.max_restarts) {
      say(str_cat("collie-run: job failed after ", attempt + 1, " attempt", attempt == 0 ? "" : "s",
                  " (--max-restarts ", o.max_restarts, "): ", failure.value_or("see above"), "\n"));
      try {
        rdzv->close();
      } catch (const Error&) {
      }
      return 1;
    }
    say(str_cat("collie-run: attempt ", attempt, " failed (", failure.value_or("see above"),
                "); restarting the group, restart ", attempt + 1, " of ", o.max_restarts, "\n"));
  }
}

}  // namespace collie::launcher
