#include "collie/runtime/launcher/launch_flags.h"

#include <CLI/CLI.hpp>

namespace collie::launcher {
namespace {

constexpr const char* kFooter = R"(Examples:
  collie-run --nproc-per-node 4 ./train --epochs 3
      one node, 4 workers, the agent store on 127.0.0.1:29500
  collie-run --standalone --nproc-per-node 2 --local-ranks-filter 0 ./train
      a free port is chosen; only local rank 0's lines reach the console
  collie-run --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --nproc-per-node 8 ./train
  collie-run --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --nproc-per-node 8 ./train
      two nodes; node 0 hosts the store, global rank = node_rank * 8 + local rank
  collie-run --max-restarts 3 --log-dir /tmp/logs --tee 3 ./train
      restart the whole group up to 3 times; logs in /tmp/logs/none/attempt_N/RANK/
  collie-run --status 4242
      what the workers of the collie-run with pid 4242 are doing: each group's last
      completed and pending calls, and which ranks never entered a call others wait in
  collie-run --rdzv-backend c10d --rdzv-endpoint node0:29400 --rdzv-id job7 --nnodes 2:4 \
             --max-restarts 3 --nproc-per-node 8 ./train
      elastic: on every node alike; starts with 2-4 nodes, restarts when one fails or joins
  srun --ntasks-per-node=1 collie-run --nproc-per-node 8 ./train
      SLURM: nodes, node rank, store address and run id come from srun (docs/clusters.md)

Every flag also reads torchrun's PET_<FLAG> environment variable (PET_NNODES, ...).
Exit status: 0 success, 1 the job failed, 2 a usage error, 128+N when stopped by signal N.
See docs/launcher.md.)";

// The description already starts with the usage line; CLI11's own
// "Usage: collie-run [OPTIONS]" would contradict it (the program comes last).
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override { return "\n"; }
};

std::string pet(const char* name) { return std::string("PET_") + name; }

// Where the job runs: nodes, this node's place and workers, node 0's store.
void declare_placement_flags(CLI::App& app, LaunchOptions& o, FlagText& f) {
  app.add_option("--nnodes", f.nnodes,
                 "Number of nodes, each running one collie-run; MIN:MAX with --rdzv-backend c10d "
                 "(e.g. --nnodes 2 or --nnodes 2:4)")
      ->envname(pet("NNODES"));
  app.add_option("--node-rank,--node_rank", o.node_rank,
                 "This node's rank in [0, nnodes); node 0 hosts the store (e.g. --node-rank 1)")
      ->envname(pet("NODE_RANK"));
  app.add_option("--nproc-per-node,--nproc_per_node", f.nproc,
                 "Workers on this node: a number, 'cpu', 'gpu' or 'auto' (e.g. --nproc-per-node 4)")
      ->envname(pet("NPROC_PER_NODE"));
  app.add_option("--master-addr,--master_addr", o.master_addr,
                 "Address of node 0, where the agent store listens (e.g. --master-addr 10.0.0.1)")
      ->envname(pet("MASTER_ADDR"));
  app.add_option("--master-port,--master_port", f.master_port,
                 "Port of the agent store on node 0; 0 picks a free one (e.g. --master-port 29500)")
      ->envname(pet("MASTER_PORT"));
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", f.rdzv_endpoint,
                 "HOST:PORT of the rendezvous store (static: node 0's; c10d: hosted by the machine "
                 "that owns HOST); overrides --master-addr/--master-port "
                 "(e.g. --rdzv-endpoint 10.0.0.1:29400)")
      ->envname(pet("RDZV_ENDPOINT"));
  app.add_flag("--standalone", o.standalone,
               "One node on 127.0.0.1 with a free port chosen for you (e.g. --standalone)")
      ->envname(pet("STANDALONE"));
}

// The rendezvous, the restarts and the stopping of workers.
void declare_rendezvous_flags(CLI::App& app, LaunchOptions& o, FlagText& f) {
  app.add_option("--max-restarts,--max_restarts", o.max_restarts,
                 "Restart the whole group up to K times after a failure (e.g. --max-restarts 3)")
      ->envname(pet("MAX_RESTARTS"));
  app.add_option("--on-failure,--on_failure", f.on_failure,
                 "What a worker's failure does: stop (every worker, then restart the group or "
                 "fail the job), shrink (the others go on without it), replace (a new process "
                 "with COLLIE_REPLACEMENT=1 takes its place, using one of --max-restarts) "
                 "(e.g. --on-failure shrink)")
      ->envname("COLLIE_ON_FAILURE");
  app.add_option("--run-id,--run_id,--rdzv-id,--rdzv_id", o.run_id,
                 "Job id: TORCHELASTIC_RUN_ID, the store's key namespace and the log folder "
                 "(e.g. --run-id job42)")
      ->envname(pet("RDZV_ID"));
  app.add_option("--role", o.role, "ROLE_NAME of the workers (e.g. --role trainer)")
      ->envname(pet("ROLE"));
  app.add_option("--rdzv-timeout,--rdzv_timeout", f.rdzv_timeout,
                 "How long launchers wait to reach node 0 and for one another "
                 "(e.g. --rdzv-timeout 120 or 90s, 500ms, 5m; default 600s)")
      ->envname(pet("RDZV_TIMEOUT"));
  app.add_option("--rdzv-conf,--rdzv_conf", f.rdzv_conf,
                 "torchrun's key=value list: timeout (join_timeout), last_call_timeout, "
                 "keep_alive_interval, keep_alive_max_attempt, is_host "
                 "(e.g. --rdzv-conf timeout=120,last_call_timeout=5)")
      ->envname(pet("RDZV_CONF"));
  app.add_option("--rdzv-backend,--rdzv_backend", f.rdzv_backend,
                 "static (node ranks given, node 0 hosts the store) or c10d (elastic: --nnodes "
                 "MIN:MAX, node ranks on arrival, a new round when a node fails or joins) "
                 "(e.g. --rdzv-backend c10d)")
      ->envname(pet("RDZV_BACKEND"));
  app.add_option("--grace-period,--grace_period", f.grace,
                 "Time between SIGTERM and SIGKILL when stopping workers (e.g. --grace-period 10; "
                 "default 5s)")
      ->envname(pet("GRACE_PERIOD"));
}

