#include "collie/test/faults/fault_harness.h"

#include <signal.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie::test {

int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

void record(const std::string& name, const std::string& text) {
  std::string line = str_cat("[faults] ", name, ": ", text, "\n");
  std::fputs(line.c_str(), stdout);
  std::fflush(stdout);
  if (const char* path = std::getenv("COLLIE_FAULTS_RECORD"); path && *path) {
    std::ofstream out(path, std::ios::app);
    out << line;
  }
}

EnvOverrides clean_env(EnvOverrides extra) {
  for (const char* name :
       {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
        "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT",
        "TORCHELASTIC_RUN_ID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
        "COLLIE_SOCKET_IFNAME", "COLLIE_JOB_SECRET", "COLLIE_STORE_COMPAT"})
    extra.try_emplace(name, std::nullopt);
  return extra;
}

std::vector<Subprocess> spawn_ranks(int world, const std::string& child,
                                    const std::function<std::vector<std::string>(int rank)>& args,
                                    const EnvOverrides& env) {
  std::vector<Subprocess> procs;
  for (int rank = 0; rank < world; ++rank)
    procs.push_back(Subprocess::spawn(child_argv(child, args(rank)), {.env = clean_env(env)}));
  return procs;
}

std::vector<Subprocess> spawn_loop_ranks(int world, const std::string& rdzv, const std::string& op,
                                         int call_timeout_ms, const EnvOverrides& env) {
  return spawn_ranks(
      world, "loop_rank",
      [&](int rank) {
        return std::vector<std::string>{"file:" + rdzv,
                                        op,
                                        std::to_string(rank),
                                        std::to_string(world),
                                        "-",
                                        std::to_string(call_timeout_ms),
                                        "60"};
      },
      env);
}

void wait_all_output(std::vector<Subprocess>& procs, const std::vector<int>& which,
                     const std::string& needle, Timeout timeout) {
  Deadline deadline(timeout);
  for (int i : which) procs[i].wait_for_output(needle, deadline.remaining());
}

std::optional<int64_t> find_int(const std::string& text, const std::string& key) {
  size_t at = text.find(key + "=");
  if (at == std::string::npos) return std::nullopt;
  return std::stoll(text.substr(at + key.size() + 1));
}

double detection_ms(const std::string& child_out, int64_t fault_ns) {
  auto ns = find_int(child_out, "error_ns");
  INFO(child_out);
  REQUIRE(ns.has_value());
  return static_cast<double>(*ns - fault_ns) / 1e6;
}

std::vector<std::string> collie_run_argv(const std::vector<std::string>& flags,
                                         const std::string& child,
                                         const std::vector<std::string>& args) {
  std::vector<std::string> argv{std::string(COLLIE_BIN_DIR) + "/collie-run"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  for (auto& a : child_argv(child, args)) argv.push_back(a);
  return argv;
}

uint16_t agent_store_port(const std::string& launcher_stderr) {
  std::smatch m;
  static const std::regex re("agent store listening on [^ ]*:([0-9]+)");
  if (!std::regex_search(launcher_stderr, m, re))
    throw Error("no 'agent store listening' line in:\n" + launcher_stderr);
  return static_cast<uint16_t>(std::stoi(m[1]));
}

}  // namespace collie::test
