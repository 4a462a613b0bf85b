#include "bench/collie_bench/local_launch.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "rendezvous/tcp_store.h"
#include "runtime/base/error.h"
#include "runtime/base/str_cat.h"

extern char** environ;

namespace collie::bench {
namespace {

// The environment of this process with `overrides` applied.
std::vector<std::string> child_environment(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    std::string name = entry.substr(0, entry.find('='));
    if (overrides.count(name) == 0) env.push_back(entry);
  }
  for (const auto& [name, value] : overrides) env.push_back(name + "=" + value);
  return env;
}

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0].c_str(), nullptr, nullptr, cargv.data(), cenv.data());
  if (rc != 0)
    throw Error(str_cat("collie-bench: cannot start ", argv[0], ": ", std::strerror(rc)));
  return pid;
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

int run_local_ranks(int nproc, std::vector<std::string> argv) {
  // The store the ranks meet in, hosted here on an ephemeral port: this
  // process plays collie-run's (and torchrun's) agent.
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  std::map<pid_t, int> running;  // pid -> rank
  for (int rank = 0; rank < nproc; ++rank) {
    auto env = child_environment({{"RANK", std::to_string(rank)},
                                  {"WORLD_SIZE", std::to_string(nproc)},
                                  {"LOCAL_RANK", std::to_string(rank)},
                                  {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
                                  {"MASTER_ADDR", "127.0.0.1"},
                                  {"MASTER_PORT", std::to_string(server->port())},
                                  {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                  {"TORCHELASTIC_RESTART_COUNT", "0"}});
    running[spawn(argv, env)] = rank;
  }
  // Every rank's collectives run under --timeout, so this wait ends.
  int result = 0;
  while (!running.empty()) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    auto it = running.find(pid);
    if (it == running.end()) continue;
    int code = exit_code_of(status);
    if (code == kWrongResultsExit) {
      if (result == 0) result = code;
    } else if (code != 0 && (result == 0 || result == kWrongResultsExit)) {
      result = code;
      std::fprintf(stderr, "collie-bench: rank %d failed (exit %d); stopping the other ranks\n",
                   it->second, code);
      for (const auto& [other, rank] : running)
        if (other != pid) kill(other, SIGTERM);
    }
    running.erase(it);
  }
  return result;
}

}  // namespace collie::bench
