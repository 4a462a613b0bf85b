// The timeline (runtime/process_group/timeline.h): the clock alignment's
// arithmetic, and real ranks (processes over a TcpStore) whose spans and
// flight-recorder calls end up in one trace file that rank 0 writes.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/runtime/process_group/flight_recorder.h"
#include "collie/runtime/process_group/timeline.h"
#include "collie/test/support/child.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace std::chrono_literals;
using collie::test::child_argv;
using collie::test::Subprocess;
using collie::test::TempDir;
using nlohmann::json;

namespace {

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return json::parse(in);
}

}  // namespace

TEST_CASE("timeline: the offset comes from the fastest round trip's midpoint") {
  // The rank's clock is 5000 ns ahead of rank 0's. Rank 0 asks at t0 and
  // hears back at t2; the rank answered at t1 (its clock).
  std::vector<timeline::ClockSample> samples = {
      {1000, 1000 + 5000 + 900, 2000},  // slow: 1000 ns round trip, answer late
      {3000, 3000 + 5000 + 100, 3200},  // fastest: 200 ns, answered at the midpoint
      {5000, 5000 + 5000 + 10, 5600}};  // 600 ns, answered early
  const auto o = timeline::estimate_offset(samples);
  CHECK(o.rtt_ns == 200);
  CHECK(o.offset_ns == 5000);
  CHECK(o.at_ns == 3000 + 5000 + 100);
  // A negative round trip (a clock step) is no sample.
  std::vector<timeline::ClockSample> bad = {{100, 0, 50}};
  CHECK(timeline::estimate_offset(bad).rtt_ns == 0);
  CHECK(timeline::estimate_offset(bad).offset_ns == 0);
}

TEST_CASE("timeline: a rank's times are shifted onto rank 0's clock, drift interpolated") {
  const timeline::ClockOffset begin{5000, 200, 1'000'000};
  // Only the start's measurement: a constant shift.
  CHECK(timeline::to_reference_clock(1'000'000, begin, {}) == 995'000);
  CHECK(timeline::to_reference_clock(9'000'000, begin, {}) == 8'995'000);
  // 1 us of drift over 1 ms: half way, half of it.
  const timeline::ClockOffset end{6000, 300, 2'000'000};
  CHECK(timeline::to_reference_clock(1'000'000, begin, end) == 995'000);
  CHECK(timeline::to_reference_clock(1'500'000, begin, end) == 1'500'000 - 5500);
  CHECK(timeline::to_reference_clock(2'000'000, begin, end) == 1'994'000);
  // Behind rank 0 (negative offsets) too, and past the end (extrapolated).
  const timeline::ClockOffset b2{-2000, 0, 0}, e2{-4000, 0, 1000};
  CHECK(timeline::to_reference_clock(500, b2, e2) == 500 + 3000);
  CHECK(timeline::to_reference_clock(2000, b2, e2) == 2000 + 6000);
}

TEST_CASE("timeline: off, spans record nothing and finish writes nothing") {
  CHECK_FALSE(timeline::enabled());
  timeline::span("step", "step 0", 1, 2);
  CHECK(timeline::finish().empty());
}

TEST_CASE("timeline: one process without a store writes its own file") {
  TempDir dir;
  const std::string path = dir.file("trace.json");
  timeline::start(path, 0, 1);
  CHECK(timeline::enabled());
  const int64_t t0 = timeline::now_ns();
  timeline::span("step", "step 0", t0, t0 + 5000, {{"epoch", 1}, {"step", 0}});
  timeline::span("ddp bucket 0", "bucket 0", t0 + 1000, t0 + 3000, {{"bytes", 64}}, "ddp");
  const std::string odd = "a \"quoted\" \\ name\n\t\x01 \xc3\xa9";  // escaped, UTF-8 kept
  timeline::span("user \"track\"", odd, t0, t0 + 1);
  CHECK(timeline::finish() == path);
  CHECK_FALSE(timeline::enabled());
  const json trace = read_json(path);
  std::map<std::string, json> by_name;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "X") by_name[e.at("name")] = e;
  REQUIRE(by_name.count("step 0") == 1);
  REQUIRE(by_name.count("bucket 0") == 1);
  CHECK(by_name["step 0"]["dur"].get<double>() == Approx(5.0));
  CHECK(by_name["step 0"]["args"]["epoch"] == 1);
  CHECK(by_name["bucket 0"]["ts"].get<double>() - by_name["step 0"]["ts"].get<double>() ==
        Approx(1.0));
  CHECK(by_name["bucket 0"]["cat"] == "ddp");
  CHECK(by_name["bucket 0"]["pid"] == 0);
  CHECK(by_name.count(odd) == 1);
}

TEST_CASE("timeline: a bucket's span ends when its all_reduce completed, not when DDP looked") {
  TempDir dir;
  const std::string path = dir.file("bucket.json");
  timeline::start(path, 0, 1);
  FlightRecorder& fr = FlightRecorder::get();
  const int pg =
      fr.register_group({.name = "5", .desc = "buckets", .global_ranks = {0}, .rank = 0});
  auto all_reduce = [&](int64_t numel) {
    FrCall call;
    call.op = "all_reduce";
    call.in_tensors = 1;
    call.in_numel = numel;
    fr.completed(fr.record(pg, call, 1000));
  };
  all_reduce(256);  // before the bucket launched: not its all_reduce
  const int64_t launched = timeline::now_ns();
  all_reduce(100);  // another size
  all_reduce(256);  // the bucket's (1024 bytes)
  const int64_t completed = timeline::now_ns();
  const int64_t seen = completed + 50'000'000;  // DDP looked 50 ms later
  timeline::span_until_all_reduce("ddp bucket 0", "bucket 0 all_reduce", launched, seen, 1024,
                                  {{"bytes", 1024}}, "ddp");
  // No all_reduce of its size after it: the span keeps the end it was given.
  timeline::span_until_all_reduce("ddp bucket 1", "bucket 1 all_reduce", seen, seen + 1000, 4096);
  REQUIRE(timeline::finish() == path);
  const json trace = read_json(path);
  std::map<std::string, json> by_name;
  std::vector<json> calls;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    by_name[e.at("name")] = e;
    if (e.at("name") == "all_reduce" && e.at("args").at("bytes") == 1024) calls.push_back(e);
  }
  REQUIRE(calls.size() == 2);
  const json& bucket = by_name.at("bucket 0 all_reduce");
  const double bucket_end = bucket["ts"].get<double>() + bucket["dur"].get<double>();
  CHECK(bucket_end ==
        Approx(calls[1]["ts"].get<double>() + calls[1]["dur"].get<double>()).margin(0.01));
  CHECK(bucket["dur"].get<double>() < (completed - launched) / 1000.0 + 1);
  CHECK(by_name.at("bucket 1 all_reduce")["dur"].get<double>() == Approx(1.0));
}

