#include "runtime/launcher/launch_options.h"

#include <arpa/inet.h>

#include <dirent.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <tuple>

#include "base/error.h"
#include "base/parse_duration.h"
#include "base/str_cat.h"
#include "rendezvous/env/cluster_env.h"

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
  collie-run --rdzv-backend c10d --rdzv-endpoint node0:29400 --rdzv-id job7 --nnodes 2:4 \
             --max-restarts 3 --nproc-per-node 8 ./train
      elastic: on every node alike; starts with 2-4 nodes, restarts when one fails or joins
  srun --ntasks-per-node=1 collie-run --nproc-per-node 8 ./train
      SLURM: nodes, node rank, store address and run id come from srun (docs/clusters.md)

Every flag also reads torchrun's PET_<FLAG> environment variable (PET_NNODES, ...).
Exit status: 0 success, 1 the job failed, 2 a usage error, 128+N when stopped by signal N.
See docs/launcher.md.)";

// A usage error: the message is for the user, so it carries no source location.
template <typename... Args>
void require(bool ok, const Args&... args) {
  if (!ok) throw InvalidArgument(str_cat(args...));
}

// The host part of --master-addr or --rdzv-endpoint: an IPv4 or IPv6
// literal (brackets allowed around IPv6) or a DNS name. Returns it without
// brackets; throws InvalidArgument naming the flag, the value and the rule.
std::string checked_host(const std::string& flag, const std::string& given) {
  const std::string shown = given.size() > 80 ? given.substr(0, 80) + "..." : given;
  std::string host = given;
  if (!host.empty() && host.front() == '[') {
    require(host.back() == ']', flag, " '", shown, "': an IPv6 address in brackets needs its ']'");
    host = host.substr(1, host.size() - 2);
    in6_addr a6{};
    require(::inet_pton(AF_INET6, host.c_str(), &a6) == 1, flag, " '", shown,
            "': what is inside the brackets is not an IPv6 address");
    return host;
  }
  require(!host.empty(), flag, " is empty: give node 0's address or host name");
  if (host.find(':') != std::string::npos) {
    in6_addr a6{};
    require(
        ::inet_pton(AF_INET6, host.c_str(), &a6) == 1, flag, " '", shown,
        "' is neither a host nor an IPv6 address",
        flag == "--master-addr" ? " (give the port with --master-port, not in the address)" : "");
    return host;
  }
  require(host.size() <= 253, flag, " '", shown, "' is ", host.size(),
          " characters: a host name has at most 253");
  size_t label = 0;
  for (char c : host) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
    require(ok, flag, " '", shown, "' has '", std::string(1, c),
            "', which no host name or address has");
    label = c == '.' ? 0 : label + 1;
    require(label <= 63, flag, " '", shown, "' has a label of more than 63 characters");
  }
  return host;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

int parse_int(const std::string& text, const std::string& what) {
  std::string t = trim(text);
  char* end = nullptr;
  long v = std::strtol(t.c_str(), &end, 10);
  require(!t.empty() && end != nullptr && *end == '\0' && v >= -(1L << 30) && v < (1L << 30), what,
          ": '", text, "' is not an integer");
  return static_cast<int>(v);
}

// NVIDIA's device nodes (/dev/nvidia0, ...): a GPU count without linking CUDA.
int count_nvidia_devices() {
  int n = 0;
  if (DIR* d = ::opendir("/dev")) {
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name.size() > 6 && name.compare(0, 6, "nvidia") == 0 &&
          std::all_of(name.begin() + 6, name.end(),
                      [](unsigned char c) { return std::isdigit(c); }))
        ++n;
    }
    ::closedir(d);
  }
  return n;
}

// torchrun's --tee takes a value, but "--tee" alone is the natural way to ask
// for both streams; insert "3" when the next token is not a stream mask. Only
// the launcher's own flags (before the program path) are looked at.
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

// A duration flag through base's parse_duration (ranges checked, never
// wrapped); a timeout of 0 is refused, a grace period of 0 means "SIGKILL at
// once".
std::chrono::milliseconds duration_flag(const std::string& text, const std::string& flag,
                                        bool allow_zero) {
  const Timeout d = parse_duration(trim(text), flag);
  require(allow_zero || d.count() > 0, flag, " '", text,
          "' is no time at all: it is how long to wait before giving up, at least 1ms (e.g. ", flag,
          " 600s)");
  return d;
}

