// An epoch that loses ranks half-way still trains on every sample exactly
// once: DistributedSampler::remaining_indices and EpochPlan::reshard,
// counted over whole epochs with a failure after every possible step, for
// world sizes 4 -> 3, 8 -> 6, 8 -> 6 -> 5 (two failures) and 3 -> 2, on
// dataset lengths that divide evenly and that do not (torch's padding),
// with and without drop_last.
#include <catch2/catch.hpp>

#include <map>
#include <numeric>
#include <set>

#include "collie/base/error.h"
#include "collie/nn/distributed_sampler.h"
#include "collie/nn/epoch_plan.h"

using namespace collie;
using namespace collie::nn;

namespace {

struct Case {
  size_t len;
  std::vector<int> worlds;  // the world of each part of the epoch
  size_t batch;
  bool drop_last;
};

std::string describe(const Case& c) {
  std::string w;
  for (int x : c.worlds) w += (w.empty() ? "" : "->") + std::to_string(x);
  return "len " + std::to_string(c.len) + " worlds " + w + " batch " + std::to_string(c.batch) +
         (c.drop_last ? " drop_last" : "");
}

// Trains one epoch on paper: every rank of the first world follows its plan
// until `fail_after[i]` steps of part i completed, then the survivors
// (ranks 0..W'-1 of the next world) reshard, and so on; the last part runs
// to the end. Returns how often each dataset index was trained on, and
// checks that every rank of a part has the same number of steps and that
// the re-dealt first step is the failed one's global batch.
std::map<int64_t, int> run_epoch(const Case& c, const std::vector<size_t>& fail_after) {
  std::map<int64_t, int> count;
  std::vector<EpochPlan> plans;
  for (int r = 0; r < c.worlds[0]; ++r) {
    DistributedSampler s(c.len, c.worlds[0], r, true, 7, c.drop_last);
    s.set_epoch(3);
    plans.emplace_back(s, c.batch);
  }
  for (size_t part = 0; part < c.worlds.size(); ++part) {
    const bool last = part + 1 == c.worlds.size();
    const size_t steps = plans[0].num_steps();
    for (const auto& p : plans) REQUIRE(p.num_steps() == steps);
    const size_t done = last ? steps : std::min(fail_after[part], steps);
    for (size_t k = 0; k < done; ++k) {
      float weights = 0;
      size_t global = 0;
      for (const auto& p : plans) {
        for (int64_t i : p.batch(k)) ++count[i];
        weights += p.batch_weight(k);
        global += p.batch(k).size();
      }
      CHECK(global == plans[0].global_batch_size(k));
      // DDP averages the weighted per-rank means: the global mean.
      CHECK(weights == Approx(static_cast<float>(plans.size())));
    }
    if (last) break;
    const int next = c.worlds[part + 1];
    std::vector<EpochPlan> survivors;
    for (int r = 0; r < next; ++r) survivors.push_back(plans[0].reshard(done, next, r));
    // The first step of the survivors is the failed step, re-dealt.
    if (done < steps && survivors[0].num_steps() > 0) {
      std::multiset<int64_t> failed, redo;
      for (const auto& p : plans)
        for (int64_t i : p.batch(done)) failed.insert(i);
      for (const auto& p : survivors)
        for (int64_t i : p.batch(0)) redo.insert(i);
      // Equal, but for old padding in the failed step, which is dropped.
      for (int64_t i : redo) CHECK(failed.count(i) >= redo.count(i));
      CHECK(survivors[0].consumed_after(0) == plans[0].consumed_after(done));
    }
    plans = std::move(survivors);
  }
  return count;
}

}  // namespace

