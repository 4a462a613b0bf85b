// collie-bench's --json writer (bench/collie_bench/bench_report.h): names
// with quotes, backslashes, newlines and control characters come back
// unchanged through nlohmann's parser and Python's json.loads, and numbers
// that JSON cannot hold (NaN) become null rather than an invalid file.
#include <catch2/catch.hpp>

#ifdef COLLIE_HAVE_BENCH_REPORT  // bench/ is built (COLLIE_BUILD_BENCH)

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "collie/bench/collie_bench/bench_report.h"
#include "collie/test/support/skip.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace std::chrono_literals;

TEST_CASE("collie-bench's JSON escapes names and round-trips them", "[bench][json]") {
  const std::string tricky = "a \"quoted\" \\back\\slash\nnew line\ttab \x01 caf\xc3\xa9";
  bench::RunInfo info{.collective = tricky,
                      .backend = "cpu",
                      .algorithm = "ring\\\"",
                      .world = 3,
                      .iters = 5,
                      .warmup = 1};
  bench::Row row{.bytes = 1024,
                 .count = 256,
                 .dtype = "float32",
                 .op = "s\"um\n",
                 .root = -1,
                 .time_us = 12.5,
                 .algbw_gbps = 0.25,
                 .busbw_gbps = std::numeric_limits<double>::quiet_NaN(),
                 .wrong = 0,
                 .iters = 5};
  test::TempDir dir;
  const std::string path = dir.file("out.json");
  bench::write_json(path, info, {row, row});

  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  INFO(text.str());
  const auto doc = nlohmann::json::parse(text.str());
  CHECK(doc.at("collective") == tricky);
  CHECK(doc.at("algorithm") == "ring\\\"");
  CHECK(doc.at("world_size") == 3);
  REQUIRE(doc.at("results").size() == 2);
  CHECK(doc["results"][0].at("op") == "s\"um\n");
  CHECK(doc["results"][0].at("bytes") == 1024);
  CHECK(doc["results"][0].at("time_us") == 12.5);
  CHECK(doc["results"][0].at("busbw_gbps").is_null());
  // The existing readers (bench/compare/bench_results.py) use Python's json.
  if (::access("/usr/bin/python3", X_OK) != 0) test::skip_test("no /usr/bin/python3");
  auto p = test::Subprocess::spawn(
      {"/usr/bin/python3", "-c",
       "import json, sys\n"
       "d = json.load(open(sys.argv[1], encoding='utf-8'))\n"
       "sys.stdout.buffer.write((d['collective'] + '|' + d['results'][1]['op']).encode())\n",
       path});
  REQUIRE(p.wait(60s).ok());
  CHECK(p.out() == tricky + "|s\"um\n");
}

#endif  // COLLIE_HAVE_BENCH_REPORT
