// collie-bench end to end: --nproc starts its own ranks (hosting their store
// like collie-run), every collective prints nccl-tests' columns with zero
// wrong elements, and --json holds one object per size.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <fstream>
#include <sstream>

#include "test/support/subprocess.h"
#include "test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

const std::string kBench = std::string(COLLIE_BIN_DIR) + "/collie-bench";

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("collie-bench --nproc runs every collective and checks the results", "[bench]") {
  if (::access(kBench.c_str(), X_OK) != 0) {
    WARN("skipped: " << kBench << " is not built");
    return;
  }
  for (std::string collective :
       {"all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier"}) {
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

TEST_CASE("collie-bench rejects bad arguments with a message", "[bench]") {
  if (::access(kBench.c_str(), X_OK) != 0) return;
  auto p = Subprocess::spawn({kBench, "--nproc", "1", "-b", "12Q"});
  auto status = p.wait(60s);
  CHECK_FALSE(status.ok());
  CHECK_THAT(p.err(), Contains("12Q"));
  auto q = Subprocess::spawn({kBench, "-C", "all_to_all"});
  CHECK_FALSE(q.wait(60s).ok());
}
