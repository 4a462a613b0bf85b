// blip_train's recovery decisions without processes: after the survivors'
// agreement every survivor must resume with the same steps, whether it was
// behind the leader by a step or a whole epoch's end.
#include <catch2/catch.hpp>

#include "collie/base/error.h"
#include "collie/nn/distributed_sampler.h"
#include "collie/nn/epoch_plan.h"
#include "collie/samples/blip_train/survival.h"

using namespace collie;
using namespace collie::samples;

namespace {

constexpr size_t kLen = 1001;  // padded by 3 in world 4
constexpr uint64_t kSeed = 42;
constexpr size_t kBatch = 8;

nn::EpochPlan plan_for(int epoch, int world, int rank) {
  nn::DistributedSampler s(kLen, world, rank, true, kSeed);
  s.set_epoch(static_cast<uint64_t>(epoch));
  return nn::EpochPlan(s, kBatch);
}

// Survivors old ranks 0, 2, 3 of 4 (rank 1 died), new ranks 0, 1, 2.
Recovery recovery_for(int old_rank, int64_t progress) {
  Recovery r;
  r.old_world = 4;
  r.old_rank = old_rank;
  r.new_world = 3;
  r.new_rank = old_rank == 0 ? 0 : old_rank - 1;
  r.excluded = {1};
  r.progress = progress;
  return r;
}

// Every survivor's view of every new rank's steps is the same.
void check_same_steps(const std::vector<ResumePoint>& points) {
  for (const auto& p : points) {
    CHECK(p.epoch == points[0].epoch);
    REQUIRE(p.plan.num_steps() == points[0].plan.num_steps());
    for (size_t k = 0; k < p.plan.num_steps(); ++k)
      for (int j = 0; j < 3; ++j) CHECK(p.plan.batch_of(j, k) == points[0].plan.batch_of(j, k));
  }
}

}  // namespace

TEST_CASE("progress orders epochs before the samples consumed in them") {
  CHECK(decode_epoch(encode_progress(7, 123456)) == 7);
  CHECK(decode_consumed(encode_progress(7, 123456)) == 123456);
  CHECK(encode_progress(3, 0) > encode_progress(2, 60000));
}

TEST_CASE("survivors a step apart resume with the leader's steps, the step it completed kept") {
  const int epoch = 2;
  const size_t k = 5;  // old ranks 0 and 3 completed step 5, old rank 2 failed in it
  const auto leader = plan_for(epoch, 4, 0);
  const int64_t progress = encode_progress(epoch, leader.consumed_after(k + 1));
  std::vector<ResumePoint> points;
  for (int old_rank : {0, 2, 3}) {
    const size_t done = old_rank == 2 ? k : k + 1;
    points.push_back(resume_point(epoch, plan_for(epoch, 4, old_rank), done,
                                  recovery_for(old_rank, progress), kLen, kSeed));
    CHECK(points.back().completed == k + 1);
    CHECK_FALSE(points.back().next_epoch);
  }
  check_same_steps(points);
  // What is left: the real samples after the 6 completed global batches.
  size_t left = 0;
  for (size_t s = 0; s < points[0].plan.num_steps(); ++s)
    left += points[0].plan.global_batch_size(s);
  CHECK(left == kLen - (k + 1) * 4 * kBatch);
  // A leader two steps ahead is impossible: refused, not guessed.
  CHECK_THROWS_AS(
      resume_point(epoch, plan_for(epoch, 4, 2), k - 1, recovery_for(2, progress), kLen, kSeed),
      Error);
}

TEST_CASE("a survivor still at an epoch's end follows a leader into the next epoch's plan") {
  // Old ranks 0 and 3 passed epoch 2's barrier and failed in epoch 3's
  // first step; old rank 2 failed inside the barrier.
  const int64_t progress = encode_progress(3, 0);
  std::vector<ResumePoint> points;
  for (int old_rank : {0, 2, 3}) {
    const int epoch = old_rank == 2 ? 2 : 3;
    const auto plan = plan_for(epoch, 4, old_rank);
    const size_t done = old_rank == 2 ? plan.num_steps() : 0;
    points.push_back(
        resume_point(epoch, plan, done, recovery_for(old_rank, progress), kLen, kSeed));
    CHECK(points.back().next_epoch == (old_rank == 2));
  }
  check_same_steps(points);
  CHECK(points[0].epoch == 3);
  // Epoch 3's first step is the old world's first global batch, re-dealt.
  CHECK(points[0].plan.global_batch_size(0) == 4 * kBatch);
  CHECK(points[0].plan.global_batch_size(1) == 3 * kBatch);
}

TEST_CASE(
    "a replacement joining mid-epoch makes the members' plan of the rest from the position alone, "
    "and the epoch still uses every sample once") {
  // World 4 lost a rank at step 5 of epoch 2 (nobody completed it); the 3
  // survivors trained 7 steps of their resharded plan, then admitted a
  // replacement: new ranks 0-2 are the members, 3 the joiner.
  const int epoch = 2;
  const auto first = plan_for(epoch, 4, 0);
  std::vector<nn::EpochPlan> shrunk;
  for (int r = 0; r < 3; ++r) shrunk.push_back(first.reshard(5, 3, r));
  const size_t done = 7;
  const size_t consumed = shrunk[0].consumed_after(done);
  std::vector<nn::EpochPlan> grown;
  for (int r = 0; r < 3; ++r) grown.push_back(shrunk[r].rest_from(consumed, 4, r));
  // The joiner knows the epoch and the position; its sampler's world (4)
  // pads differently from the survivors' plan, which does not matter.
  grown.push_back(plan_for(epoch, 4, 3).rest_from(consumed, 4, 3));
  for (const auto& p : grown) {
    REQUIRE(p.num_steps() == grown[0].num_steps());
    CHECK(p.consumed_after(0) == consumed);
    for (size_t k = 0; k < p.num_steps(); ++k)
      for (int j = 0; j < 4; ++j) CHECK(p.batch_of(j, k) == grown[0].batch_of(j, k));
  }
  // Every sample once: the old world's 5 steps, the survivors' 7, the rest.
  std::vector<int> uses(kLen, 0);
  for (size_t k = 0; k < 5; ++k)
    for (int j = 0; j < 4; ++j)
      for (int64_t i : first.batch_of(j, k)) ++uses[static_cast<size_t>(i)];
  for (size_t k = 0; k < done; ++k)
    for (int j = 0; j < 3; ++j)
      for (int64_t i : shrunk[0].batch_of(j, k)) ++uses[static_cast<size_t>(i)];
  for (size_t k = 0; k < grown[0].num_steps(); ++k) {
    if (k + 1 < grown[0].num_steps()) CHECK(grown[0].global_batch_size(k) == 4 * kBatch);
    for (int j = 0; j < 4; ++j)
      for (int64_t i : grown[0].batch_of(j, k)) ++uses[static_cast<size_t>(i)];
  }
  for (size_t i = 0; i < kLen; ++i) CHECK(uses[i] == 1);
  // At the epoch's very end nothing is left; past the order is refused.
  CHECK(grown[0].rest_from(kLen, 4, 0).num_steps() == 0);
  CHECK_THROWS_AS(grown[0].rest_from(kLen + 100, 4, 0), InvalidArgument);
}
