// Running blip_train in the tests: a job under collie-run, quick synthetic
// arguments, and readers for its log.txt lines.
#pragma once

#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "collie/test/support/subprocess.h"

namespace collie::test {

inline const std::string kCollieRun = std::string(COLLIE_BIN_DIR) + "/collie-run";
inline const std::string kBlipTrain = std::string(COLLIE_BIN_DIR) + "/blip_train";

// collie-run --standalone --nproc-per-node N blip_train ARGS...
inline std::vector<std::string> blip_job(int nproc, const std::vector<std::string>& args) {
  std::vector<std::string> argv{kCollieRun, "--standalone", "--nproc-per-node",
                                std::to_string(nproc), kBlipTrain};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// A few seconds per epoch: synthetic data, a small model, little output;
// `more` is appended.
inline std::vector<std::string> quick(std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"--synthetic", "--synthetic-size", "2000", "--batch-size",
                                "50",          "--hidden",         "64",   "--print-freq",
                                "1000"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// A process started directly, not by a launcher: none of the variables
// that would make it a rank, whatever the test's own environment holds.
inline SpawnOptions without_launcher() {
  SpawnOptions o;
  for (const char* name :
       {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID",
        "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
        "TORCHELASTIC_USE_AGENT_STORE", "COLLIE_TIMEOUT"})
    o.env.emplace(name, std::nullopt);
  return o;
}

inline std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The number after "key": in a log line (as written, so that two lines can
// be compared digit for digit).
inline std::string json_field(const std::string& line, const std::string& key) {
  std::smatch m;
  INFO(line);
  REQUIRE(std::regex_search(line, m, std::regex("\"" + key + "\": ([-0-9.e+]+)")));
  return m[1];
}

inline double json_number(const std::string& line, const std::string& key) {
  return std::stod(json_field(line, key));
}

}  // namespace collie::test
