// A rank that stops responding (SIGSTOP) in the middle of an all_reduce
// loop: its sockets stay open, so nothing tells the others it is gone; they
// must time out at the call's own short deadline with a message naming the
// collective, its sequence number and the silent rank, and a later call
// must be refused at once. The stopped rank is continued and killed after.
#include <catch2/catch.hpp>
#include <signal.h>

#include "runtime/base/str_cat.h"
#include "test/faults/fault_harness.h"
#include "test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

TEST_CASE("a rank stopped by SIGSTOP mid-all_reduce: the others time out naming it", "[faults][hang]") {
  constexpr int kWorld = 3, kStopped = 2;
  constexpr int kCallTimeoutMs = 2000;
  TempDir dir;
  auto procs = spawn_ranks(kWorld, "loop_rank", [&](int rank) {
    return std::vector<std::string>{"file:" + dir.file("rdzv"), "all_reduce", std::to_string(rank),
                                    std::to_string(kWorld), "-", std::to_string(kCallTimeoutMs), "60"};
  });
  wait_all_output(procs, {0, 1, 2}, "looping", std::chrono::seconds(60));
  const int64_t fault_ns = monotonic_ns();
  procs[kStopped].kill(SIGSTOP);
  bool someone_named_it = false;
  for (int rank = 0; rank < kStopped; ++rank) {
    auto st = procs[rank].wait(std::chrono::seconds(30));
    std::string out = procs[rank].out();
    INFO("rank " << rank << " " << st.describe() << "\n" << out << procs[rank].err());
    CHECK(st.exit_code == 3);
    double ms = detection_ms(out, fault_ns);
    // At least the call's timeout, and not much more (generous bound).
    CHECK(ms < kCallTimeoutMs + 8000);
    CHECK_THAT(out, Contains("all_reduce"));
    CHECK_THAT(out, Contains("#"));
    someone_named_it = someone_named_it || out.find(str_cat("rank ", kStopped)) != std::string::npos;
    auto later = find_int(out, "later_ms");
    REQUIRE(later.has_value());
    CHECK(*later < 1000);
    size_t t = out.find("type=");
    record("SIGSTOP rank 2 of 3 during all_reduce (call timeout 2 s)",
           str_cat("rank ", rank, " failed after ", static_cast<int64_t>(ms), " ms: ",
                   out.substr(t, out.find('\n', t) - t)));
  }
  // Rank 0 waits on rank 2 directly and names it when its own timeout
  // fires first. When rank 1's fires first it blames rank 0 (whom it waits
  // on); rank 0 then adds its own outstanding receive from rank 2 to the
  // relayed timeout instead of replacing it, so rank 2 is still named.
  CHECK(someone_named_it);
  procs[kStopped].kill(SIGCONT);
  procs[kStopped].kill(SIGKILL);
  procs[kStopped].wait(std::chrono::seconds(10));
}
