// Growing a cpu group, one thread per rank over one in-process store: a
// process that gave up waiting withdraws its ticket, so the members' next
// grow admits nobody and the group goes on; one that waits is admitted and
// the grown group's collectives are right.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "collie/base/error.h"
#include "collie/rendezvous/hash_store.h"
#include "collie/runtime/cpu/cpu_process_group.h"

using namespace collie;
using namespace std::chrono_literals;

namespace {

std::vector<std::shared_ptr<CpuProcessGroup>> make_group(std::shared_ptr<Store> store, int size) {
  std::vector<std::shared_ptr<CpuProcessGroup>> groups(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      groups[r] = CpuProcessGroup::create(BackendContext{store, r, size, 30s, "g", "tcp", ""});
    });
  for (auto& t : threads) t.join();
  return groups;
}

// Every rank's all_reduce of its rank + 1: the sum 1 + ... + size.
void check_sum(std::vector<std::shared_ptr<CpuProcessGroup>>& groups) {
  const int size = static_cast<int>(groups.size());
  std::vector<std::thread> threads;
  std::vector<float> got(size);
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      float v = static_cast<float>(groups[r]->rank() + 1);
      groups[r]->all_reduce(view(&v, 1))->wait();
      got[r] = v;
    });
  for (auto& t : threads) t.join();
  for (float v : got) CHECK(v == size * (size + 1) / 2.0f);
}

}  // namespace

TEST_CASE("a joiner that gave up is not admitted and one that waits is") {
  auto store = std::make_shared<HashStore>();
  auto groups = make_group(store, 2);
  // Nobody grows while it waits: it withdraws and says why.
  CHECK_THROWS_AS(CpuProcessGroup::join(BackendContext{store, -1, -1, 200ms, "g", "tcp", ""}),
                  TimeoutError);
  std::vector<GrowResult> grown(2);
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) threads.emplace_back([&, r] { grown[r] = groups[r]->grow(30s); });
    for (auto& t : threads) t.join();
  }
  for (auto& g : grown) {
    CHECK(g.joined == 0);
    CHECK(g.group == nullptr);
  }
  check_sum(groups);  // the group goes on as it was

  // A joiner that waits is admitted at the next grow, as rank 2 of 3.
  std::shared_ptr<CpuProcessGroup> joiner;
  std::thread join([&] {
    joiner = CpuProcessGroup::join(BackendContext{store, -1, -1, 30s, "g", "tcp", ""});
  });
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      // Until it has asked, a grow admits nobody; the members retry at
      // their next step boundary, as a trainer does.
      const Deadline deadline(60s);
      while (!deadline.expired()) {
        GrowResult g = groups[r]->grow(30s);
        if (g.joined > 0) {
          grown[r] = std::move(g);
          return;
        }
      }
      FAIL("rank " << r << ": the joiner was not admitted within 60 s");
    });
  for (auto& t : threads) t.join();
  join.join();
  std::vector<std::shared_ptr<CpuProcessGroup>> bigger{
      std::dynamic_pointer_cast<CpuProcessGroup>(grown[0].group),
      std::dynamic_pointer_cast<CpuProcessGroup>(grown[1].group), joiner};
  REQUIRE(bigger[0] != nullptr);
  CHECK(bigger[0]->size() == 3);
  CHECK(joiner->rank() == 2);
  check_sum(bigger);
}
