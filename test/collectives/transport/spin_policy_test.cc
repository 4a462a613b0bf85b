// SpinPolicy's co-location rule (collectives/transport/waiting.h): a streak
// of waits that each ended right after a yield in which another task ran on
// this CPU moves the thread, once per streak, to its home CPU; any other
// wait breaks the streak; with no home CPU nothing moves. And the two
// helpers it uses: home_cpu() spreads a host's ranks over the allowed CPUs,
// move_to_cpu() moves without binding (the CPU mask is the same after).
// bench/collie_bench shows the effect on a fresh job's first calls
// (docs/performance.md, "The first calls of a job").
#include <sched.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "collie/collectives/transport/waiting.h"

using namespace collie;
using namespace std::chrono_literals;

namespace {

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

}  // namespace

TEST_CASE("a streak of waits after shared yields moves the rank to its home CPU, once") {
  const auto cpus = allowed_cpus();
  const int home = cpus.back();
  SpinPolicy p(50us, 5us, home);
  for (uint32_t i = 1; i < SpinPolicy::kSharedStreak; ++i) CHECK_FALSE(p.note_wait(true));
  CHECK(p.note_wait(true));
  CHECK(p.moves() == 1);
  // The streak starts again: the next shared yield alone moves nothing.
  if (SpinPolicy::kSharedStreak > 1) CHECK_FALSE(p.note_wait(true));
  CHECK(p.moves() == 1);
  // Moved, not bound: the mask is what it was.
  CHECK(allowed_cpus() == cpus);
}

TEST_CASE("a wait that did not follow a shared yield breaks the streak") {
  SpinPolicy p(50us, 5us, allowed_cpus().front());
  for (int round = 0; round < 10; ++round) {
    for (uint32_t i = 1; i < SpinPolicy::kSharedStreak; ++i) CHECK_FALSE(p.note_wait(true));
    CHECK_FALSE(p.note_wait(false));
  }
  CHECK(p.moves() == 0);
}

TEST_CASE("with no home CPU (oversubscribed ranks) nothing moves") {
  SpinPolicy p(20us, 0us);
  for (int i = 0; i < 100; ++i) CHECK_FALSE(p.note_wait(true));
  CHECK(p.moves() == 0);
}

TEST_CASE("home_cpu spreads a host's ranks over the allowed CPUs") {
  const auto cpus = allowed_cpus();
  const int n = static_cast<int>(cpus.size());
  CHECK(home_cpu(-1, 2) == -1);  // not a rank with a core of its own
  CHECK(home_cpu(0, 1) == -1);   // alone on its host
  CHECK(home_cpu(0, n + 1) == -1);
  if (n >= 2) {
    CHECK(home_cpu(0, 2) == cpus[0]);
    CHECK(home_cpu(1, 2) == cpus[static_cast<size_t>(n / 2)]);
    CHECK(home_cpu(0, 2) != home_cpu(1, 2));
  }
}

TEST_CASE("move_to_cpu refuses a CPU outside the mask and leaves the mask as it was") {
  const auto cpus = allowed_cpus();
  CHECK_FALSE(move_to_cpu(-1));
  CHECK_FALSE(move_to_cpu(CPU_SETSIZE));
  int outside = 0;
  while (std::find(cpus.begin(), cpus.end(), outside) != cpus.end()) ++outside;
  if (outside < CPU_SETSIZE) CHECK_FALSE(move_to_cpu(outside));
  for (int c : cpus) CHECK(move_to_cpu(c));
  CHECK(allowed_cpus() == cpus);
}
