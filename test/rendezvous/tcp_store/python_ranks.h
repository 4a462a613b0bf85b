// What the torch interop tests share (torch_interop_test.cc for torch 1.13,
// torch2_interop_test.cc for 2.x): a script written into a temp folder,
// `world` ranks of it run against a store on 127.0.0.1, and the queries
// every torch server answers.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

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

// The queries both torch dialects serve, against a server whose Python side
// set "/hello" to "world" and never touches "/n", "/cs" or "/from_collie".
inline void check_basic_queries(TcpStore& store) {
  CHECK(to_string(store.get("/hello")) == "world");
  store.set("/from_collie", "x");
  CHECK(store.add("/n", 4) == 4);
  CHECK(store.add("/n", 1) == 5);
  CHECK(to_string(store.compare_set("/cs", as_span(""), as_span("v1"))) == "v1");
  CHECK(to_string(store.compare_set("/cs", as_span("v1"), as_span("v2"))) == "v2");
  CHECK(to_string(store.compare_set("/cs", as_span("zz"), as_span("v3"))) == "v2");
  CHECK(store.check({"/hello", "/n"}));
  CHECK(!store.check({"/absent"}));
  const int64_t keys = store.num_keys();
  CHECK(store.delete_key("/cs"));
  CHECK(store.num_keys() == keys - 1);
}

}  // namespace collie::test