// A rank: starts the timeline over the store, records a step span around
// two flight-recorder calls (as a backend records its collectives), and
// finishes.
COLLIE_TEST_CHILD(timeline_rank) {
  const auto port = static_cast<uint16_t>(std::stoi(args.at(0)));
  const int rank = std::stoi(args.at(1)), world = std::stoi(args.at(2));
  std::shared_ptr<Store> store = TcpStore::connect("127.0.0.1", port, {.timeout = 60s});
  timeline::start(args.at(3), rank, world, store);
  FlightRecorder& fr = FlightRecorder::get();
  std::vector<int> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(r);
  const int pg = fr.register_group(
      {.name = "0", .desc = "default_pg", .global_ranks = ranks, .backend = "cpu", .rank = rank});
  const int64_t t0 = timeline::now_ns();
  for (int i = 0; i < 2; ++i) {
    FrCall call;
    call.op = "all_reduce";
    call.in_tensors = call.out_tensors = 1;
    call.in_numel = call.out_numel = 256;
    call.algorithm = "ring";
    call.transport = "shm";
    const uint64_t id = fr.record(pg, call, 1000);
    fr.started(id);
    fr.completed(id);
  }
  timeline::span("step", "step 0", t0, timeline::now_ns(), {{"step", 0}});
  const std::string wrote = timeline::finish();
  return (rank == 0) == (wrote == args.at(3)) ? 0 : 3;
}

