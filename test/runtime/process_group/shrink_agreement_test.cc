// The survivors' agreement on whom a shrink leaves out: one thread per rank
// over one store, with views that disagree, a rank that never takes part, a
// rank that is wrongly reported, and a store that is gone.
#include <catch2/catch.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "collie/base/error.h"
#include "collie/rendezvous/hash_store.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/runtime/process_group/shrink_agreement.h"

using namespace collie;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

struct Outcome {
  std::optional<ShrinkDecision> decision;
  std::exception_ptr error;
};

// Runs agree_on_shrink on one thread per entry of `suspects` that is not
// nullopt (a nullopt rank never takes part), each with `limit`.
std::vector<Outcome> agree(Store& store, int size,
                           const std::vector<std::optional<std::vector<int>>>& suspects,
                           Timeout limit, uint64_t attempt = 0) {
  std::vector<Outcome> out(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    if (!suspects[r]) continue;
    threads.emplace_back([&, r] {
      try {
        out[r].decision =
            agree_on_shrink(store, "g/", r, size, *suspects[r], attempt, Deadline(limit));
      } catch (...) {
        out[r].error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

std::string message(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
}

}  // namespace

TEST_CASE(
    "survivors that saw different things agree on the union, without waiting out the "
    "deadline") {
  HashStore store;
  // Rank 1 died: rank 0 and 2 (its neighbours) saw its socket close, rank 3
  // only heard of the failure from them.
  const auto start = Clock::now();
  auto out = agree(
      store, 4, {std::vector<int>{1}, std::nullopt, std::vector<int>{1}, std::vector<int>{}}, 60s);
  CHECK(Clock::now() - start < 10s);  // not the 60 s deadline
  for (int r : {0, 2, 3}) {
    INFO("rank " << r);
    REQUIRE_FALSE(out[r].error);
    CHECK(out[r].decision->excluded == std::vector<int>{1});
    CHECK(out[r].decision->survivors == std::vector<int>{0, 2, 3});
    CHECK(out[r].decision->silent.empty());
  }
  CHECK(out[0].decision->new_rank == 0);
  CHECK(out[2].decision->new_rank == 1);
  CHECK(out[3].decision->new_rank == 2);
}

TEST_CASE("a rank nobody reported and that never reports is excluded at the deadline") {
  HashStore store;
  auto out = agree(store, 3, {std::vector<int>{}, std::vector<int>{}, std::nullopt}, 300ms);
  for (int r : {0, 1}) {
    REQUIRE_FALSE(out[r].error);
    CHECK(out[r].decision->excluded == std::vector<int>{2});
    CHECK(out[r].decision->silent == std::vector<int>{2});
    CHECK(out[r].decision->survivors == std::vector<int>{0, 1});
  }
}

TEST_CASE("a live rank that another reported failed is told it was left out, and by whom") {
  HashStore store;
  // Rank 0 and 1 agree first; rank 2 (reported by rank 1) arrives later and
  // must adopt their decision, which leaves it out.
  auto first = agree(store, 3, {std::vector<int>{}, std::vector<int>{2}, std::nullopt}, 30s);
  REQUIRE_FALSE(first[0].error);
  CHECK(first[0].decision->excluded == std::vector<int>{2});
  auto late = agree(store, 3, {std::nullopt, std::nullopt, std::vector<int>{}}, 30s);
  REQUIRE(late[2].error);
  CHECK_THROWS_AS(std::rethrow_exception(late[2].error), BackendError);
  CHECK_THAT(message(late[2].error),
             Contains("rank 2 was left out") && Contains("rank 1 reported"));
}

TEST_CASE("every rank gets the first proposal even when a later reader saw more") {
  HashStore store;
  // Everyone reports nothing but rank 0 names rank 3: all four take part,
  // so the decision must exclude 3 on every rank, 3 included (told so).
  auto out =
      agree(store, 4,
            {std::vector<int>{3}, std::vector<int>{}, std::vector<int>{}, std::vector<int>{}}, 30s);
  for (int r : {0, 1, 2}) {
    REQUIRE_FALSE(out[r].error);
    CHECK(out[r].decision->excluded == std::vector<int>{3});
  }
  REQUIRE(out[3].error);
  CHECK_THAT(message(out[3].error), Contains("rank 0 reported"));
}

TEST_CASE("a retry agrees under fresh keys") {
  HashStore store;
  auto first =
      agree(store, 3, {std::vector<int>{}, std::vector<int>{}, std::vector<int>{}}, 30s, 0);
  for (auto& o : first) CHECK(o.decision->excluded.empty());
  auto second = agree(store, 3, {std::vector<int>{2}, std::vector<int>{}, std::nullopt}, 30s, 1);
  CHECK(second[0].decision->excluded == std::vector<int>{2});
  CHECK(second[1].decision->survivors == std::vector<int>{0, 1});
}

TEST_CASE("two sides of a cut network that both reach the store: the first to report stays") {
  HashStore store;
  // Ranks 0 and 1 cannot reach rank 2, nor it them; rank 0 reports first.
  std::optional<Outcome> zero;
  std::thread first([&] {
    zero.emplace();
    try {
      zero->decision = agree_on_shrink(store, "g/", 0, 3, {2}, 0, Deadline(30s));
    } catch (...) {
      zero->error = std::current_exception();
    }
  });
  store.wait({"g/shrink/0/order/1"}, 30s);
  auto rest = agree(store, 3, {std::nullopt, std::vector<int>{2}, std::vector<int>{0, 1}}, 30s);
  first.join();
  REQUIRE_FALSE(zero->error);
  CHECK(zero->decision->excluded == std::vector<int>{2});
  REQUIRE_FALSE(rest[1].error);
  CHECK(rest[1].decision->survivors == std::vector<int>{0, 1});
  REQUIRE(rest[2].error);
  CHECK_THAT(message(rest[2].error), Contains("rank 2 was left out"));
}

TEST_CASE("a report place taken but never written does not stall the others") {
  HashStore store;
  // A rank took place 1 and died before writing its report.
  store.add("g/shrink/0/n", 1);
  const auto start = Clock::now();
  auto out = agree(store, 3, {std::vector<int>{}, std::vector<int>{}, std::vector<int>{}}, 30s);
  CHECK(Clock::now() - start < 10s);  // not the 30 s deadline
  for (auto& o : out) {
    REQUIRE_FALSE(o.error);
    CHECK(o.decision->excluded.empty());
  }
}

TEST_CASE("a rank whose deadline is spent still proposes from the reports in the store") {
  HashStore store;
  // Ranks 0 and 1 reported; rank 2 arrives with no time left: it must not
  // propose to exclude everyone it had no time to read.
  std::thread a([&] { agree(store, 3, {std::vector<int>{}, std::nullopt, std::nullopt}, 30s); });
  store.wait({"g/shrink/0/order/1"}, 30s);
  std::thread b([&] { agree(store, 3, {std::nullopt, std::vector<int>{}, std::nullopt}, 30s); });
  store.wait({"g/shrink/0/order/2"}, 30s);
  auto late = agree(store, 3, {std::nullopt, std::nullopt, std::vector<int>{}}, 0s);
  a.join();
  b.join();
  REQUIRE_FALSE(late[2].error);
  CHECK(late[2].decision->excluded.empty());
}

TEST_CASE("bad suspects are refused, naming the rank") {
  HashStore store;
  CHECK_THROWS_WITH(agree_on_shrink(store, "g/", 0, 3, {5}, 0, Deadline(1s)),
                    Contains("rank 5") && Contains("group of 3"));
  CHECK_THROWS_AS(agree_on_shrink(store, "g/", 0, 3, {-1}, 0, Deadline(1s)), InvalidArgument);
}

TEST_CASE("a store that died is reported at once as the reason no agreement is possible") {
  auto server = TcpStoreServer::start({.host = "127.0.0.1"});
  auto client = TcpStore::connect("127.0.0.1", server->port(), {.timeout = 5s});
  server->stop();  // the store lived in the rank that died
  const auto start = Clock::now();
  try {
    agree_on_shrink(*client, "g/", 1, 3, {0}, 0, Deadline(60s));
    FAIL("the agreement succeeded without a store");
  } catch (const BackendError& e) {
    CHECK_THAT(std::string(e.what()),
               Contains("store is unreachable") && Contains("outlives every worker"));
  }
  CHECK(Clock::now() - start < 10s);
}
