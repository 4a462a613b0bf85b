// The public API end to end: N real processes over loopback initialize the
// default group the ways a user can (init_method file://, a store passed in,
// the launcher's agent store through env:// and tcp://) and run scenarios
// (distributed_children.cc) that check every result against local values.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "collie/base/error.h"
#include "collie/rendezvous/hash_store.h"
#include "collie/runtime/api/distributed.h"
#include "collie/test/runtime/api/rank_runner.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

TEST_CASE("init_process_group with file:// runs every collective correctly", "[dist]") {
  for (int world : {1, 2, 3}) {
    TempDir dir;
    run_ranks(world, [&](int rank) {
      return RankLaunch{child_argv("dist_rank", {"file", "collectives", std::to_string(rank),
                                                 std::to_string(world), dir.file("rdzv")})};
    });
  }
}

TEST_CASE("init_process_group with a caller's store: many collectives in flight", "[dist]") {
  TempDir dir;
  run_ranks(4, [&](int rank) {
    return RankLaunch{child_argv(
        "dist_rank", {"store", "inflight", std::to_string(rank), "4", dir.file("store")})};
  });
}

TEST_CASE("two groups driven concurrently from two threads", "[dist]") {
  TempDir dir;
  run_ranks(3, [&](int rank) {
    return RankLaunch{child_argv(
        "dist_rank", {"file", "two_groups", std::to_string(rank), "3", dir.file("rdzv")})};
  });
}

TEST_CASE("new_group: members compute within the group, non-members do nothing", "[dist]") {
  TempDir dir;
  run_ranks(4, [&](int rank) {
    return RankLaunch{child_argv(
        "dist_rank", {"file", "subgroups", std::to_string(rank), "4", dir.file("rdzv")})};
  });
}

TEST_CASE("a peer that dies breaks the group quickly, later calls are refused", "[dist]") {
  TempDir dir;
  auto outputs = run_ranks(3, [&](int rank) {
    return RankLaunch{child_argv(
        "dist_rank", {"file", "peer_dies", std::to_string(rank), "3", dir.file("rdzv")})};
  });
  for (int rank : {0, 1}) {
    CHECK_THAT(outputs[rank], Contains("first error:") && Contains("rank 2"));
    CHECK_THAT(outputs[rank], Contains("later error:") && Contains("broken since all_reduce #1"));
  }
}

TEST_CASE("two threads calling one group at once break it with an error naming both calls",
          "[dist]") {
  TempDir dir;
  auto outputs = run_ranks(2, [&](int rank) {
    return RankLaunch{child_argv("dist_rank", {"file", "one_group_two_threads",
                                               std::to_string(rank), "2", dir.file("rdzv")})};
  });
  bool named = false;
  for (const auto& out : outputs) {
    INFO(out);
    // Every thread of every rank stopped with an error.
    CHECK_THAT(out, Contains("thread a: BackendError") || Contains("thread a: NetworkError"));
    CHECK_THAT(out, Contains("thread b: BackendError") || Contains("thread b: NetworkError"));
    named = named || (out.find("all_reduce (float32 x 256, sum, auto) was called on thread") !=
                          std::string::npos &&
                      out.find("while all_reduce #") != std::string::npos);
  }
  CHECK(named);
}

TEST_CASE("a hung peer trips the collective's own timeout, naming the collective", "[dist]") {
  TempDir dir;
  auto outputs = run_ranks(2, [&](int rank) {
    return RankLaunch{child_argv(
        "dist_rank", {"file", "peer_hangs", std::to_string(rank), "2", dir.file("rdzv")})};
  });
  CHECK_THAT(outputs[0], Contains("timeout error after") && Contains("all_reduce") &&
                             Contains("limit 500") && Contains("rank 1"));
}

TEST_CASE("setup_for_distributed: print is silent on non-master ranks unless forced", "[dist]") {
  TempDir dir;
  auto outputs = run_ranks(2, [&](int rank) {
    return RankLaunch{
        child_argv("dist_rank", {"file", "print", std::to_string(rank), "2", dir.file("rdzv")})};
  });
  CHECK_THAT(outputs[0], Contains("plain line from rank 0 of 2 2.5 true\n"));
  CHECK_THAT(outputs[0], Contains("forced line from rank 0\n"));
  CHECK_THAT(outputs[1], !Contains("plain line"));
  CHECK_THAT(outputs[1], Contains("forced line from rank 1\n"));
}

