#include "collie/rendezvous/env/launch_env.h"

#include <charconv>
#include <cstdlib>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/env/cluster_env.h"
#include "collie/rendezvous/env/slurm_nodelist.h"

namespace collie {
namespace {

// Where each launcher puts a process's coordinates. nullptr: not provided.
struct LauncherVars {
  LaunchSource source;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
  const char* group_rank;
};

// Checked in this order; the first whose rank and world size are both set
// wins. torchrun comes first, as in BLIP, so that torchrun inside a SLURM
// allocation is seen as torchrun.
constexpr LauncherVars kLaunchers[] = {
    {LaunchSource::kTorchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"},
    {LaunchSource::kSlurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
     "SLURM_NODEID"},
    {LaunchSource::kOpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", nullptr},
};

// An optional integer variable: -1 when unset (or when the launcher has no
// such variable).
int optional_int(const EnvLookup& env, const char* name) {
  if (name == nullptr) return -1;
  auto value = env(name);
  return value ? detail::parse_non_negative(name, *value) : -1;
}

bool parse_bool(const std::string& name, const std::string& value) {
  // torchelastic writes str(bool): "True"/"False"; accept the usual spellings.
  std::string v;
  for (char c : value) v += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  throw InvalidArgument(str_cat(name, "='", value, "' is not a boolean (True/False/1/0)"));
}

void check_below(const char* lower_name, int lower, const char* upper_name, int upper) {
  if (lower >= 0 && upper >= 0 && lower >= upper)
    throw InvalidArgument(str_cat(lower_name, "=", lower, " is not below ", upper_name, "=", upper,
                                  ": a rank must be in [0, ", upper_name, ")"));
}

void read_launcher(const EnvLookup& env, const LauncherVars& vars, LaunchEnv& out) {
  out.source = vars.source;
  out.distributed = true;
  out.rank = detail::parse_non_negative(vars.rank, *env(vars.rank));
  out.world_size = detail::parse_non_negative(vars.world_size, *env(vars.world_size));
  if (out.world_size < 1)
    throw InvalidArgument(str_cat(vars.world_size, "='0' must be at least 1"));
  check_below(vars.rank, out.rank, vars.world_size, out.world_size);
  out.local_rank = optional_int(env, vars.local_rank);
  out.local_world_size = optional_int(env, vars.local_world_size);
  out.group_rank = optional_int(env, vars.group_rank);
  if (out.local_world_size == 0)
    throw InvalidArgument(str_cat(vars.local_world_size, "='0' must be at least 1"));
  check_below(vars.local_rank, out.local_rank, vars.local_world_size, out.local_world_size);
  if (out.local_world_size > out.world_size)
    throw InvalidArgument(str_cat(vars.local_world_size, "=", out.local_world_size,
                                  " is larger than ", vars.world_size, "=", out.world_size));
}

}  // namespace

std::optional<std::string> process_env(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

const char* to_string(LaunchSource source) {
  switch (source) {
    case LaunchSource::kNone: return "none";
    case LaunchSource::kTorchrun: return "torchrun/env";
    case LaunchSource::kSlurm: return "slurm";
    case LaunchSource::kOpenMpi: return "openmpi";
  }
  return "?";
}

std::string LaunchEnv::describe() const {
  if (!distributed) return "not using distributed mode (one process, rank 0)";
  return str_cat("rank ", rank, " of ", world_size, " (local ", local_rank, " of ",
                 local_world_size, ", node ", group_rank, ") via ", to_string(source));
}

LaunchEnv detect_launch_env(const EnvLookup& env) {
  LaunchEnv out;
  const LauncherVars* half_set = nullptr;  // a launcher with a rank but no world size
  for (const auto& vars : kLaunchers) {
    const bool has_rank = env(vars.rank).has_value();
    const bool has_size = env(vars.world_size).has_value();
    if (has_rank && has_size) {
      read_launcher(env, vars, out);
      half_set = nullptr;
      break;
    }
    if ((has_rank || has_size) && half_set == nullptr) half_set = &vars;
  }
  // Half of a launcher's variables and no other launcher: a broken launch
  // script. Running alone as "rank 0 of 1" would hide it, so refuse.
  if (half_set != nullptr) {
    const bool has_rank = env(half_set->rank).has_value();
    const char* set = has_rank ? half_set->rank : half_set->world_size;
    const char* unset = has_rank ? half_set->world_size : half_set->rank;
    throw InvalidArgument(str_cat(set, "='", *env(set), "' is set but ", unset,
                                  " is not: set both, or neither to run a single process"));
  }

  if (auto addr = env("MASTER_ADDR")) {
    if (addr->empty()) throw InvalidArgument("MASTER_ADDR='' is empty");
    out.master_addr = *addr;
  }
  if (auto port = env("MASTER_PORT")) out.master_port = detail::parse_port("MASTER_PORT", *port);
  if (out.source == LaunchSource::kSlurm) {
    // srun starting the program itself: rank 0 hosts the store on the first
    // node of the job, at a port every task derives from the job id.
    std::optional<std::string> list = env("SLURM_STEP_NODELIST");
    if (!list) list = env("SLURM_JOB_NODELIST");
    if (!list) list = env("SLURM_NODELIST");
    if (out.master_addr.empty() && list) out.master_addr = first_host(*list);
    auto job_id = env("SLURM_JOB_ID");
    if (!out.master_port && job_id) out.master_port = slurm_port(*job_id);
  }
  if (auto v = env("TORCHELASTIC_USE_AGENT_STORE"))
    out.use_agent_store = parse_bool("TORCHELASTIC_USE_AGENT_STORE", *v);
  if (auto v = env("TORCHELASTIC_RESTART_COUNT"))
    out.restart_count = detail::parse_non_negative("TORCHELASTIC_RESTART_COUNT", *v);
  return out;
}

namespace detail {

int parse_non_negative(const std::string& name, const std::string& value) {
  int out = 0;
  const char* begin = value.data();
  const char* end = begin + value.size();
  auto [ptr, ec] = std::from_chars(begin, end, out);
  if (value.empty() || ec != std::errc() || ptr != end || out < 0) {
    const char* why =
        ec == std::errc::result_out_of_range ? "is out of range" : "is not a non-negative integer";
    throw InvalidArgument(str_cat(name, "='", value, "' ", why));
  }
  return out;
}

uint16_t parse_port(const std::string& name, const std::string& value) {
  int port = parse_non_negative(name, value);
  if (port > 65535)
    throw InvalidArgument(str_cat(name, "='", value, "' is not a port: it must be in [0, 65535]"));
  return static_cast<uint16_t>(port);
}

}  // namespace detail
}  // namespace collie