// The description already starts with the usage line; CLI11's own
// "Usage: collie-run [OPTIONS]" would contradict it (the program comes last).
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override { return "\n"; }
};

}  // namespace

std::set<int> parse_rank_list(const std::string& text) {
  std::set<int> ranks;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item =
        trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (!item.empty()) {
      int r = parse_int(item, "--local-ranks-filter");
      require(r >= 0, "--local-ranks-filter: local ranks are >= 0, got ", r);
      ranks.insert(r);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ranks;
}

std::pair<int, int> parse_nnodes(const std::string& text) {
  const size_t colon = text.find(':');
  const int lo = parse_int(text.substr(0, colon), "--nnodes");
  const int hi = colon == std::string::npos ? lo : parse_int(text.substr(colon + 1), "--nnodes");
  require(lo >= 1, "--nnodes ", text, ": a job needs at least 1 node");
  require(lo <= hi, "--nnodes ", text, ": MIN is above MAX");
  return {lo, hi};
}

void apply_rdzv_conf(const std::string& conf, LaunchOptions& o) {
  for (const auto& item : CLI::detail::split(conf, ',')) {
    const std::string kv = trim(item);
    if (kv.empty()) continue;
    const size_t eq = kv.find('=');
    require(eq != std::string::npos, "--rdzv-conf '", kv, "' is not key=value");
    const std::string k = trim(kv.substr(0, eq)), v = trim(kv.substr(eq + 1));
    const std::string flag = "--rdzv-conf " + k;
    if (k == "timeout" || k == "join_timeout") {
      o.rdzv_timeout = duration_flag(v, flag, false);
    } else if (k == "last_call_timeout") {
      o.last_call_timeout = duration_flag(v, flag, true);
    } else if (k == "keep_alive_interval") {
      o.keep_alive_interval = duration_flag(v, flag, false);
    } else if (k == "keep_alive_max_attempt") {
      o.keep_alive_max_attempt = parse_int(v, flag);
      require(o.keep_alive_max_attempt >= 1, flag, " must be at least 1");
    } else if (k == "is_host") {
      require(v == "true" || v == "false" || v == "1" || v == "0", flag, "='", v,
              "' is not true or false");
      o.is_host = v == "true" || v == "1";
    } else if (k == "read_timeout" || k == "close_timeout") {
      // torchrun's; collie-run's store calls run under join_timeout.
    } else {
      require(false, "--rdzv-conf: unknown key '", k,
              "' (known: timeout, join_timeout, last_call_timeout, keep_alive_interval, "
              "keep_alive_max_attempt, is_host, read_timeout, close_timeout)");
    }
  }
}

int parse_nproc_per_node(const std::string& text) {
  long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (text == "cpu") return static_cast<int>(cpus > 0 ? cpus : 1);
  if (text == "gpu" || text == "auto") {
    int gpus = count_nvidia_devices();
    require(gpus > 0 || text == "auto", "--nproc-per-node gpu: no NVIDIA device found");
    return gpus > 0 ? gpus : static_cast<int>(cpus > 0 ? cpus : 1);
  }
  return parse_int(text, "--nproc-per-node");
}

ParseResult parse_launch_options(const std::vector<std::string>& argv_in, const EnvLookup& env) {
  LaunchOptions o;
  CLI::App app(
      "Usage: collie-run [FLAGS] PROGRAM [PROGRAM ARGS...]\n\n"
      "Launches PROGRAM as --nproc-per-node workers on this node with torchrun's environment "
      "(RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...), hosts the agent store on node 0, "
      "forwards every output line prefixed with its rank, and stops the whole group when a "
      "worker fails.",
      "collie-run");
  app.formatter(std::make_shared<HelpFormatter>());
  app.prefix_command();  // everything from the program path on is the program's
  app.footer(kFooter);
  app.set_version_flag("--version", "collie-run 0.1.0");

  std::string nnodes = "1", nproc = "1", rdzv_timeout = "600", grace = "5", filter, tee_text;
  std::string rdzv_endpoint, rdzv_conf, rdzv_backend = "static", ignored;
  bool no_use_env = false, module = false;
  int port = o.master_port;
  auto pet = [](const char* name) { return std::string("PET_") + name; };

  app.add_option("--nnodes", nnodes,
                 "Number of nodes, each running one collie-run; MIN:MAX with --rdzv-backend c10d "
                 "(e.g. --nnodes 2 or --nnodes 2:4)")
      ->envname(pet("NNODES"));
  app.add_option("--node-rank,--node_rank", o.node_rank,
                 "This node's rank in [0, nnodes); node 0 hosts the store (e.g. --node-rank 1)")
      ->envname(pet("NODE_RANK"));
  app.add_option("--nproc-per-node,--nproc_per_node", nproc,
                 "Workers on this node: a number, 'cpu', 'gpu' or 'auto' (e.g. --nproc-per-node 4)")
      ->envname(pet("NPROC_PER_NODE"));
  app.add_option("--master-addr,--master_addr", o.master_addr,
                 "Address of node 0, where the agent store listens (e.g. --master-addr 10.0.0.1)")
      ->envname(pet("MASTER_ADDR"));
  app.add_option("--master-port,--master_port", port,
                 "Port of the agent store on node 0; 0 picks a free one (e.g. --master-port 29500)")
      ->envname(pet("MASTER_PORT"));
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", rdzv_endpoint,
                 "HOST:PORT of the rendezvous store (static: node 0's; c10d: hosted by the machine "
                 "that owns HOST); overrides --master-addr/--master-port "
                 "(e.g. --rdzv-endpoint 10.0.0.1:29400)")
      ->envname(pet("RDZV_ENDPOINT"));
  app.add_flag("--standalone", o.standalone,
               "One node on 127.0.0.1 with a free port chosen for you (e.g. --standalone)")
      ->envname(pet("STANDALONE"));
  app.add_option("--max-restarts,--max_restarts", o.max_restarts,
                 "Restart the whole group up to K times after a failure (e.g. --max-restarts 3)")
      ->envname(pet("MAX_RESTARTS"));
  app.add_option("--run-id,--run_id,--rdzv-id,--rdzv_id", o.run_id,
                 "Job id: TORCHELASTIC_RUN_ID, the store's key namespace and the log folder "
                 "(e.g. --run-id job42)")
      ->envname(pet("RDZV_ID"));
  app.add_option("--role", o.role, "ROLE_NAME of the workers (e.g. --role trainer)")
      ->envname(pet("ROLE"));
  app.add_option("--rdzv-timeout,--rdzv_timeout", rdzv_timeout,
                 "How long launchers wait to reach node 0 and for one another "
                 "(e.g. --rdzv-timeout 120 or 90s, 500ms, 5m; default 600s)")
      ->envname(pet("RDZV_TIMEOUT"));
  app.add_option("--rdzv-conf,--rdzv_conf", rdzv_conf,
                 "torchrun's key=value list: timeout (join_timeout), last_call_timeout, "
                 "keep_alive_interval, keep_alive_max_attempt, is_host "
                 "(e.g. --rdzv-conf timeout=120,last_call_timeout=5)")
      ->envname(pet("RDZV_CONF"));
  app.add_option("--rdzv-backend,--rdzv_backend", rdzv_backend,
                 "static (node ranks given, node 0 hosts the store) or c10d (elastic: --nnodes "
                 "MIN:MAX, node ranks on arrival, a new round when a node fails or joins) "
                 "(e.g. --rdzv-backend c10d)")
      ->envname(pet("RDZV_BACKEND"));
  app.add_option("--grace-period,--grace_period", grace,
                 "Time between SIGTERM and SIGKILL when stopping workers (e.g. --grace-period 10; "
                 "default 5s)")
      ->envname(pet("GRACE_PERIOD"));
  app.add_option("--log-dir,--log_dir", o.log_dir,
                 "Write LOG_DIR/RUN_ID/attempt_N/RANK/{stdout,stderr}.log; without --tee the "
                 "console shows nothing of the workers (e.g. --log-dir /tmp/logs)")
      ->envname(pet("LOG_DIR"));
  app.add_option("--tee", tee_text,
                 "Streams that go to the console as well as --log-dir: 1 stdout, 2 stderr, 3 both; "
                 "'--tee' alone means 3 (e.g. --tee 3)")
      ->envname(pet("TEE"));
  app.add_option("--redirects", ignored,
                 "Accepted for torchrun compatibility; with --log-dir, streams not in --tee are "
                 "already redirected to the files (e.g. --redirects 3)");
  app.add_option("--local-ranks-filter,--local_ranks_filter", filter,
                 "Only these local ranks' lines reach the console; log files keep all "
                 "(e.g. --local-ranks-filter 0 or 0,3)")
      ->envname(pet("LOCAL_RANKS_FILTER"));
  app.add_option("--log-line-prefix-template,--log_line_prefix_template", o.line_prefix_template,
                 "Prefix of every forwarded line, with ${rank}, ${local_rank}, ${role_name} "
                 "(e.g. --log-line-prefix-template '[${role_name}${local_rank}]:')");
  app.add_flag("--no-python,--no_python", ignored,
               "Accepted for torchrun compatibility: collie-run always runs PROGRAM directly "
               "(e.g. --no-python)");
  app.add_flag("-m,--module", module,
               "Not supported: collie-run runs programs, not Python modules; give the program's "
               "path (e.g. collie-run /usr/bin/python3 train.py)");
  app.add_flag("--store-compat,--store_compat", o.store_compat,
               "Let workers without the job secret (torch's TCPStore) use the agent store; "
               "needed for torch workers, which cannot authenticate (e.g. --store-compat)")
      ->envname("COLLIE_STORE_COMPAT");
  app.add_flag("--use-env,--use_env", o.use_env,
               "Workers read LOCAL_RANK from the environment: the default, as in torchrun "
               "(e.g. --use-env)");
  app.add_flag("--no-use-env,--no_use_env,--legacy", no_use_env,
               "torch.distributed.launch's legacy mode: pass --local_rank=N to the program "
               "(e.g. --legacy)");
  app.add_option("--monitor-interval,--monitor_interval,--start-method,--start_method", ignored,
                 "Accepted for torchrun compatibility and ignored: collie-run reacts to worker "
                 "exits at once (e.g. --monitor-interval 5)");

  std::vector<std::string> args = normalize_tee(app, argv_in);
  std::vector<const char*> cargs;
  for (const auto& a : args) cargs.push_back(a.c_str());
  ParseResult result;
  try {
    app.parse(static_cast<int>(cargs.size()), cargs.data());
  } catch (const CLI::CallForHelp&) {
    return {std::nullopt, app.help(), 0};
  } catch (const CLI::CallForVersion& e) {
    return {std::nullopt, std::string(e.what()) + "\n", 0};
  } catch (const CLI::ParseError& e) {
    return {std::nullopt,
            str_cat("collie-run: ", e.what(), "\nRun 'collie-run --help' for the flags.\n"), 2};
  }
  try {
    std::vector<std::string> rest = app.remaining();
    if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
    require(!module,
            "--module is not supported: collie-run runs programs; give the "
            "program's path");
    require(!rest.empty(), "no program given: collie-run [FLAGS] PROGRAM [ARGS...]");
    require(rest.front().empty() || rest.front()[0] != '-', "unknown flag '", rest.front(),
            "' (the program path must come after the launcher's flags)");
    o.program = std::move(rest);
    const auto given = [&app](const char* flag) { return app.get_option(flag)->count() > 0; };
    require(rdzv_backend == "static" || rdzv_backend == "c10d", "--rdzv-backend '", rdzv_backend,
            "' is not supported: use static (node ranks given, node 0 hosts the store) or c10d "
            "(elastic: node ranks on arrival, the endpoint's machine hosts the store)");
    o.elastic = rdzv_backend == "c10d";
    std::tie(o.min_nodes, o.max_nodes) = parse_nnodes(nnodes);
    o.nnodes = o.max_nodes;
    require(o.elastic || o.min_nodes == o.max_nodes, "--nnodes ", nnodes,
            ": a range of nodes needs the elastic rendezvous: add --rdzv-backend c10d "
            "--rdzv-endpoint HOST:PORT (or give one number, e.g. --nnodes ",
            o.max_nodes, ")");
    o.nproc_per_node = parse_nproc_per_node(nproc);
    require(o.nproc_per_node >= 1, "--nproc-per-node must be >= 1, got ", o.nproc_per_node);
    require(o.max_restarts >= 0, "--max-restarts must be >= 0, got ", o.max_restarts);
    require(port >= 0 && port <= 65535, "--master-port ", port, " is not a TCP port");
    o.master_port = static_cast<uint16_t>(port);
    // srun --ntasks-per-node=1 collie-run: what no flag (or PET_*) gave
    // comes from SLURM (rendezvous/env/cluster_env.h).
    if (!o.elastic && !o.standalone) {
      const SlurmPlacement slurm = slurm_placement(env);
      if (slurm.active) {
        o.placement_source = "slurm";
        if (!given("--nnodes")) o.nnodes = o.min_nodes = o.max_nodes = slurm.nnodes;
        if (!given("--node-rank")) o.node_rank = slurm.node_rank;
        if (!given("--master-addr")) o.master_addr = slurm.master_addr;
        if (!given("--master-port")) o.master_port = slurm.master_port;
        if (!given("--run-id")) o.run_id = slurm.job_id;
      }
    }
    require(o.node_rank >= 0 && o.node_rank < o.nnodes, "--node-rank ", o.node_rank,
            " is outside [0, ", o.nnodes, ") for --nnodes ", o.nnodes);
    if (!rdzv_endpoint.empty()) {
      // HOST:PORT, [V6]:PORT, or HOST alone (torchrun's default port 29400).
      std::string host = rdzv_endpoint, port_text;
      if (host.front() == '[') {
        const size_t close = host.find(']');
        require(close != std::string::npos, "--rdzv-endpoint '", rdzv_endpoint, "' has no ']'");
        if (close + 1 < host.size()) {
          require(host[close + 1] == ':', "--rdzv-endpoint '", rdzv_endpoint,
                  "': expected [ADDRESS]:PORT");
          port_text = host.substr(close + 2);
        }
        host = host.substr(1, close - 1);
      } else if (std::count(host.begin(), host.end(), ':') == 1) {
        port_text = host.substr(host.find(':') + 1);
        host = host.substr(0, host.find(':'));
      }
      const int p = port_text.empty() ? (o.elastic ? 29400 : o.master_port)
                                      : parse_int(port_text, "--rdzv-endpoint port");
      require(!host.empty(), "--rdzv-endpoint '", rdzv_endpoint, "' has no host");
      host = checked_host("--rdzv-endpoint", host);
      require(p >= 0 && p <= 65535, "--rdzv-endpoint port ", p, " is not a TCP port");
      o.master_addr = host;
      o.master_port = static_cast<uint16_t>(p);
    }
    if (rdzv_endpoint.empty() && !o.standalone)
      o.master_addr = checked_host("--master-addr", o.master_addr);
    if (o.elastic) {
      require(!rdzv_endpoint.empty(),
              "--rdzv-backend c10d needs --rdzv-endpoint HOST:PORT, the address every launcher "
              "can reach (the machine that owns it hosts the rendezvous store)");
      require(o.master_port != 0, "--rdzv-endpoint ", rdzv_endpoint,
              ": the c10d rendezvous needs a fixed port every launcher knows, not 0");
      require(!o.standalone, "--standalone and --rdzv-backend c10d do not go together");
      require(!given("--node-rank"),
              "--node-rank is assigned on arrival with --rdzv-backend c10d; leave it out");
    }
    o.rdzv_timeout = duration_flag(rdzv_timeout, "--rdzv-timeout", false);
    apply_rdzv_conf(rdzv_conf, o);
    o.grace_period = duration_flag(grace, "--grace-period", /*allow_zero=*/true);
    if (!tee_text.empty()) {
      o.tee = parse_int(tee_text, "--tee");
      require(o.tee >= 0 && o.tee <= 3, "--tee ", o.tee,
              ": expected 0..3 (1 stdout, 2 stderr, 3 both)");
    }
    if (!filter.empty()) o.local_ranks_filter = parse_rank_list(filter);
    if (no_use_env) o.use_env = false;
    if (o.standalone) {
      require(o.nnodes == 1, "--standalone runs exactly one node, but --nnodes is ", nnodes);
      o.master_addr = "127.0.0.1";
      o.master_port = 0;
    }
    require(!o.run_id.empty() && o.run_id.find('/') == std::string::npos, "--run-id '", o.run_id,
            "' must be non-empty and contain no '/' (it names a log folder)");
  } catch (const InvalidArgument& e) {
    return {std::nullopt,
            str_cat("collie-run: ", e.what(), "\nRun 'collie-run --help' for the flags.\n"), 2};
  }
  result.options = std::move(o);
  return result;
}

}  // namespace collie::launcher
