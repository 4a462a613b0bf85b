// ErrorRecord and ErrorFile: the structured error record a failing rank
// leaves in TORCHELASTIC_ERROR_FILE, in torchrun's JSON shape with collie's
// fields under "collie", first failure winning.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "collie/base/error_record.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using nlohmann::json;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

ErrorRecord timeout_record() {
  ErrorRecord r;
  r.error_type = "TimeoutError";
  r.message = "all_reduce(float32, 4, sum) as op #7 on rank 1 timed out";
  r.cause = FailureCause::kTimeoutUnresponsive;
  r.global_rank = 5;
  r.group_rank = 1;
  r.group_size = 3;
  r.group = "socket/1";
  r.call = "all_reduce(float32, 4, sum)";
  r.seq = 7;
  r.culprits = {{.rank = 2, .global_rank = 6, .address = "10.0.0.3:4711"}};
  r.time = std::chrono::system_clock::time_point(std::chrono::microseconds(1733500000123456));
  r.pid = 4242;
  return r;
}

}  // namespace

TEST_CASE("error record: torchrun's JSON shape, collie's fields under \"collie\"",
          "[error_record]") {
  const json j = json::parse(error_record_json(timeout_record()));
  // What torchrun's ProcessFailure reads: message.message, and
  // message.extraInfo.timestamp as whole seconds in a string (int() of it).
  REQUIRE(j.at("message").is_object());
  CHECK(j.at("message").at("message") ==
        "TimeoutError: all_reduce(float32, 4, sum) as op #7 on rank 1 timed out");
  CHECK(j.at("message").at("extraInfo").at("timestamp") == "1733500000");
  CHECK(j.at("message").at("extraInfo").at("py_callstack").is_string());
  const json& c = j.at("collie");
  CHECK(c.at("rank") == 5);
  CHECK(c.at("group") == "socket/1");
  CHECK(c.at("group_rank") == 1);
  CHECK(c.at("call") == "all_reduce(float32, 4, sum)");
  CHECK(c.at("seq") == 7);
  CHECK(c.at("cause") == "timeout_unresponsive");
  CHECK(c.at("culprits") ==
        json::array({{{"rank", 2}, {"global_rank", 6}, {"address", "10.0.0.3:4711"}}}));
  CHECK(c.at("message") == "all_reduce(float32, 4, sum) as op #7 on rank 1 timed out");
  CHECK(c.at("timestamp_us") == 1733500000123456);
  CHECK(c.at("time") == "2024-12-06T15:46:40.123456Z");
  CHECK(c.at("pid") == 4242);
}

TEST_CASE("error record: what is written is read back", "[error_record]") {
  const ErrorRecord in = timeout_record();
  const auto out = parse_error_record(error_record_json(in));
  REQUIRE(out);
  CHECK(out->error_type == in.error_type);
  CHECK(out->message == in.message);
  CHECK(out->cause == in.cause);
  CHECK(out->global_rank == 5);
  CHECK(out->group_rank == 1);
  CHECK(out->group_size == 3);
  CHECK(out->group == "socket/1");
  CHECK(out->call == in.call);
  CHECK(out->seq == 7);
  REQUIRE(out->culprits.size() == 1);
  CHECK(out->culprits[0].rank == 2);
  CHECK(out->culprits[0].global_rank == 6);
  CHECK(out->culprits[0].address == "10.0.0.3:4711");
  CHECK(out->time == in.time);
  CHECK(out->pid == 4242);
  CHECK(out->culprit_ranks() == std::vector<int>{6});
  // Every cause kind survives the round trip by name.
  for (FailureCause cause :
       {FailureCause::kTimeoutUnresponsive, FailureCause::kTimeout, FailureCause::kPeerClosed,
        FailureCause::kPeerFailed, FailureCause::kMismatch, FailureCause::kNetwork,
        FailureCause::kAborted, FailureCause::kBackend, FailureCause::kUnknown}) {
    INFO(failure_cause_name(cause));
    CHECK(parse_failure_cause(failure_cause_name(cause)) == cause);
  }
  CHECK(parse_failure_cause("a cause of the future") == FailureCause::kUnknown);
}

