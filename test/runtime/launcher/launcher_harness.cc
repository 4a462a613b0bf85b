#include "collie/test/runtime/launcher/launcher_harness.h"

#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/test/support/child.h"

namespace collie::test {

std::string collie_run_path() { return std::string(COLLIE_BIN_DIR) + "/collie-run"; }

std::vector<std::string> launcher_argv(const std::vector<std::string>& flags,
                                       const std::string& child,
                                       const std::vector<std::string>& child_args) {
  std::vector<std::string> argv{collie_run_path()};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto c = child_argv(child, child_args);
  argv.insert(argv.end(), c.begin(), c.end());
  return argv;
}

std::map<std::string, std::optional<std::string>> clean_launch_env() {
  std::map<std::string, std::optional<std::string>> env;
  for (const char* k :
       {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
        "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT", "SLURM_PROCID",
        "SLURM_NTASKS", "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK", "OMP_NUM_THREADS", "PET_NPROC_PER_NODE", "PET_NNODES"})
    env[k] = std::nullopt;
  return env;
}

Subprocess start_launcher(const std::vector<std::string>& flags, const std::string& child,
                          const std::vector<std::string>& child_args,
                          std::map<std::string, std::optional<std::string>> env) {
  auto full = clean_launch_env();
  for (auto& [k, v] : env) full[k] = v;
  return Subprocess::spawn(launcher_argv(flags, child, child_args),
                           {.env = full, .new_process_group = true});
}

Subprocess start_launcher_in(const std::vector<std::string>& prefix,
                             const std::vector<std::string>& flags, const std::string& child,
                             const std::vector<std::string>& child_args) {
  std::vector<std::string> argv = prefix;
  for (auto& s : launcher_argv(flags, child, child_args)) argv.push_back(s);
  return Subprocess::spawn(argv, {.env = clean_launch_env(), .new_process_group = true});
}

std::string wait_for_stderr(Subprocess& p, const std::string& needle, Timeout timeout) {
  return p.wait_for_stderr(needle, timeout);
}

uint16_t agent_store_port(const std::string& text) {
  std::smatch m;
  static const std::regex re("agent store listening on [^ ]*:([0-9]+)");
  if (!std::regex_search(text, m, re)) throw Error("no 'agent store listening' line in:\n" + text);
  return static_cast<uint16_t>(std::stoi(m[1]));
}

std::vector<std::string> lines_with_prefix(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  return out;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

uint16_t probe_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw Error("probe_free_port: cannot bind a socket");
  uint16_t port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

std::vector<std::pair<int, int>> epochs_in_log(const std::string& path) {
  std::vector<std::pair<int, int>> out;
  std::ifstream in(path);
  static const std::regex re(R"re("epoch": (\d+),.*"world_size": (\d+))re");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, re)) out.emplace_back(std::stoi(m[1]), std::stoi(m[2]));
  }
  return out;
}

void wait_for_epoch_at(const std::string& log, int world, size_t after, Timeout timeout,
                       const std::vector<Subprocess*>& launchers) {
  Deadline deadline(timeout);
  for (;;) {
    const auto epochs = epochs_in_log(log);
    for (size_t i = after; i < epochs.size(); ++i)
      if (epochs[i].second == world) return;
    std::string why;
    for (Subprocess* p : launchers)
      if (!p->running()) why += str_cat("\n--- exited early: ", p->command_line(), "\n", p->err());
    if (!why.empty() || deadline.expired()) {
      std::string text;
      for (const auto& [e, w] : epochs) text += str_cat(" ", e, "@", w);
      FAIL("no epoch at world size " << world << " in " << log << " " << deadline.describe()
                                     << "; epochs@world:" << text << why);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<int> world_size_runs(const std::vector<std::pair<int, int>>& epochs) {
  std::vector<int> runs;
  for (const auto& [epoch, world] : epochs)
    if (runs.empty() || runs.back() != world) runs.push_back(world);
  return runs;
}

}  // namespace collie::test
