// The torch interop tests' Python side (torch_interop_test.cc for torch
// 1.13, torch2_interop_test.cc for 2.x): a script written into a temp
// folder, and `world` ranks of it run against a store on 127.0.0.1.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "test/support/subprocess.h"
#include "test/support/temp_dir.h"

namespace collie::test {

inline std::string write_script(const TempDir& dir, const std::string& name,
                                const std::string& body) {
  const std::string path = dir.file(name);
  std::ofstream(path) << body;
  return path;
}

// Runs `python script 127.0.0.1 port rank world` for every rank and checks
// that each exits 0 within 180 s (their output is shown when one does not).
inline void run_ranks(const std::string& python, const std::string& script, uint16_t port,
                      int world) {
  std::vector<Subprocess> ranks;
  for (int r = 0; r < world; ++r)
    ranks.push_back(Subprocess::spawn({python, script, "127.0.0.1", std::to_string(port),
                                       std::to_string(r), std::to_string(world)}));
  for (auto& p : ranks) {
    auto status = p.wait(std::chrono::seconds(180));
    INFO("stdout: " << p.out() << "\nstderr: " << p.err());
    CHECK(status.ok());
  }
}

}  // namespace collie::test
