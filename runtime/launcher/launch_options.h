// LaunchOptions: what collie-run was asked to do, parsed from torchrun's flags.
//
// Every flag is accepted in torchrun's underscore spelling (--nproc_per_node)
// and the dash spelling of recent torch versions (--nproc-per-node), and reads
// torchrun's PET_* environment variable when it is not given on the command
// line (PET_NPROC_PER_NODE=4 collie-run ./train). Everything after the program
// path is the program's own arguments and is passed through untouched.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "collie/rendezvous/env/launch_env.h"
#include "collie/runtime/launcher/on_failure.h"

namespace collie::launcher {

struct LaunchOptions {
  int nnodes = 1;
  int node_rank = 0;
  int nproc_per_node = 1;
  std::string master_addr = "127.0.0.1";
  // 0 (or --standalone): node 0 binds a free port and hands it to its workers.
  uint16_t master_port = 29500;
  bool standalone = false;
  // --store-compat: the agent store also serves clients without the job
  // secret (torch workers); docs/security.md.
  bool store_compat = false;
  int max_restarts = 0;
  // --on-failure: stop the group (torchrun's way), let the other workers go
  // on without the failed one, or replace it (on_failure.h).
  OnFailure on_failure = OnFailure::kStop;

  // --rdzv-backend c10d: the elastic rendezvous (elastic_membership.h).
  // master_addr/master_port then hold --rdzv-endpoint; node_rank is
  // assigned on arrival; nnodes is MIN:MAX.
  bool elastic = false;
  int min_nodes = 1;  // --nnodes MIN:MAX (both = nnodes when static)
  int max_nodes = 1;
  // --rdzv-conf keys of torchrun's c10d backend.
  std::chrono::milliseconds last_call_timeout = std::chrono::seconds(30);
  std::chrono::milliseconds keep_alive_interval = std::chrono::seconds(5);
  int keep_alive_max_attempt = 3;
  std::optional<bool> is_host;
  // Where the node-level defaults came from when no flag gave them:
  // "slurm" (srun collie-run), empty otherwise.
  std::string placement_source;
  // Set by set_up_job_secret(): what the job secret was derived from, for
  // the error when another node's proof does not match.
  std::string secret_source;
  std::string run_id = "none";  // torchrun's --rdzv_id default
  std::string role = "default";
  // How long launchers wait for one another (joining, attempt barriers) and
  // how long a node > 0 keeps trying to reach node 0's store.
  std::chrono::milliseconds rdzv_timeout = std::chrono::seconds(600);
  // SIGTERM -> SIGKILL when stopping workers.
  std::chrono::milliseconds grace_period = std::chrono::seconds(5);

  std::string log_dir;  // empty: no log files
  // torchrun's std-stream mask: bit 0 stdout, bit 1 stderr. A stream in the
  // mask goes to the console and the log file; one outside it, when a log
  // directory is set, goes to the file only.
  int tee = 0;
  // Local ranks whose lines reach the console; empty means all.
  std::set<int> local_ranks_filter;
  // Prefix of every forwarded line; ${rank}, ${local_rank}, ${role_name}.
  std::string line_prefix_template = "[rank${rank}]: ";

  // false: torch.distributed.launch's legacy mode, --local_rank=N is passed
  // to the program (right after its path) instead of relying on LOCAL_RANK.
  bool use_env = true;

  std::vector<std::string> program;  // path, then its arguments
};

// The outcome of parsing: either options to run, or a text to print and an
// exit code (--help, --version, a usage error).
struct ParseResult {
  std::optional<LaunchOptions> options;
  std::string message;  // help text or the usage error
  int exit_code = 0;
};

// Parses argv (argv[0] is the launcher's own name). Never throws for a user
// error: a bad flag comes back as message + exit code 2.
// `env` supplies the scheduler's variables that are not flags (SLURM's, and
// MASTER_ADDR/MASTER_PORT as PyTorchJob sets them); PET_* are read by the
// flags themselves, from the real environment.
ParseResult parse_launch_options(const std::vector<std::string>& argv,
                                 const EnvLookup& env = process_env);

// "0,2,5" -> {0, 2, 5}; throws InvalidArgument naming the bad item.
std::set<int> parse_rank_list(const std::string& text);

// "4" -> {4, 4}; "1:4" -> {1, 4}; throws InvalidArgument naming --nnodes
// for anything else (MIN > MAX, MIN < 1).
std::pair<int, int> parse_nnodes(const std::string& text);

// Parses --rdzv-conf "k=v,k=v" into `o`: timeout / join_timeout,
// last_call_timeout, keep_alive_interval, keep_alive_max_attempt, is_host
// (torchrun's c10d keys; read_timeout and close_timeout are accepted and
// ignored). An unknown key or bad value throws InvalidArgument naming it.
void apply_rdzv_conf(const std::string& conf, LaunchOptions& o);

// "8", "cpu", "gpu", "auto" -> a count.
int parse_nproc_per_node(const std::string& text);

}  // namespace collie::launcher
