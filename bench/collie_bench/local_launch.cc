#include "collie/bench/collie_bench/local_launch.h"

#include <signal.h>

#include <chrono>
#include <cstdio>

#include "collie/base/child_process.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"

namespace collie::bench {

int run_local_ranks(int nproc, std::vector<std::string> argv) {
  // The store the ranks meet in, hosted here on an ephemeral port: this
  // process plays collie-run's (and torchrun's) agent.
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  std::vector<ChildProcess> ranks;
  for (int rank = 0; rank < nproc; ++rank) {
    ranks.push_back(
        ChildProcess::spawn(argv, {.env = {{"RANK", std::to_string(rank)},
                                           {"WORLD_SIZE", std::to_string(nproc)},
                                           {"LOCAL_RANK", std::to_string(rank)},
                                           {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
                                           {"MASTER_ADDR", "127.0.0.1"},
                                           {"MASTER_PORT", std::to_string(server->port())},
                                           {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                           {"TORCHELASTIC_RESTART_COUNT", "0"}}}));
  }
  // Every rank's collectives run under --timeout, so this wait ends.
  int result = 0;
  std::vector<bool> seen(ranks.size(), false);
  for (size_t done = 0; done < ranks.size();) {
    wait_for_any_exit(ranks, std::chrono::hours(24));
    for (size_t rank = 0; rank < ranks.size(); ++rank) {
      if (seen[rank] || !ranks[rank].exited()) continue;
      seen[rank] = true;
      ++done;
      const int code = ranks[rank].status().shell_code();
      if (code == kWrongResultsExit) {
        if (result == 0) result = code;
      } else if (code != 0 && (result == 0 || result == kWrongResultsExit)) {
        result = code;
        std::fprintf(stderr, "collie-bench: rank %zu failed (exit %d); stopping the other ranks\n",
                     rank, code);
        for (ChildProcess& other : ranks)
          if (!other.exited()) other.signal(SIGTERM);
      }
    }
  }
  return result;
}

}  // namespace collie::bench
