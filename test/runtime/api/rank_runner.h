// run_ranks: starts one child process per rank, waits for all of them with a
// deadline, and fails the test (showing every rank's output) unless each one
// exited 0. Returns each rank's stdout.
#pragma once

#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "collie/test/support/child.h"
#include "collie/test/support/subprocess.h"

namespace collie::test {

struct RankLaunch {
  std::vector<std::string> argv;
  std::map<std::string, std::optional<std::string>> env = {};
};

inline std::vector<std::string> run_ranks(int world,
                                          const std::function<RankLaunch(int rank)>& launch,
                                          Timeout timeout = std::chrono::seconds(120)) {
  std::vector<Subprocess> procs;
  for (int rank = 0; rank < world; ++rank) {
    RankLaunch l = launch(rank);
    SpawnOptions options;
    options.env = l.env;
    // Children decide their rank from their arguments or from what the test
    // sets here, never from whatever launched the test itself.
    for (const char* name :
         {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
          "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT", "SLURM_PROCID",
          "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"})
      options.env.try_emplace(name, std::nullopt);
    procs.push_back(Subprocess::spawn(l.argv, options));
  }
  Deadline deadline(timeout);
  std::vector<ExitStatus> status;
  for (auto& p : procs) status.push_back(p.wait(deadline.remaining()));
  std::vector<std::string> outputs;
  bool all_ok = true;
  std::string report;
  for (int rank = 0; rank < world; ++rank) {
    outputs.push_back(procs[rank].out());
    all_ok = all_ok && status[rank].ok();
    report += "--- rank " + std::to_string(rank) + ": " + status[rank].describe() + "\nstdout:\n" +
              procs[rank].out() + "stderr:\n" + procs[rank].err() + "\n";
  }
  INFO(report);
  REQUIRE(all_ok);
  return outputs;
}

}  // namespace collie::test
