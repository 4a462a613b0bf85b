// FlightRecorder: the ring of recent calls, its states and times, the
// pickle torch's analyser reads (checked by loading it in Python) and the
// JSON state collie-run reads.
#include "collie/runtime/process_group/flight_recorder.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "collie/base/str_cat.h"
#include "collie/runtime/process_group/fr_pickle.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

namespace collie {
namespace {

using namespace std::chrono_literals;
using test::Subprocess;
using test::TempDir;

FrCall all_reduce_call(int64_t numel) {
  FrCall c;
  c.op = "all_reduce";
  c.in_tensors = c.out_tensors = 1;
  c.in_numel = c.out_numel = numel;
  c.reduce_op = 0;
  c.algorithm = "small";
  c.transport = "shm";
  return c;
}

// Runs `script` in Debian's python3 with the file at argv[1]; returns stdout.
std::string python(const std::string& script, const std::string& file) {
  auto p = Subprocess::spawn({"/usr/bin/python3", "-c", script, file});
  auto st = p.wait(60s);
  INFO(p.err());
  REQUIRE(st.exit_code == 0);
  return p.out();
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST_CASE("entries record state, sequence numbers and times", "[fr]") {
  FlightRecorder fr(8);
  fr.set_timing(GENERATE(false, true));
  const int pg = fr.register_group({"0", "default_pg", {0, 1}, "collie", 0});
  const uint64_t a = fr.record(pg, all_reduce_call(4), 1000);
  fr.completed(a);
  const uint64_t b = fr.record(pg, all_reduce_call(8), 1000);
  fr.started(b);
  FrCall send;
  send.op = "send";
  send.p2p = true;
  send.peer = 1;
  const uint64_t c = fr.record(pg, send, 1000);
  fr.failed(c, "peer closed");
  const auto es = fr.entries();
  REQUIRE(es.size() == 3);
  CHECK(es[0].state == FrState::kCompleted);
  CHECK(es[0].collective_seq_id == 1);
  CHECK(es[0].time_completed_ns >= es[0].time_started_ns);
  CHECK(es[0].time_started_ns >= es[0].time_created_ns);
  CHECK(es[1].state == FrState::kStarted);
  CHECK(es[1].collective_seq_id == 2);
  CHECK(es[1].time_completed_ns == 0);
  CHECK(es[2].state == FrState::kFailed);
  CHECK(es[2].p2p_seq_id == 1);
  CHECK(es[2].collective_seq_id == 2);  // p2p calls leave the collective count alone
  CHECK(es[2].error == "peer closed");
  // The clock is CLOCK_REALTIME's: within a second of the system clock.
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  CHECK(std::abs(now - es[0].time_created_ns) < 1'000'000'000);
}

TEST_CASE("the ring keeps the newest entries", "[fr]") {
  FlightRecorder fr(4);
  const int pg = fr.register_group({"0", "default_pg", {0}, "collie", 0});
  for (int i = 0; i < 10; ++i) fr.completed(fr.record(pg, all_reduce_call(i), 0));
  const auto es = fr.entries();
  REQUIRE(es.size() == 4);
  CHECK(es.front().collective_seq_id == 7);
  CHECK(es.back().collective_seq_id == 10);
  // A completion of an entry the ring already dropped changes nothing.
  fr.completed(1);
  CHECK(fr.entries().front().collective_seq_id == 7);
}

TEST_CASE("a recorder of capacity 0 records nothing", "[fr]") {
  FlightRecorder fr(0);
  const int pg = fr.register_group({"0", "default_pg", {0}, "collie", 0});
  CHECK(fr.record(pg, all_reduce_call(1), 0) == 0);
  CHECK(fr.entries().empty());
}

TEST_CASE("the dump is the pickle torch's recorder writes", "[fr]") {
  FlightRecorder fr(16);
  fr.set_timing(true);  // durations, as with TORCH_NCCL_ENABLE_TIMING
  const int world = fr.register_group({"0", "default_pg", {0, 1, 2, 3}, "collie", 1});
  const int sub = fr.register_group({"1", "undefined", {1, 3}, "collie", 0});
  fr.completed(fr.record(world, all_reduce_call(1024), 2000));
  fr.record(sub, all_reduce_call(3), 2000);  // pending
  FrCall recv;
  recv.op = "recv";
  recv.p2p = true;
  recv.peer = 1;
  recv.in_tensors = recv.out_tensors = 1;
  recv.in_numel = recv.out_numel = 5;
  recv.in_dtype = recv.out_dtype = DataType::kInt64;
  fr.completed(fr.record(sub, recv, 2000));
  TempDir dir;
  write(dir.file("dump"), fr.dump_pickle());
  const std::string out = python(R"(
import pickle, sys
d = pickle.load(open(sys.argv[1], "rb"))
print(sorted(d.keys()))
print(d["version"], d["pg_config"]["0"], d["pg_config"]["1"])
print(sorted(d["pg_status"]["0"].items()))
for e in d["entries"]:
    print(e["record_id"], e["pg_id"], e["process_group"], e["profiling_name"], e["collective_seq_id"],
          e["p2p_seq_id"], e["input_sizes"], e["input_dtypes"], e["state"], e["retired"],
          e["is_p2p"], e["timeout_ms"], "duration_ms" in e, type(e["time_created_ns"]).__name__)
)",
                                 dir.file("dump"));
  INFO(out);
  CHECK_THAT(out, Catch::Matchers::Contains(
                      "['comm_lib_version', 'entries', 'pg_config', 'pg_status', 'version']"));
  CHECK_THAT(out, Catch::Matchers::Contains(
                      "2.10 {'name': '0', 'desc': 'default_pg', 'ranks': '[0, 1, 2, 3]'} "
                      "{'name': '1', 'desc': 'undefined', 'ranks': '[1, 3]'}"));
  CHECK_THAT(out, Catch::Matchers::Contains("[('last_completed_collective', 1), "
                                            "('last_enqueued_collective', 1), "
                                            "('last_started_collective', 1)]"));
  CHECK_THAT(out,
             Catch::Matchers::Contains("0 0 ('0', 'default_pg') collie:all_reduce 1 0 "
                                       "[[1024]] ['Float'] completed True False 2000 True int"));
  CHECK_THAT(out, Catch::Matchers::Contains("1 1 ('1', 'undefined') collie:all_reduce 1 0 [[3]] "
                                            "['Float'] scheduled False False 2000 False int"));
  CHECK_THAT(out, Catch::Matchers::Contains("2 1 ('1', 'undefined') collie:recv 0<-1 1 1 [[5]] "
                                            "['Long'] completed True True 2000 True int"));
}

TEST_CASE("the pickle writer's values load in Python", "[fr]") {
  PickleWriter w;
  w.begin_list();
  w.integer(-5);
  w.integer(int64_t{1} << 40);
  w.integer(-(int64_t{1} << 40));
  w.real(0.25);
  w.boolean(true);
  w.none();
  w.str("h\xc3\xa9");
  w.tuple2("a", "b");
  w.begin_dict();
  w.end_dict();
  w.end_list();
  TempDir dir;
  write(dir.file("p"), w.finish());
  CHECK(python("import pickle,sys; print(pickle.load(open(sys.argv[1],'rb')))", dir.file("p")) ==
        "[-5, 1099511627776, -1099511627776, 0.25, True, None, 'h\xc3\xa9', ('a', 'b'), {}]\n");
}

TEST_CASE("the state names each group's last completed and pending calls", "[fr]") {
  FlightRecorder fr(16);
  fr.set_global_rank(3);
  const int pg = fr.register_group({"0", "default_pg", {0, 1, 2, 3}, "collie", 3});
  fr.completed(fr.record(pg, all_reduce_call(4), 2000));
  const uint64_t pending = fr.record(pg, all_reduce_call(8), 2000);
  fr.started(pending);
  std::this_thread::sleep_for(50ms);  // so that it has waited measurably (a coarse clock)
  const auto j = nlohmann::json::parse(fr.state_json());
  INFO(j.dump(1));
  CHECK(j["rank"] == 3);
  REQUIRE(j["groups"].size() == 1);
  const auto& g = j["groups"][0];
  CHECK(g["name"] == "0");
  CHECK(g["last_completed"]["seq"] == 1);
  REQUIRE(g["pending"].size() == 1);
  CHECK(g["pending"][0]["seq"] == 2);
  CHECK(g["pending"][0]["state"] == "started");
  CHECK(g["pending"][0]["waited_ms"].get<double>() >= 30.0);
  CHECK_FALSE(g["last_completed"].contains("duration_ms"));  // timing off: no durations
  CHECK(g["pending"][0]["waited_ms"].get<double>() < 5000.0);
}

TEST_CASE("dump_flight_recorder() and SIGUSR2 write this rank's dump and state", "[fr]") {
  TempDir dir;
  ::setenv("TORCH_FR_DUMP_TEMP_FILE", dir.file("trace_").c_str(), 1);
  ::setenv("COLLIE_FR_STATE_DIR", dir.path().c_str(), 1);
  FlightRecorder& fr = FlightRecorder::get();
  fr.set_global_rank(7);
  const int pg = fr.register_group({"9", "undefined", {7}, "collie", 0});
  fr.completed(fr.record(pg, all_reduce_call(16), 1000));
  CHECK(dump_flight_recorder() == dir.file("trace_7"));
  CHECK(std::filesystem::exists(dir.file("trace_7")));
  CHECK(std::filesystem::exists(dir.file("rank7.json")));
  std::filesystem::remove(dir.file("trace_7"));
  // The signal: the dump thread writes it (register_group started it).
  ::raise(SIGUSR2);
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (!std::filesystem::exists(dir.file("trace_7")) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(10ms);  // polling for the file the thread writes
  CHECK(std::filesystem::exists(dir.file("trace_7")));
  const std::string out = python(R"(
import pickle, sys
d = pickle.load(open(sys.argv[1], "rb"))
print([e["profiling_name"] for e in d["entries"] if e["process_group"][0] == "9"])
)",
                                 dir.file("trace_7"));
  CHECK(out == "['collie:all_reduce']\n");
  ::unsetenv("TORCH_FR_DUMP_TEMP_FILE");
  ::unsetenv("COLLIE_FR_STATE_DIR");
}

}  // namespace
}  // namespace collie
