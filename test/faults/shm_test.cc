// Faults on the shared-memory channel (COLLIE_TRANSPORT=shm): a SIGKILLed
// peer is named by every survivor (the pair's Unix socket closes with the
// process, which is how a rank waiting on a ring learns of it), and when
// every rank is SIGKILLed mid-call nothing is left in /dev/shm (segments
// are memfds: they have no name to leave behind).
#include <dirent.h>
#include <signal.h>
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "collie/base/str_cat.h"
#include "collie/test/faults/fault_harness.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

constexpr int kWorld = 3;

std::set<std::string> dev_shm() {
  std::set<std::string> names;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) names.insert(e->d_name);
    ::closedir(d);
  }
  return names;
}

std::vector<Subprocess> spawn_shm_ranks(TempDir& dir, const std::string& op) {
  return spawn_loop_ranks(kWorld, dir.file("rdzv"), op, 0, {{"COLLIE_TRANSPORT", "shm"}});
}

}  // namespace

TEST_CASE("over shared memory, a rank SIGKILLed mid-all_reduce is named by every survivor",
          "[faults][shm]") {
  for (const std::string op : {"all_reduce", "broadcast", "barrier"}) {
    TempDir dir;
    auto procs = spawn_shm_ranks(dir, op);
    wait_all_output(procs, {0, 1, 2}, "looping", std::chrono::seconds(60));
    const int64_t fault_ns = monotonic_ns();
    procs[1].kill(SIGKILL);
    double worst = 0;
    for (int rank : {0, 2}) {
      auto st = procs[rank].wait(std::chrono::seconds(30));
      const std::string out = procs[rank].out();
      INFO(op << " rank " << rank << " " << st.describe() << "\n" << out << procs[rank].err());
      CHECK(st.exit_code == 3);
      const double ms = detection_ms(out, fault_ns);
      worst = std::max(worst, ms);
      CHECK(ms < 10000);  // seconds, not the 60 s timeout; the figure is recorded
      CHECK_THAT(out, Contains("type=NetworkError") || Contains("type=BackendError"));
      CHECK_THAT(out, Contains("rank 1"));
    }
    record(str_cat("SIGKILL rank 1 of 3 during ", op, " over shm"),
           str_cat("survivors detected it after at most ", static_cast<int64_t>(worst), " ms"));
  }
}

TEST_CASE("every rank SIGKILLed mid-all_reduce over shared memory leaves nothing in /dev/shm",
          "[faults][shm]") {
  const auto before = dev_shm();
  TempDir dir;
  auto procs = spawn_shm_ranks(dir, "all_reduce");
  wait_all_output(procs, {0, 1, 2}, "looping", std::chrono::seconds(60));
  for (auto& p : procs) p.kill(SIGKILL);
  for (auto& p : procs) p.wait(std::chrono::seconds(30));
  std::vector<std::string> left;
  for (const auto& name : dev_shm()) {
    if (!before.count(name)) left.push_back(name);
  }
  INFO("new in /dev/shm: " << join(left, ", "));
  CHECK(left.empty());
}