TEST_CASE("a failure mid-epoch: the survivors' reshard trains on every sample exactly once") {
  const std::vector<Case> cases = {
      {1000, {4, 3}, 16, false},   // even
      {1001, {4, 3}, 16, false},   // uneven: torch pads 3 in world 4
      {1001, {4, 3}, 16, true},    // drop_last: 1 sample dropped
      {999, {8, 6}, 10, false},    // uneven, pads 1 in world 8
      {960, {8, 6}, 10, false},    //
      {997, {8, 6, 5}, 7, false},  // two failures in one epoch
      {50, {3, 2}, 64, false},     // one step per epoch
      {17, {8, 6}, 1, false},      // fewer samples per step than ranks
  };
  for (const Case& c : cases) {
    DistributedSampler first(c.len, c.worlds[0], 0, true, 7, c.drop_last);
    first.set_epoch(3);
    const size_t real = first.real_size();  // distinct samples torch's list holds
    std::set<int64_t> expected;
    {
      auto order = first.global_order();
      expected.insert(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(real));
    }
    const size_t steps = EpochPlan(first, c.batch).num_steps();
    // Every failure point, in the first part and (with two failures) in the
    // second one too.
    for (size_t f0 = 0; f0 <= steps; ++f0) {
      for (size_t f1 : {size_t(0), size_t(3), size_t(1000)}) {
        INFO(describe(c) << " fail after " << f0 << " then " << f1);
        auto count = run_epoch(c, {f0, f1});
        if (f0 == steps && c.worlds.size() == 2) {
          // The whole epoch ran in the first world: torch's padding repeats
          // (total - real) samples; nothing is left for the survivors.
          size_t repeats = 0;
          for (auto [i, n] : count) repeats += static_cast<size_t>(n - 1);
          CHECK(repeats == first.total_size() - real);
          continue;
        }
        std::set<int64_t> seen;
        for (auto [i, n] : count) {
          INFO("index " << i);
          seen.insert(i);
          if (f0 < steps) CHECK(n == 1);
        }
        if (f0 < steps) CHECK(seen == expected);
        if (c.worlds.size() == 2) break;  // f1 means nothing with one failure
      }
    }
  }
}

TEST_CASE("without a failure an EpochPlan batches exactly like DataLoader over indices()") {
  for (size_t len : {0, 7, 100, 1001})
    for (int world : {1, 3, 4})
      for (size_t batch : {1, 16, 64})
        for (int rank = 0; rank < world; ++rank) {
          INFO(len << " " << world << " " << batch << " " << rank);
          DistributedSampler s(len, world, rank, true, 3);
          s.set_epoch(1);
          EpochPlan plan(s, batch);
          const auto mine = s.indices();
          CHECK(plan.num_steps() == (mine.size() + batch - 1) / batch);
          std::vector<int64_t> all;
          for (size_t k = 0; k < plan.num_steps(); ++k) {
            auto b = plan.batch(k);
            CHECK(b.size() == std::min(batch, mine.size() - k * batch));
            CHECK(plan.batch_weight(k) == 1.0f);
            all.insert(all.end(), b.begin(), b.end());
          }
          CHECK(all == mine);
        }
}

TEST_CASE("remaining_indices deals the unpadded rest of the order like a resharded plan") {
  DistributedSampler s(1001, 4, 1, true, 11);
  s.set_epoch(5);
  const auto order = s.global_order();
  REQUIRE(order.size() == 1004);  // padded by 3
  REQUIRE(s.real_size() == 1001);
  EpochPlan plan(s, 16);
  const size_t done = 7;
  const size_t consumed = plan.consumed_after(done);
  CHECK(consumed == done * 4 * 16);
  CHECK(plan.steps_for(consumed) == done);
  CHECK_THROWS_AS(plan.steps_for(consumed + 1), InvalidArgument);
  size_t total = 0;
  for (int r = 0; r < 3; ++r) {
    const auto rest = s.remaining_indices(consumed, 3, r);
    for (size_t j = 0; j < rest.size(); ++j) CHECK(rest[j] == order[consumed + r + 3 * j]);
    EpochPlan next = plan.reshard(done, 3, r);
    std::vector<int64_t> all;
    for (size_t k = 0; k < next.num_steps(); ++k) {
      auto b = next.batch(k);
      all.insert(all.end(), b.begin(), b.end());
    }
    CHECK(all == rest);
    total += rest.size();
  }
  CHECK(total == 1001 - consumed);
  // The redone step is the failed one's 64 samples over 3 ranks: 22, 21, 21.
  CHECK(plan.reshard(done, 3, 0).batch(0).size() == 22);
  CHECK(plan.reshard(done, 3, 2).batch(0).size() == 21);
  CHECK(plan.reshard(done, 3, 0).global_batch_size(1) == 48);
  CHECK(plan.reshard(done, 3, 0).batch_weight(0) == Approx(22.0 * 3 / 64));
  CHECK_THROWS_AS(s.remaining_indices(0, 3, 3), InvalidArgument);
  CHECK_THROWS_AS(plan.reshard(done, 3, -1), InvalidArgument);
  CHECK_THROWS_AS(plan.reshard(plan.num_steps() + 1, 3, 0), InvalidArgument);
}
