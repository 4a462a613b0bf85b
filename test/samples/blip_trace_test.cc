// blip_train --trace: the job's timeline (runtime/process_group/timeline.h)
// as one Chrome trace / Perfetto file, from real ranks under collie-run.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "collie/test/samples/blip_job.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using collie::test::Subprocess;
using nlohmann::json;
using test::blip_job;
using test::quick;

namespace {

json read_trace(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return json::parse(in);  // throws (fails the test) unless the whole file is JSON
}

double end_of(const json& e) { return e.at("ts").get<double>() + e.at("dur").get<double>(); }

constexpr double kSlackUs = 20;

// Whether `inner` lies within `outer` (both stamped with CLOCK_REALTIME).
bool inside(const json& inner, const json& outer) {
  return inner.at("ts").get<double>() >= outer.at("ts").get<double>() - kSlackUs &&
         end_of(inner) <= end_of(outer) + kSlackUs;
}

// Whether a collective ended within `outer`. Its times come from the flight
// recorder's counter, converted to CLOCK_REALTIME when it completes: the end
// is exact, the start is off by the counter's rate error times the call's
// duration (on VMs whose clocks disagree, milliseconds).
bool ended_inside(const json& call, const json& outer) {
  return end_of(call) >= outer.at("ts").get<double>() && end_of(call) <= end_of(outer) + kSlackUs;
}

}  // namespace

TEST_CASE("blip_train --trace on 2 ranks writes one trace: steps holding buckets and all_reduces") {
  test::TempDir dir;
  const std::string path = dir.file("trace.json");
  // Two hidden layers of 512: DDP makes two buckets (the first closes at
  // 1 MiB), so both all_reduces of a step show.
  auto p = Subprocess::spawn(
      blip_job(2, quick({"--epochs", "1", "--max-steps", "4", "--hidden", "512", "512",
                         "--output-dir", dir.file("out"), "--trace", path})));
  auto st = p.wait(std::chrono::minutes(3));
  INFO(p.out() << p.err());
  REQUIRE(st.ok());
  CHECK_THAT(p.out(), Catch::Matchers::Contains("[rank0]: timeline written to " + path));
  const json trace = read_trace(path);

  std::set<int> named;
  std::map<int, std::vector<json>> steps, buckets, all_reduces, backwards;
  for (const json& e : trace.at("traceEvents")) {
    const int pid = e.at("pid");
    if (e.at("ph") == "M") {
      if (e.at("name") == "process_name") {
        CHECK(e.at("args").at("name") == "rank " + std::to_string(pid));
        named.insert(pid);
      }
      continue;
    }
    REQUIRE(e.at("ph") == "X");
    const std::string name = e.at("name"), cat = e.at("cat");
    if (cat == "step") steps[pid].push_back(e);
    if (cat == "ddp" && name.rfind("bucket ", 0) == 0) buckets[pid].push_back(e);
    if (cat == "ddp" && name == "backward") backwards[pid].push_back(e);
    if (cat == "collective" && name == "all_reduce") all_reduces[pid].push_back(e);
  }
  CHECK(named == std::set<int>{0, 1});
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    REQUIRE(steps[rank].size() == 4);
    CHECK(backwards[rank].size() == 4);
    REQUIRE(buckets[rank].size() == 8);  // 2 buckets x 4 steps
    std::set<std::string> bucket_names;
    for (const json& b : buckets[rank]) {
      bucket_names.insert(b.at("name"));
      CHECK(b.at("args").at("bytes").get<int64_t>() > 0);
      INFO("bucket " << b.dump());
      bool in_a_step = false;
      for (const json& s : steps[rank]) in_a_step = in_a_step || inside(b, s);
      CHECK(in_a_step);
    }
    CHECK(bucket_names == std::set<std::string>{"bucket 0 all_reduce", "bucket 1 all_reduce"});
    // Every step holds its two buckets' all_reduces, on the default group.
    for (const json& s : steps[rank]) {
      std::string listed;
      for (const json& a : all_reduces[rank]) listed += a.dump() + "\n";
      INFO("step " << s.dump() << "\nall_reduces:\n" << listed);
      int held = 0;
      for (const json& a : all_reduces[rank])
        if (ended_inside(a, s)) {
          ++held;
          CHECK(a.at("args").at("group") == "0");
          CHECK(a.at("args").at("bytes").get<int64_t>() > 0);
          CHECK(a.at("args").contains("seq"));
        }
      CHECK(held == 2);
    }
  }
  // Rank 1's clock was measured against rank 0's.
  const json& clocks = trace.at("otherData").at("ranks");
  REQUIRE(clocks.size() == 2);
  CHECK(clocks[1].at("rank") == 1);
  CHECK(clocks[1].at("rtt_begin_ns").get<int64_t>() > 0);
  CHECK(trace.at("otherData").at("missing_ranks").empty());
}

TEST_CASE("COLLIE_TRACE makes a process without a launcher write its own timeline") {
  test::TempDir dir;
  const std::string path = dir.file("alone.json");
  auto options = test::without_launcher();
  options.env.emplace("COLLIE_TRACE", path);
  auto p = Subprocess::spawn(
      [&] {
        std::vector<std::string> argv{test::kBlipTrain};
        for (const auto& a :
             quick({"--epochs", "1", "--max-steps", "3", "--output-dir", dir.file("out")}))
          argv.push_back(a);
        return argv;
      }(),
      options);
  auto st = p.wait(std::chrono::minutes(2));
  INFO(p.out() << p.err());
  REQUIRE(st.ok());
  const json trace = read_trace(path);
  int steps = 0;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "X" && e.at("cat") == "step") ++steps;
  CHECK(steps == 3);
}
