// collie-bench end to end: --nproc starts its own ranks (hosting their store
// like collie-run), every collective prints nccl-tests' columns with zero
// wrong elements, and --json holds one object per size.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "collie/test/support/skip.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

const std::string kBench = std::string(COLLIE_BIN_DIR) + "/collie-bench";

void require_built() {
  require_or_skip(::access(kBench.c_str(), X_OK) == 0,
                  kBench + " is not built (CLI11 missing at configure time)");
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("collie-bench --nproc runs every collective and checks the results", "[bench]") {
  require_built();
  for (std::string collective :
       {"all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier", "reduce", "gather",
        "scatter", "all_to_all", "all_to_all_uneven", "sendrecv", "stream"}) {
    TempDir dir;
    auto p = Subprocess::spawn({kBench,
                                "--nproc",
                                "3",
                                "-b",
                                "4",
                                "-e",
                                "96K",
                                "-f",
                                "8",
                                "-n",
                                "3",
                                "-w",
                                "1",
                                "-C",
                                collective,
                                "-r",
                                "1",
                                "-d",
                                "int32",
                                "-o",
                                "max",
                                "--json",
                                dir.file("out.json")});
    auto status = p.wait(120s);
    INFO(collective << "\nstdout:\n" << p.out() << "\nstderr:\n" << p.err());
    REQUIRE(status.ok());
    CHECK_THAT(p.out(), Contains("#wrong") && Contains("busbw") && Contains("(GB/s)"));
    CHECK_THAT(p.out(), Contains("# Out of bounds values : 0 OK"));
    std::string json = read_file(dir.file("out.json"));
    CHECK_THAT(json,
               Contains("\"collective\": \"" + collective + "\"") && Contains("\"world_size\": 3"));
    CHECK_THAT(json, Contains("\"busbw_gbps\"") && Contains("\"wrong\": 0"));
    if (collective == "all_reduce") {
      // 4 B, 32 B, 256 B, 2 KiB, 16 KiB (ring territory) rows, int32 max.
      CHECK_THAT(p.out(), Contains("16384          4096     int32     max"));
    }
  }
}

TEST_CASE("collie-bench --iter-bytes times fewer calls at the large sizes, at least one",
          "[bench]") {
  require_built();
  TempDir dir;
  // 1 KiB, 16 KiB and 256 KiB with 64 KiB of calls per size: 20 (64, capped
  // by -n), 4 (64 KiB / 16 KiB), 1 (less than one call's worth: still one).
  auto p =
      Subprocess::spawn({kBench, "--nproc", "2", "-b", "1K", "-e", "1M", "-f", "16", "-n", "20",
                         "-w", "2", "--iter-bytes", "64K", "--json", dir.file("out.json")});
  auto status = p.wait(120s);
  INFO("stdout:\n" << p.out() << "\nstderr:\n" << p.err());
  REQUIRE(status.ok());
  const std::string json = read_file(dir.file("out.json"));
  INFO(json);
  CHECK_THAT(json, Contains("\"bytes\": 1024,") && Contains("\"bytes\": 16384,") &&
                       Contains("\"bytes\": 262144,"));
  const std::string iters = "\"iters\": ";
  std::vector<int> seen;
  for (size_t at = json.find("\"results\""); (at = json.find(iters, at)) != std::string::npos;)
    seen.push_back(std::stoi(json.substr(at += iters.size())));
  CHECK(seen == std::vector<int>{20, 4, 1});
}

TEST_CASE("collie-bench refuses bad flags in one line, exit 2, before any rank starts", "[bench]") {
  require_built();
  // {flags, what the one line must name}
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-b", "12Q"}, "-b '12Q'"},
      {{"-b", "1M", "-e", "1K"}, "-b 1M"},
      {{"-e", "99999999999G"}, "-e '99999999999G'"},
      {{"-e", "99999999999999999999"}, "-e '99999999999999999999'"},
      {{"-f", "1"}, "--stepfactor"},
      {{"-n", "0"}, "--iters"},
      {{"-w", "-1"}, "--warmup_iters"},
      {{"-C", "alltoallv"}, "alltoallv"},
      {{"-d", "float7"}, "-d 'float7'"},
      {{"-o", "xor"}, "-o 'xor'"},
      {{"-c", "5"}, "-c 5"},
      {{"-r", "-1"}, "-r -1"},
      {{"-r", "3", "-C", "broadcast"}, "-r 3"},
      {{"--backend", "bogus"}, "bogus"},
      {{"--algo", "x"}, "--algo"},
      {{"--timeout", "0"}, "--timeout '0'"},
      {{"--iter-bytes", "3X"}, "--iter-bytes '3X'"},
      {{"--timeout", "5x"}, "--timeout '5x'"},
      {{"--init-method", "foo://"}, "--init-method"},
      {{"--bogus"}, "--bogus"},
      {{"--json", "/nonexistent/out.json"}, "--json /nonexistent/out.json"},
  };
  for (const auto& [flags, culprit] : cases) {
    std::vector<std::string> argv{kBench, "--nproc", "3"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto p = Subprocess::spawn(argv);
    auto status = p.wait(60s);
    INFO(p.command_line() << "\nstdout:\n" << p.out() << "\nstderr:\n" << p.err());
    CHECK(status.exit_code == 2);
    CHECK_THAT(p.err(), Contains(culprit));
    // One line, and no rank ran: a rank prints a header, or its own error.
    const std::string err = p.err();
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
    CHECK(p.out().empty());
  }
  // Without --nproc, under no launcher, the same: nothing starts.
  auto q = Subprocess::spawn({kBench, "-C", "alltoallv"});
  CHECK(q.wait(60s).exit_code == 2);
}

TEST_CASE("shm_ring_cost exchanges whole frames through the rings, across many laps", "[bench]") {
  const std::string bin = std::string(COLLIE_BIN_DIR) + "/shm_ring_cost";
  // 44 bytes: one line a frame; 5000: a frame over several records and the
  // ring's end, 2000 of them per block lap the 1 MiB ring about 10 times.
  for (const char* frame : {"44", "5000"}) {
    auto p = Subprocess::spawn({bin, frame, "2000", "3"});
    const auto status = p.wait(120s);
    INFO(p.command_line() << "\nstdout:\n" << p.out() << "\nstderr:\n" << p.err());
    CHECK(status.exit_code == 0);
    CHECK_THAT(p.out(), Contains(std::string("frame ") + frame + " B: "));
  }
  auto bad = Subprocess::spawn({bin, "0"});
  CHECK(bad.wait(60s).exit_code == 2);
}