TEST_CASE("backend selection: nccl without a GPU is a clear BackendError, auto serves host buffers",
          "[dist]") {
  REQUIRE_FALSE(is_initialized());
  CHECK(is_main_process());
  CHECK_FALSE(is_dist_avail_and_initialized());
  CHECK_THROWS_WITH(get_rank(), Contains("has not been initialized"));
  if (!is_backend_available("nccl")) {
    InitOptions nccl{
        .backend = "nccl", .world_size = 1, .rank = 0, .store = std::make_shared<HashStore>()};
    CHECK_THROWS_AS(init_process_group(nccl), BackendError);
    CHECK_THROWS_WITH(init_process_group(nccl), Contains("nccl") && Contains("cannot run here"));
    CHECK_FALSE(is_initialized());
  }
  CHECK_THROWS_AS(init_process_group({.backend = "carrier-pigeon",
                                      .world_size = 1,
                                      .rank = 0,
                                      .store = std::make_shared<HashStore>()}),
                  InvalidArgument);
  CHECK_THROWS_WITH(init_process_group({.backend = "cpu", .store = std::make_shared<HashStore>()}),
                    Contains("rank and world_size must be given"));
  CHECK_THROWS_WITH(
      init_process_group(
          {.backend = "cpu", .world_size = 2, .rank = 2, .store = std::make_shared<HashStore>()}),
      Contains("rank 2 is out of range"));

  init_process_group(
      {.backend = "auto", .world_size = 1, .rank = 0, .store = std::make_shared<HashStore>()});
  CHECK(is_initialized());
  // One backend per device type: host buffers always on socket.
  CHECK(get_backend() == (is_backend_available("nccl") ? "cpu:cpu,cuda:nccl" : "cpu"));
  CHECK(get_rank() == 0);
  CHECK(get_world_size() == 1);
  CHECK(is_main_process());
  CHECK_THROWS_WITH(
      init_process_group(
          {.backend = "cpu", .world_size = 1, .rank = 0, .store = std::make_shared<HashStore>()}),
      Contains("already initialized"));
  std::vector<float> v{1, 2, 3};
  all_reduce(view(v.data(), v.size()), ReduceOp::kSum);
  CHECK(v == std::vector<float>{1, 2, 3});
  CHECK_THROWS_WITH(new_group({0, 1}), Contains("rank 1 is not in the default group of 1"));
  CHECK_THROWS_WITH(new_group({0, 0}), Contains("listed twice"));
  destroy_process_group();
  CHECK_FALSE(is_initialized());
}

TEST_CASE("destroy_process_group takes sub-groups with it; init may run again", "[dist]") {
  REQUIRE_FALSE(is_initialized());
  init_process_group(
      {.backend = "cpu", .world_size = 1, .rank = 0, .store = std::make_shared<HashStore>()});
  Group sub = new_group({0});
  Group again = new_group();
  REQUIRE(sub.is_member());
  CHECK(get_rank(sub) == 0);
  CHECK(get_backend(sub) == "cpu");
  CHECK(sub.process_group() != again.process_group());
  std::vector<int64_t> v{5, 6};
  all_gather(view(v.data(), 2), view(v.data(), 2), sub);  // in place, world of one
  CHECK(v == std::vector<int64_t>{5, 6});
  destroy_process_group(again);  // one sub-group only
  CHECK_THROWS_WITH(all_reduce(view(v.data(), 2), ReduceOp::kSum, again), Contains("shut down"));
  all_reduce(view(v.data(), 2), ReduceOp::kSum, sub);

  destroy_process_group();
  CHECK_FALSE(is_initialized());
  CHECK_THROWS_AS(all_reduce(view(v.data(), 2), ReduceOp::kSum, sub), BackendError);
  CHECK_THROWS_WITH(barrier(), Contains("has not been initialized"));
  CHECK_THROWS_WITH(new_group(), Contains("has not been initialized"));

  init_process_group(
      {.backend = "cpu", .world_size = 1, .rank = 0, .store = std::make_shared<HashStore>()});
  CHECK(get_world_size() == 1);
  barrier();
  destroy_process_group();
}