// Where the workers' output goes.
void declare_output_flags(CLI::App& app, LaunchOptions& o, FlagText& f) {
  app.add_option("--log-dir,--log_dir", o.log_dir,
                 "Write LOG_DIR/RUN_ID/attempt_N/RANK/{stdout,stderr}.log; without --tee the "
                 "console shows nothing of the workers (e.g. --log-dir /tmp/logs)")
      ->envname(pet("LOG_DIR"));
  app.add_option("--tee", f.tee,
                 "Streams that go to the console as well as --log-dir: 1 stdout, 2 stderr, 3 both; "
                 "'--tee' alone means 3 (e.g. --tee 3)")
      ->envname(pet("TEE"));
  app.add_option("--redirects", f.ignored,
                 "Accepted for torchrun compatibility; with --log-dir, streams not in --tee are "
                 "already redirected to the files (e.g. --redirects 3)");
  app.add_option("--local-ranks-filter,--local_ranks_filter", f.local_ranks_filter,
                 "Only these local ranks' lines reach the console; log files keep all "
                 "(e.g. --local-ranks-filter 0 or 0,3)")
      ->envname(pet("LOCAL_RANKS_FILTER"));
  app.add_option("--log-line-prefix-template,--log_line_prefix_template", o.line_prefix_template,
                 "Prefix of every forwarded line, with ${rank}, ${local_rank}, ${role_name} "
                 "(e.g. --log-line-prefix-template '[${role_name}${local_rank}]:')");
}

// The workers' side: the agent store's compat mode, how the local rank is
// passed, and torchrun's flags that have no meaning here.
void declare_worker_flags(CLI::App& app, LaunchOptions& o, FlagText& f) {
  app.add_flag("--no-python,--no_python", f.ignored,
               "Accepted for torchrun compatibility: collie-run always runs PROGRAM directly "
               "(e.g. --no-python)");
  app.add_flag("-m,--module", f.module,
               "Not supported: collie-run runs programs, not Python modules; give the program's "
               "path (e.g. collie-run /usr/bin/python3 train.py)");
  app.add_flag("--store-compat,--store_compat", o.store_compat,
               "Let workers without the job secret (torch's TCPStore) use the agent store; "
               "needed for torch workers, which cannot authenticate (e.g. --store-compat)")
      ->envname("COLLIE_STORE_COMPAT");
  app.add_flag("--use-env,--use_env", o.use_env,
               "Workers read LOCAL_RANK from the environment: the default, as in torchrun "
               "(e.g. --use-env)");
  app.add_flag("--no-use-env,--no_use_env,--legacy", f.no_use_env,
               "torch.distributed.launch's legacy mode: pass --local_rank=N to the program "
               "(e.g. --legacy)");
  app.add_option("--monitor-interval,--monitor_interval,--start-method,--start_method", f.ignored,
                 "Accepted for torchrun compatibility and ignored: collie-run reacts to worker "
                 "exits at once (e.g. --monitor-interval 5)");
}

}  // namespace

std::unique_ptr<CLI::App> make_launch_app(LaunchOptions& o, FlagText& f) {
  auto app = std::make_unique<CLI::App>(
      "Usage: collie-run [FLAGS] PROGRAM [PROGRAM ARGS...]\n\n"
      "Launches PROGRAM as --nproc-per-node workers on this node with torchrun's environment "
      "(RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...), hosts the agent store on node 0, "
      "forwards every output line prefixed with its rank, and stops the whole group when a "
      "worker fails (or, with --on-failure shrink|replace, lets the others go on).",
      "collie-run");
  app->formatter(std::make_shared<HelpFormatter>());
  app->prefix_command();  // everything from the program path on is the program's
  app->footer(kFooter);
  app->set_version_flag("--version", "collie-run 0.1.0");
  declare_placement_flags(*app, o, f);
  declare_rendezvous_flags(*app, o, f);
  declare_output_flags(*app, o, f);
  declare_worker_flags(*app, o, f);
  return app;
}

std::vector<std::string> normalize_tee(const CLI::App& app, std::vector<std::string> args) {
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--" || a.empty() || a[0] != '-') break;  // the program starts here
    if (a.find('=') != std::string::npos) continue;
    if (a == "--tee") {
      bool has_mask = i + 1 < args.size() && args[i + 1].size() == 1 && args[i + 1][0] >= '0' &&
                      args[i + 1][0] <= '3';
      if (!has_mask) args.insert(args.begin() + i + 1, "3");
      ++i;
      continue;
    }
    const CLI::Option* opt = app.get_option_no_throw(a);
    if (opt != nullptr && opt->get_expected_min() > 0) ++i;  // skip its value
  }
  return args;
}

}  // namespace collie::launcher
