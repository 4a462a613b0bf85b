// CallLog: the record a backend without per-message headers (NCCL) puts in
// the store to name the ranks behind a hang and the two calls of a mismatch.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>

#include "collie/runtime/process_group/call_log.h"

using namespace collie;
using Catch::Matchers::Contains;

TEST_CASE("a record round-trips through parse() and keeps only the window") {
  CallLog log(2);
  CHECK(log.issue("all_reduce(float32, 4, sum)") == 1);
  CHECK(log.issue("broadcast(int64, 1, root 0)") == 2);
  CHECK(log.issue("barrier()") == 3);
  log.complete(2);
  CHECK(log.changed());
  const auto rec = CallLog::parse(log.record());
  CHECK_FALSE(log.changed());
  REQUIRE(rec);
  CHECK(rec->issued == 3);
  CHECK(rec->completed == 2);
  REQUIRE(rec->recent.size() == 2);
  CHECK(rec->recent.at(2) == "broadcast(int64, 1, root 0)");
  CHECK(rec->recent.at(3) == "barrier()");
  CHECK(log.signature(1).empty());
  CHECK(log.signature(3) == "barrier()");
}

TEST_CASE("parse() refuses what is not a record") {
  CHECK_FALSE(CallLog::parse(""));
  CHECK_FALSE(CallLog::parse("collie-calls 1\nissued 3\n"));
  CHECK_FALSE(CallLog::parse("collie-calls 1\nissued x\ncompleted 0\n"));
  CHECK_FALSE(CallLog::parse("something else\nissued 1\ncompleted 0\n"));
  CHECK(CallLog::parse("collie-calls 1\nissued 0\ncompleted 0\n"));
}

TEST_CASE("first_mismatch compares only the sequence numbers both records hold") {
  CallLog a, b;
  a.issue("all_reduce(float32, 4, sum)");
  a.issue("all_reduce(float32, 8, sum)");
  b.issue("all_reduce(float32, 4, sum)");
  const auto ra = *CallLog::parse(a.record());
  auto rb = *CallLog::parse(b.record());
  CHECK_FALSE(first_mismatch(ra, rb));  // b is behind, not different
  b.issue("broadcast(float32, 8, root 1)");
  rb = *CallLog::parse(b.record());
  const auto m = first_mismatch(ra, rb);
  REQUIRE(m);
  CHECK(m->seq == 2);
  CHECK(m->a == "all_reduce(float32, 8, sum)");
  CHECK(m->b == "broadcast(float32, 8, root 1)");
}

TEST_CASE("describe_progress names the ranks behind, stuck and silent") {
  auto rec = [](uint64_t issued, uint64_t completed) {
    return CallLog::Record{issued, completed, {}};
  };
  std::vector<std::optional<CallLog::Record>> records = {rec(5, 4), rec(4, 4), rec(5, 4),
                                                         std::nullopt};
  const std::string text = describe_progress(5, 0, records);
  CHECK_THAT(text, Contains("rank 1 (last called #4) is behind: never called op #5"));
  CHECK_THAT(text, Contains("rank 3 published no progress"));
  CHECK_THAT(text, Contains("rank 2 called op #5 and did not finish it either"));
}

TEST_CASE("recording a call costs well under the 5 us budget", "[cost]") {
  // Speed is not asserted (the machine is shared); the figure is printed for
  // docs/performance.md ("NCCL mismatch check").
  CallLog log;
  constexpr int kCalls = 200000;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) log.issue("all_reduce(float32, 1048576, sum)");
  const double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
      kCalls;
  std::printf("CallLog::issue: %.1f ns per call\n", ns);
  CHECK(log.issued() == kCalls);
}
