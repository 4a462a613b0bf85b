#include "collie/runtime/launcher/launcher.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>

#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/launcher/agent.h"
#include "collie/runtime/launcher/elastic_membership.h"
#include "collie/runtime/launcher/host_limits.h"
#include "collie/runtime/launcher/log_hints.h"
#include "collie/runtime/launcher/orphan_guard.h"
#include "collie/runtime/launcher/program_path.h"
#include "collie/runtime/launcher/signal_relay.h"
#include "collie/runtime/launcher/static_membership.h"
#include "collie/runtime/launcher/worker_stream.h"

namespace collie::launcher {
namespace {

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

}  // namespace

void Launcher::say(const std::string& text) { write_all(STDERR_FILENO, text); }

int Launcher::run() {
  Prepared p;
  if (std::optional<int> rc = prepare(p)) return *rc;
  // Forked now, while this process has one thread (the store server starts
  // threads): it kills what the workers started if this launcher dies.
  OrphanGuard guard;
  set_log_tap(&collect_hint);
  return run_job(p, guard);
}

std::optional<int> Launcher::prepare(Prepared& p) {
  const LaunchOptions& o = options_;
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
  return std::nullopt;
}

int Launcher::run_job(const Prepared& p, OrphanGuard& guard) {
  std::unique_ptr<Membership> rdzv;
  try {
    rdzv = open_membership(p.host);
  } catch (const Error& e) {
    say(str_cat(e.what(), "\n"));
    return 1;
  }
  // From here on signals are handled by the supervision loop and the
  // rendezvous waits, never by the default action.
  SignalRelay relay;
  rdzv->set_interrupt_check([&relay] { return relay.first_signal(); });
  if (const std::string line = rdzv->hosting_line(); !line.empty()) say(line + "\n");
  const RunWorkers run_workers = [&](const Round& round, const RemoteCheck& check) {
    GroupSpec spec = group_spec(p, round);
    spec.guard = &guard;
    return WorkerGroup(spec).run(relay, check);
  };
  const AgentOptions agent{
      .max_restarts = options_.max_restarts, .run_id = options_.run_id, .hostname = p.host};
  return run_agent(*rdzv, run_workers, agent, &Launcher::say);
}

std::unique_ptr<Membership> Launcher::open_membership(const std::string& host) const {
  const LaunchOptions& o = options_;
  if (!o.elastic)
    return StaticMembership::start({.nnodes = o.nnodes,
                                    .node_rank = o.node_rank,
                                    .nproc = o.nproc_per_node,
                                    .master_addr = o.master_addr,
                                    .master_port = o.master_port,
                                    .run_id = o.run_id,
                                    .max_restarts = o.max_restarts,
                                    .hostname = host,
                                    .timeout = o.rdzv_timeout,
                                    .secret_source = o.secret_source});
  return ElasticMembership::start({.min_nodes = o.min_nodes,
                                   .max_nodes = o.max_nodes,
                                   .nproc = o.nproc_per_node,
                                   .endpoint_host = o.master_addr,
                                   .endpoint_port = o.master_port,
                                   .run_id = o.run_id,
                                   .max_restarts = o.max_restarts,
                                   .hostname = host,
                                   .join_timeout = o.rdzv_timeout,
                                   .last_call_timeout = o.last_call_timeout,
                                   .keep_alive_interval = o.keep_alive_interval,
                                   .keep_alive_max_attempt = o.keep_alive_max_attempt,
                                   .is_host = o.is_host,
                                   .secret_source = o.secret_source});
}

GroupSpec Launcher::group_spec(const Prepared& p, const Round& round) const {
  const LaunchOptions& o = options_;
  GroupSpec spec;
  spec.program_path = p.program_path;
  spec.program_argv = o.program;
  spec.use_env = o.use_env;
  spec.node_rank = round.node_rank;
  spec.nnodes = round.nnodes;
  spec.nproc = o.nproc_per_node;
  spec.rank_base = round.rank_base;
  spec.world_size = round.world_size;
  spec.env = {.master_addr = round.master_addr,
              .master_port = round.master_port,
              .restart_count = round.number,
              .max_restarts = o.max_restarts,
              .run_id = o.run_id,
              .role = o.role,
              .default_omp_threads = p.default_omp};
  if (!p.log_dir.empty())
    spec.attempt_log_dir = str_cat(p.log_dir, "/", o.run_id, "/attempt_", round.number);
  spec.tee = o.tee;
  spec.local_ranks_filter = o.local_ranks_filter;
  spec.line_prefix_template = o.line_prefix_template;
  spec.grace_period = o.grace_period;
  spec.on_failure = o.on_failure;
  spec.restarts_used = round.restarts_used;
  return spec;
}

}  // namespace collie::launcher
