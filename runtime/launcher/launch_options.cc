#include "collie/runtime/launcher/launch_options.h"

#include <arpa/inet.h>

#include <dirent.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <tuple>

#include "collie/base/error.h"
#include "collie/base/host_port.h"
#include "collie/base/parse_duration.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/env/cluster_env.h"
#include "collie/runtime/launcher/launch_flags.h"

namespace collie::launcher {
namespace {

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

namespace {

// The program and its arguments: everything CLI11 left over.
void take_program(const CLI::App& app, const FlagText& f, LaunchOptions& o) {
  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  require(!f.module,
          "--module is not supported: collie-run runs programs; give the "
          "program's path");
  require(!rest.empty(), "no program given: collie-run [FLAGS] PROGRAM [ARGS...]");
  require(rest.front().empty() || rest.front()[0] != '-', "unknown flag '", rest.front(),
          "' (the program path must come after the launcher's flags)");
  o.program = std::move(rest);
}

// The kind of rendezvous, the nodes, this node's workers and its rank, with
// what SLURM says when no flag says it.
void apply_placement(const CLI::App& app, const FlagText& f, const EnvLookup& env,
                     LaunchOptions& o) {
  const auto given = [&app](const char* flag) { return app.get_option(flag)->count() > 0; };
  require(f.rdzv_backend == "static" || f.rdzv_backend == "c10d", "--rdzv-backend '",
          f.rdzv_backend,
          "' is not supported: use static (node ranks given, node 0 hosts the store) or c10d "
          "(elastic: node ranks on arrival, the endpoint's machine hosts the store)");
  o.elastic = f.rdzv_backend == "c10d";
  std::tie(o.min_nodes, o.max_nodes) = parse_nnodes(f.nnodes);
  o.nnodes = o.max_nodes;
  require(o.elastic || o.min_nodes == o.max_nodes, "--nnodes ", f.nnodes,
          ": a range of nodes needs the elastic rendezvous: add --rdzv-backend c10d "
          "--rdzv-endpoint HOST:PORT (or give one number, e.g. --nnodes ",
          o.max_nodes, ")");
  o.nproc_per_node = parse_nproc_per_node(f.nproc);
  require(o.nproc_per_node >= 1, "--nproc-per-node must be >= 1, got ", o.nproc_per_node);
  require(o.max_restarts >= 0, "--max-restarts must be >= 0, got ", o.max_restarts);
  require(f.master_port >= 0 && f.master_port <= 65535, "--master-port ", f.master_port,
          " is not a TCP port");
  o.master_port = static_cast<uint16_t>(f.master_port);
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
}

// --rdzv-endpoint: HOST:PORT, [V6]:PORT, or HOST alone (torchrun's default
// port 29400 for c10d); it overrides --master-addr and --master-port.
void apply_rdzv_endpoint(const std::string& endpoint, LaunchOptions& o) {
  HostPort hp;
  try {
    hp = split_host_port(endpoint, PortRule::kOptional);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(str_cat("--rdzv-endpoint '", endpoint, "': ", e.what()));
  }
  const int p = hp.port.empty() ? (o.elastic ? 29400 : o.master_port)
                                : parse_int(hp.port, "--rdzv-endpoint port");
  // A bracketed host goes back in brackets: checked_host checks what is inside.
  const bool bracketed = endpoint.starts_with('[');
  const std::string host =
      checked_host("--rdzv-endpoint", bracketed ? str_cat("[", hp.host, "]") : hp.host);
  require(p >= 0 && p <= 65535, "--rdzv-endpoint port ", p, " is not a TCP port");
  o.master_addr = host;
  o.master_port = static_cast<uint16_t>(p);
}

// Where the launchers meet, and what the elastic rendezvous needs on top.
void apply_rendezvous(const CLI::App& app, const FlagText& f, LaunchOptions& o) {
  if (!f.rdzv_endpoint.empty()) apply_rdzv_endpoint(f.rdzv_endpoint, o);
  if (f.rdzv_endpoint.empty() && !o.standalone)
    o.master_addr = checked_host("--master-addr", o.master_addr);
  if (o.elastic) {
    require(!f.rdzv_endpoint.empty(),
            "--rdzv-backend c10d needs --rdzv-endpoint HOST:PORT, the address every launcher "
            "can reach (the machine that owns it hosts the rendezvous store)");
    require(o.master_port != 0, "--rdzv-endpoint ", f.rdzv_endpoint,
            ": the c10d rendezvous needs a fixed port every launcher knows, not 0");
    require(!o.standalone, "--standalone and --rdzv-backend c10d do not go together");
    require(app.get_option("--node-rank")->count() == 0,
            "--node-rank is assigned on arrival with --rdzv-backend c10d; leave it out");
  }
  o.rdzv_timeout = duration_flag(f.rdzv_timeout, "--rdzv-timeout", false);
  apply_rdzv_conf(f.rdzv_conf, o);
}

// The grace period, and where the workers' output goes.
void apply_output(const FlagText& f, LaunchOptions& o) {
  o.grace_period = duration_flag(f.grace, "--grace-period", /*allow_zero=*/true);
  if (!f.tee.empty()) {
    o.tee = parse_int(f.tee, "--tee");
    require(o.tee >= 0 && o.tee <= 3, "--tee ", o.tee,
            ": expected 0..3 (1 stdout, 2 stderr, 3 both)");
  }
  if (!f.local_ranks_filter.empty()) o.local_ranks_filter = parse_rank_list(f.local_ranks_filter);
  if (f.no_use_env) o.use_env = false;
}

// --on-failure: one of the three modes; shrink and replace keep workers of
// a failed group running, which the elastic rendezvous, ending the round
// for every failure, does not do.
void apply_on_failure(const FlagText& f, LaunchOptions& o) {
  const std::optional<OnFailure> mode = parse_on_failure(trim(f.on_failure));
  require(mode.has_value(), "--on-failure '", f.on_failure,
          "' is not a mode: use stop (the default: stop every worker, restart the group or fail "
          "the job), shrink (the other workers go on without the failed one) or replace (a new "
          "process takes its place)");
  o.on_failure = *mode;
  require(!o.elastic || o.on_failure == OnFailure::kStop, "--on-failure ", f.on_failure,
          " does not go with --rdzv-backend c10d, whose rounds end at every failure; use the "
          "static rendezvous (--rdzv-backend static) or --on-failure stop");
}

// Every check of what CLI11 parsed, in the order that decides which error a
// command line with several gets. Throws InvalidArgument.
void validate(const CLI::App& app, const FlagText& f, const EnvLookup& env, LaunchOptions& o) {
  take_program(app, f, o);
  apply_placement(app, f, env, o);
  apply_rendezvous(app, f, o);
  apply_output(f, o);
  if (o.standalone) {
    require(o.nnodes == 1, "--standalone runs exactly one node, but --nnodes is ", f.nnodes);
    o.master_addr = "127.0.0.1";
    o.master_port = 0;
  }
  apply_on_failure(f, o);
  require(!o.run_id.empty() && o.run_id.find('/') == std::string::npos, "--run-id '", o.run_id,
          "' must be non-empty and contain no '/' (it names a log folder)");
}

}  // namespace

ParseResult parse_launch_options(const std::vector<std::string>& argv_in, const EnvLookup& env) {
  LaunchOptions o;
  FlagText f;
  f.master_port = o.master_port;
  const std::unique_ptr<CLI::App> app = make_launch_app(o, f);
  std::vector<std::string> args = normalize_tee(*app, argv_in);
  std::vector<const char*> cargs;
  for (const auto& a : args) cargs.push_back(a.c_str());
  try {
    app->parse(static_cast<int>(cargs.size()), cargs.data());
  } catch (const CLI::CallForHelp&) {
    return {std::nullopt, app->help(), 0};
  } catch (const CLI::CallForVersion& e) {
    return {std::nullopt, std::string(e.what()) + "\n", 0};
  } catch (const CLI::ParseError& e) {
    return {std::nullopt,
            str_cat("collie-run: ", e.what(), "\nRun 'collie-run --help' for the flags.\n"), 2};
  }
  try {
    validate(*app, f, env, o);
  } catch (const InvalidArgument& e) {
    return {std::nullopt,
            str_cat("collie-run: ", e.what(), "\nRun 'collie-run --help' for the flags.\n"), 2};
  }
  ParseResult result;
  result.options = std::move(o);
  return result;
}

}  // namespace collie::launcher