TEST_CASE("timeline: every rank's spans and collectives end up in rank 0's one file") {
  TempDir dir;
  const std::string path = dir.file("job.json");
  auto server = TcpStoreServer::start({.host = "127.0.0.1"});
  const int world = 3;
  std::vector<Subprocess> ranks;
  for (int r = 0; r < world; ++r)
    ranks.push_back(Subprocess::spawn(child_argv(
        "timeline_rank",
        {std::to_string(server->port()), std::to_string(r), std::to_string(world), path})));
  for (auto& p : ranks) {
    const auto status = p.wait(120s);
    INFO(p.err());
    REQUIRE(status.ok());
  }
  const json trace = read_json(path);
  std::set<int> named, stepped, collective;
  std::map<int, std::vector<json>> steps, calls;
  for (const json& e : trace.at("traceEvents")) {
    const int pid = e.at("pid");
    if (e.at("ph") == "M" && e.at("name") == "process_name") {
      CHECK(e.at("args").at("name") == "rank " + std::to_string(pid));
      named.insert(pid);
    }
    if (e.at("ph") != "X") continue;
    if (e.at("cat") == "collective") calls[pid].push_back(e);
    if (e.at("name") == "step 0") steps[pid].push_back(e);
  }
  CHECK(named == std::set<int>{0, 1, 2});
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    REQUIRE(steps[r].size() == 1);
    REQUIRE(calls[r].size() == 2);
    const double step_begin = steps[r][0]["ts"],
                 step_end = step_begin + steps[r][0]["dur"].get<double>();
    for (const json& c : calls[r]) {
      CHECK(c["name"] == "all_reduce");
      CHECK(c["args"]["group"] == "0");
      CHECK(c["args"]["bytes"] == 1024);
      CHECK(c["args"]["algorithm"] == "ring");
      CHECK(c["args"]["transport"] == "shm");
      CHECK(c["ts"].get<double>() >= step_begin);
      CHECK(c["ts"].get<double>() + c["dur"].get<double>() <= step_end + 0.001);
    }
    CHECK(calls[r][0]["args"]["seq"] != calls[r][1]["args"]["seq"]);
  }
  // Each rank's offsets were measured over the store (one host: near 0).
  const json& clocks = trace.at("otherData").at("ranks");
  REQUIRE(clocks.size() == world);
  for (const json& c : clocks) {
    if (c.at("rank") == 0) continue;
    CHECK(c.at("rtt_begin_ns").get<int64_t>() > 0);
    CHECK(c.at("rtt_end_ns").get<int64_t>() > 0);
    CHECK(std::abs(c.at("offset_begin_ns").get<int64_t>()) <=
          c.at("rtt_begin_ns").get<int64_t>() / 2 + 1);
  }
  CHECK(trace.at("otherData").at("missing_ranks").empty());
}

// A rank of a job whose rank 0 dies after start(): rank 0 returns at once
// (exit code 0 without finishing); rank 1 records a step and finishes.
COLLIE_TEST_CHILD(timeline_orphan) {
  const auto port = static_cast<uint16_t>(std::stoi(args.at(0)));
  const int rank = std::stoi(args.at(1));
  // The store's timeout bounds finish()'s waits for rank 0.
  std::shared_ptr<Store> store = TcpStore::connect("127.0.0.1", port, {.timeout = 2s});
  timeline::start(args.at(2), rank, 2, store);
  if (rank == 0) std::_Exit(0);  // dies: never finishes
  const int64_t t0 = timeline::now_ns();
  timeline::span("step", "step 0", t0, t0 + 1000);
  return timeline::finish() == args.at(2) + ".rank1.json" ? 0 : 3;
}

TEST_CASE("timeline: a rank that never hears from rank 0 writes its own part") {
  TempDir dir;
  const std::string path = dir.file("orphan.json");
  auto server = TcpStoreServer::start({.host = "127.0.0.1"});
  std::vector<Subprocess> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(Subprocess::spawn(
        child_argv("timeline_orphan", {std::to_string(server->port()), std::to_string(r), path})));
  for (auto& p : ranks) {
    const auto status = p.wait(60s);
    INFO(p.err());
    REQUIRE(status.ok());
  }
  CHECK_FALSE(std::filesystem::exists(path));
  const json part = read_json(path + ".rank1.json");
  int steps = 0;
  for (const json& e : part.at("traceEvents")) {
    CHECK(e.at("pid") == 1);
    if (e.at("ph") == "X" && e.at("name") == "step 0") ++steps;
  }
  CHECK(steps == 1);
}

TEST_CASE("timeline: a span and a recorded collective cost well under a microsecond", "[cost]") {
  // Speed is not asserted (the machine is shared); the figures are printed
  // for docs/performance.md ("Timeline (trace) cost").
  constexpr int kCalls = 200000;
  auto per_call_ns = [](auto&& body) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) body(i);
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
               .count() /
           kCalls;
  };
  const double off = per_call_ns([](int i) { timeline::span("step", "step", i, i + 1); });
  TempDir dir;
  timeline::start(dir.file("cost.json"), 0, 1);
  const double on = per_call_ns([](int i) {
    timeline::span("ddp bucket 0", "bucket 0 all_reduce", i, i + 1, {{"b", 0}});
  });
  FlightRecorder& fr = FlightRecorder::get();
  const int pg = fr.register_group({.name = "7", .desc = "cost", .global_ranks = {0}, .rank = 0});
  FrCall call;
  call.op = "all_reduce";
  call.in_tensors = 1;
  call.in_numel = 1;
  const double recorder_on = per_call_ns([&](int) { fr.completed(fr.record(pg, call, 1000)); });
  timeline::finish();
  const double recorder_off = per_call_ns([&](int) { fr.completed(fr.record(pg, call, 1000)); });
  std::printf(
      "timeline: span() %.1f ns off, %.1f ns on; a recorded collective %.1f ns without the "
      "timeline, %.1f ns with it\n",
      off, on, recorder_off, recorder_on);
  CHECK(on > 0);
}
