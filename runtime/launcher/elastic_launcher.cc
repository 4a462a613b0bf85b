// Launcher::run_elastic: collie-run with --rdzv-backend c10d. Each round of
// the elastic rendezvous (elastic_rendezvous.h) is one attempt of this node's
// workers, with the round's world size and TORCHELASTIC_RESTART_COUNT = the
// round. A round ends when a worker fails anywhere, a member goes silent, or
// a launcher waits to join; then the workers stop and the launcher joins the
// next round. Only failures use up --max-restarts.
#include <unistd.h>

#include "base/str_cat.h"
#include "runtime/launcher/culprit.h"
#include "runtime/launcher/elastic_rendezvous.h"
#include "runtime/launcher/failure_summary.h"
#include "runtime/launcher/launcher.h"
#include "runtime/launcher/log_hints.h"
#include "runtime/launcher/node_rendezvous.h"
#include "runtime/launcher/orphan_guard.h"
#include "runtime/launcher/signal_relay.h"
#include "runtime/launcher/worker_stream.h"

namespace collie::launcher {

int Launcher::run_elastic(const Prepared& p, OrphanGuard& guard) {
  const LaunchOptions& o = options_;
  const std::string endpoint = str_cat(o.master_addr, ":", o.master_port);
  std::unique_ptr<ElasticRendezvous> rdzv;
  try {
    rdzv = ElasticRendezvous::start({.min_nodes = o.min_nodes,
                                     .max_nodes = o.max_nodes,
                                     .nproc = o.nproc_per_node,
                                     .endpoint_host = o.master_addr,
                                     .endpoint_port = o.master_port,
                                     .run_id = o.run_id,
                                     .max_restarts = o.max_restarts,
                                     .hostname = p.host,
                                     .join_timeout = o.rdzv_timeout,
                                     .last_call_timeout = o.last_call_timeout,
                                     .keep_alive_interval = o.keep_alive_interval,
                                     .keep_alive_max_attempt = o.keep_alive_max_attempt,
                                     .is_host = o.is_host,
                                     .secret_source = o.secret_source});
  } catch (const Error& e) {
    say(str_cat(e.what(), "\n"));
    return 1;
  }
  SignalRelay relay;
  rdzv->set_interrupt_check([&relay] { return relay.first_signal(); });
  if (rdzv->hosts_store())
    say(str_cat("collie-run: rendezvous store listening on ", endpoint, " (run id '", o.run_id,
                "', --nnodes ", o.min_nodes, ":", o.max_nodes, ")\n"));

  int failures = 0;  // rounds ended by a failure: they use up --max-restarts
  SummaryContext summary{.hostname = p.host, .max_restarts = o.max_restarts, .run_id = o.run_id};
  for (;;) {
    ElasticRound round;
    try {
      round = rdzv->next_round();
    } catch (const JobOver& e) {
      say(str_cat(e.what(), "\n"));
      return e.succeeded() ? 0 : 1;
    } catch (const RendezvousInterrupted& e) {
      say(str_cat(e.what(), "\n"));
      return 128 + e.signal();
    } catch (const InvalidArgument& e) {
      say(str_cat(e.what(), "\n"));
      return 2;
    } catch (const Error& e) {
      say(str_cat(e.what(), "\n"));
      return 1;
    }
    say(str_cat("collie-run: round ", round.round, " of run '", o.run_id, "': node ",
                round.node_rank, " of ", round.nnodes, " (", join(round.hosts, ", "), "), ranks ",
                round.rank_base, "-", round.rank_base + o.nproc_per_node - 1, " of world size ",
                round.world_size, "\n"));
    GroupSpec spec = group_spec(p,
                                {.node_rank = round.node_rank,
                                 .nnodes = round.nnodes,
                                 .rank_base = round.rank_base,
                                 .world_size = round.world_size,
                                 .master_port = o.master_port},
                                round.round);
    spec.guard = &guard;
    summary.node_rank = round.node_rank;
    summary.attempt = round.round;
    AttemptResult result;
    bool membership_change = false;
    std::optional<std::string> failure;
    try {
      result = WorkerGroup(spec).run(relay, [&] { return rdzv->check_round(&membership_change); });
      blame_named_culprit(result);
      summary.hints = collected_hints();
      // Interrupted, this node leaves; the others go on without it.
      if (auto rc = stop_status(
              result, summary, round.node_rank, p.host,
              [&](const std::string& why) { rdzv->report_failure(why); },
              str_cat("collie-run on ", p.host, " gives up: the rendezvous store at ", endpoint,
                      " is gone (the launcher hosting it stopped); as with torchrun's c10d "
                      "backend, the job cannot go on without it\n")))
        return *rc;
      if (result.outcome == AttemptOutcome::kFailed) {
        if (rdzv->newcomer_waiting()) {
          membership_change = true;
          result.outcome = AttemptOutcome::kRemoteFailed;
          result.remote_reason =
              "a launcher is waiting to join (this node's workers lost "
              "peers that another node stopped for it)";
        } else {
          rdzv->report_failure(describe_failure(result, round.node_rank, p.host));
        }
      }
      if (result.outcome == AttemptOutcome::kSucceeded) failure = rdzv->finish_round();
    } catch (const Error&) {
      // The store went away, a barrier timed out or Ctrl-C came: the job
      // cannot go on, and this node's workers are already stopped.
      return rendezvous_error_status(std::current_exception(), result, summary);
    }

    if (result.outcome == AttemptOutcome::kSucceeded && !failure) {
      try {
        rdzv->close("succeeded");
      } catch (const Error&) {
      }
      return success_status(result);
    }
    if (membership_change && result.outcome == AttemptOutcome::kRemoteFailed) {
      say(str_cat("collie-run: round ", round.round, " ends: ", result.remote_reason,
                  "; stopping the workers to rendezvous again\n"));
      continue;
    }
    const std::string reason = result.outcome == AttemptOutcome::kSucceeded
                                   ? failure.value_or("another node failed")
                               : result.outcome == AttemptOutcome::kRemoteFailed
                                   ? result.remote_reason
                                   : describe_failure(result, round.node_rank, p.host);
    if (result.outcome != AttemptOutcome::kSucceeded)
      say(format_failure_summary(result, summary));
    else
      say(str_cat("collie-run: this node's workers succeeded, but round ", round.round,
                  " failed elsewhere: ", reason, "\n"));
    if (failures >= o.max_restarts) {
      say(str_cat("collie-run: job failed after ", failures + 1, " failed round",
                  failures == 0 ? "" : "s", " (--max-restarts ", o.max_restarts, "): ", reason,
                  "\n"));
      try {
        rdzv->close(str_cat("failed: ", reason));
      } catch (const Error&) {
      }
      return 1;
    }
    ++failures;
    say(str_cat("collie-run: round ", round.round, " failed (", reason,
                "); rendezvous again, restart ", failures, " of ", o.max_restarts, "\n"));
  }
}

}  // namespace collie::launcher