TEST_CASE("error record: torch's own records are read, with no culprit", "[error_record]") {
  // What torch's ErrorHandler.record_exception writes...
  auto r = parse_error_record(R"({"message": {"message": "ValueError: bad batch", "extraInfo": )"
                              R"({"py_callstack": "Traceback ...", "timestamp": "1733500001"}}})");
  REQUIRE(r);
  CHECK(r->message == "ValueError: bad batch");
  CHECK(r->cause == FailureCause::kUnknown);
  CHECK(r->culprits.empty());
  CHECK(r->time == std::chrono::system_clock::time_point(std::chrono::seconds(1733500001)));
  // ...and its newer flat shape.
  r = parse_error_record(R"j({"message": "Signal 6 (SIGABRT)", "timestamp": 1733500002})j");
  REQUIRE(r);
  CHECK(r->message == "Signal 6 (SIGABRT)");
  CHECK(r->time == std::chrono::system_clock::time_point(std::chrono::seconds(1733500002)));
  // Anything else is no record.
  CHECK_FALSE(parse_error_record(""));
  CHECK_FALSE(parse_error_record("{\"message\""));
  CHECK_FALSE(parse_error_record("[1, 2]"));
  CHECK_FALSE(parse_error_record(R"({"collie": {}})"));
  CHECK_FALSE(parse_error_record(R"({"message": {"message": 3}})"));
}

TEST_CASE("error file: the first failure wins, a stale file is replaced", "[error_record]") {
  TempDir dir;
  const std::string path = dir.file("error.json");
  {
    std::ofstream stale(path);
    stale << R"({"message": "left by an earlier process", "timestamp": 1})";
  }
  ErrorFile file(path);
  CHECK_FALSE(file.recorded());
  ErrorRecord first = timeout_record();
  CHECK(file.record(first));
  CHECK(file.recorded());
  ErrorRecord later = timeout_record();
  later.cause = FailureCause::kBackend;
  later.message = "all_reduce: the group is broken (a consequence)";
  CHECK_FALSE(file.record(later));
  const auto read = read_error_record(path);
  REQUIRE(read);
  CHECK(read->message == first.message);
  CHECK(read->cause == FailureCause::kTimeoutUnresponsive);
  // No temporary file is left beside it.
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()),
                      std::filesystem::directory_iterator()) == 1);
  // No file, or no path: nothing to read, nothing written.
  CHECK_FALSE(read_error_record(dir.file("none.json")));
  ErrorFile nowhere("");
  CHECK_FALSE(nowhere.record(first));
}

TEST_CASE("error file: unset fields come from the process and its environment", "[error_record]") {
  TempDir dir;
  const std::string path = dir.file("error.json");
  ::setenv("RANK", "4", 1);
  ::setenv("WORLD_SIZE", "3", 1);
  ErrorRecord r;
  r.message = "the connection to rank 2 closed";
  r.cause = FailureCause::kPeerClosed;
  r.group_rank = 1;
  r.group_size = 3;  // the whole job: group ranks are job ranks
  r.culprits = {{.rank = 2, .global_rank = -1, .address = "h:1"}};
  const auto before = std::chrono::system_clock::now();
  CHECK(ErrorFile(path).record(r));
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  const auto read = read_error_record(path);
  REQUIRE(read);
  CHECK(read->global_rank == 4);
  REQUIRE(read->culprits.size() == 1);
  CHECK(read->culprits[0].global_rank == 2);
  CHECK(read->pid == ::getpid());
  CHECK(read->time >= before - std::chrono::microseconds(1));
  CHECK(json::parse(slurp(path)).at("collie").at("seq").is_null());

  // A group smaller than the job: its ranks are not job ranks.
  ::setenv("WORLD_SIZE", "8", 1);
  ErrorRecord sub = r;
  fill_from_environment(sub);
  ::unsetenv("WORLD_SIZE");
  CHECK(sub.culprits[0].global_rank == -1);
  CHECK(sub.culprit_ranks().empty());
}
