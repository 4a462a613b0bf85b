// bench/store_scale's smoke test: a job of a few hundred simulated ranks
// rendezvouses through collie's server (both dialects) and torch 1.13's,
// every rank completing with its neighbours' right addresses. Speed is the
// bench's business (docs/performance.md), not this test's.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "collie/test/support/skip.h"
#include "collie/test/support/subprocess.h"

namespace collie {
namespace {

using namespace std::chrono_literals;

TEST_CASE("store_scale: 256 simulated ranks rendezvous through collie's and torch's servers",
          "[tcp_store][bench]") {
  const std::string bin = std::string(COLLIE_BIN_DIR) + "/store_scale";
  if (::access(bin.c_str(), X_OK) != 0)
    test::skip_test(bin + " not built (COLLIE_BUILD_BENCH=OFF?)");
  auto p = test::Subprocess::spawn({bin, "--ranks", "256", "--runs", "1", "--procs", "2",
                                    "--timeout", "120", "--json", "--require-torch"});
  const test::ExitStatus status = p.wait(300s);
  INFO(p.out() << p.err());
  // 77: the collie runs passed and /usr/bin/python3 has no torch.
  if (status.exit_code == 77) test::skip_test("store_scale measured collie only: " + p.err());
  CHECK(status.ok());
  // --json: one object per run, each line parsed (the writer escapes the
  // error messages it carries).
  std::set<std::string> passed;
  std::istringstream lines(p.out());
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    const auto row = nlohmann::json::parse(line);
    INFO(line);
    CHECK(row.at("ok").get<bool>());
    if (row.at("run") == 0 && row.at("ok").get<bool>())
      passed.insert(row.at("server").get<std::string>());
  }
  CHECK(passed == std::set<std::string>{"collie v2", "collie 1.13", "torch 1.13"});
}

}  // namespace
}  // namespace collie
