// The two Membership implementations in one process, over real stores on
// loopback, as the agent loop drives them: the static one's attempts (a
// one-node job and two nodes on threads), and the elastic one's rounds (a
// launcher waiting to join ends a round as a membership change, and the
// next round has both; a launcher that comes after the job is told so).
#include <catch2/catch.hpp>

#include <future>
#include <memory>
#include <thread>

#include "collie/base/deadline.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/launcher/elastic_membership.h"
#include "collie/runtime/launcher/static_membership.h"
#include "collie/test/runtime/launcher/launcher_harness.h"

using namespace collie;
using namespace collie::launcher;
using Catch::Matchers::Contains;
using std::chrono::seconds;

namespace {

StaticRendezvousOptions static_node(int nnodes, int node_rank, uint16_t port, int nproc = 1) {
  return {.nnodes = nnodes,
          .node_rank = node_rank,
          .nproc = nproc,
          .master_addr = "127.0.0.1",
          .master_port = port,
          .run_id = "rt",
          .hostname = str_cat("host", node_rank),
          .timeout = seconds(20)};
}

ElasticOptions elastic_node(uint16_t port, const std::string& host, int nproc = 1) {
  return {.min_nodes = 1,
          .max_nodes = 2,
          .nproc = nproc,
          .endpoint_host = "127.0.0.1",
          .endpoint_port = port,
          .run_id = "rt",
          .hostname = host,
          .join_timeout = seconds(20),
          .last_call_timeout = std::chrono::milliseconds(0),
          .keep_alive_interval = seconds(1)};
}

}  // namespace

TEST_CASE("static membership: a one-node job's attempts, failures and words",
          "[launcher][rendezvous]") {
  auto rdzv = StaticMembership::start(static_node(1, 0, 0, 3));
  CHECK_THAT(rdzv->hosting_line(),
             Contains("collie-run: agent store listening on 127.0.0.1:") &&
                 Contains("(node 0 of 1, run id 'rt'; workers reach it at 127.0.0.1)"));
  Round r = rdzv->next_round();
  CHECK(r.number == 0);
  CHECK(r.world_size == 3);
  CHECK(r.rank_base == 0);
  CHECK(r.master_addr == "127.0.0.1");  // a one-node job's store is on loopback
  CHECK(r.master_port != 0);
  // One node: nobody else to hear from, and no membership ever changes.
  CHECK_FALSE(rdzv->check());
  CHECK_FALSE(rdzv->membership_change());
  rdzv->report_failure("rank 1 ended with exit code 3");
  rdzv->report_failure("a later report does not win");
  CHECK(rdzv->finish(false) == "rank 1 ended with exit code 3");
  // The next attempt starts on fresh keys.
  r = rdzv->next_round();
  CHECK(r.number == 1);
  CHECK(rdzv->finish(true) == std::nullopt);
  CHECK(rdzv->round_line().empty());
  CHECK(rdzv->store_lost_line() ==
        "collie-run: node 0 gives up: the job cannot go on without node 0");
  CHECK(rdzv->failed_elsewhere_line("x") ==
        "collie-run: node 0's workers succeeded, but another node failed: x");
  rdzv->close("succeeded");
}

TEST_CASE("static membership: two nodes start, check and finish each attempt together",
          "[launcher][rendezvous]") {
  auto node0 = StaticMembership::start(static_node(2, 0, 0, 2));
  const uint16_t port = collie::test::agent_store_port(node0->hosting_line());
  auto node1 = StaticMembership::start(static_node(2, 1, port, 3));
  CHECK(node1->hosting_line().empty());
  auto joined1 = std::async(std::launch::async, [&] { return node1->next_round(); });
  const Round r0 = node0->next_round();
  const Round r1 = joined1.get();
  CHECK(r0.world_size == 5);
  CHECK(r1.world_size == 5);
  CHECK(r1.rank_base == 2);  // node 0's workers come first
  CHECK(r1.node_rank == 1);

  // Node 1's failure reaches node 0's check while node 0's workers run.
  CHECK_FALSE(node0->check());
  node1->report_failure("rank 4 failed");
  REQUIRE(node0->check());
  CHECK(node0->check()->reason == "rank 4 failed");
  CHECK_FALSE(node0->check()->membership_change);
  auto finished1 = std::async(std::launch::async, [&] { return node1->finish(false); });
  CHECK(node0->finish(true) == "rank 4 failed");
  CHECK(finished1.get() == "rank 4 failed");

  auto next1 = std::async(std::launch::async, [&] { return node1->next_round(); });
  CHECK(node0->next_round().number == 1);
  CHECK(next1.get().number == 1);
  CHECK_FALSE(node0->check());  // attempt 1 has no failure yet
  auto closed1 = std::async(std::launch::async, [&] { node1->close("succeeded"); });
  node0->close("succeeded");
  closed1.get();
}

TEST_CASE("elastic membership: a launcher waiting to join ends the round, the next has both",
          "[launcher][rendezvous][elastic]") {
  const uint16_t port = collie::test::probe_free_port();
  auto a = ElasticMembership::start(elastic_node(port, "ha", 2));
  REQUIRE(a->hosts_store());
  CHECK(a->hosting_line() == str_cat("collie-run: rendezvous store listening on 127.0.0.1:", port,
                                     " (run id 'rt', --nnodes 1:2)"));
  // Alone, A makes round 0 at once (min 1, no last call).
  Round ra = a->next_round();
  CHECK(ra.number == 0);
  CHECK(ra.world_size == 2);
  CHECK(ra.master_port == port);
  CHECK(a->round_line() ==
        "collie-run: round 0 of run 'rt': node 0 of 1 (ha), ranks 0-1 of world size 2");
  CHECK_FALSE(a->check());

  // B comes: it waits at round 1's door while round 0 runs.
  auto b = ElasticMembership::start(elastic_node(port, "hb", 3));
  CHECK_FALSE(b->hosts_store());
  auto joined_b = std::async(std::launch::async, [&] { return b->next_round(); });
  std::optional<RoundEnd> end;
  for (Deadline deadline(seconds(20)); !end && !deadline.expired();) {
    end = a->check();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(end);
  CHECK(end->membership_change);
  CHECK(end->reason == "1 launcher is waiting to join run 'rt' (round 0 has 1 of at most 2 nodes)");
  // A failure of A's workers now would be the arrival's doing, not theirs.
  CHECK(a->membership_change() ==
        "a launcher is waiting to join (this node's workers lost peers that another node "
        "stopped for it)");

  // Round 1: B first (it was waiting), then A; MAX reached, it closes at once.
  ra = a->next_round();
  const Round rb = joined_b.get();
  CHECK(ra.number == 1);
  CHECK(rb.number == 1);
  CHECK(rb.node_rank == 0);
  CHECK(ra.node_rank == 1);
  CHECK(ra.rank_base == 3);
  CHECK(ra.world_size == 5);
  CHECK_FALSE(a->membership_change());  // the round is full
  auto finished_b = std::async(std::launch::async, [&] { return b->finish(true); });
  CHECK(a->finish(true) == std::nullopt);
  CHECK(finished_b.get() == std::nullopt);

  // The job is over: a launcher that comes now exits 0 saying so.
  b->close("succeeded");
  auto c = ElasticMembership::start(elastic_node(port, "hc"));
  try {
    c->next_round();
    FAIL("joined a job that is over");
  } catch (const JobOver& e) {
    CHECK(e.succeeded());
    CHECK_THAT(e.what(), Contains("run 'rt' is over (succeeded)"));
  }
  a->close("succeeded");
}

TEST_CASE("elastic membership: a member's failure ends the round for the others",
          "[launcher][rendezvous][elastic]") {
  const uint16_t port = collie::test::probe_free_port();
  ElasticOptions oa = elastic_node(port, "ha"), ob = elastic_node(port, "hb");
  oa.min_nodes = ob.min_nodes = 2;
  auto a = ElasticMembership::start(oa);
  auto b = ElasticMembership::start(ob);
  auto joined_b = std::async(std::launch::async, [&] { return b->next_round(); });
  CHECK(a->next_round().world_size == 2);
  CHECK(joined_b.get().world_size == 2);
  b->report_failure("rank 1 ended with exit code 3");
  const std::optional<RoundEnd> end = a->check();
  REQUIRE(end);
  CHECK(end->reason == "rank 1 ended with exit code 3");
  CHECK_FALSE(end->membership_change);
  CHECK_FALSE(a->membership_change());  // a failure was reported: it is one
  // A's own workers succeeded, but the round failed elsewhere.
  CHECK(a->finish(true) == "rank 1 ended with exit code 3");
  CHECK(a->failed_elsewhere_line("x") ==
        "collie-run: this node's workers succeeded, but round 0 failed elsewhere: x");
  CHECK(b->finish(false) == std::nullopt);  // nothing to wait for after a failure here
  b->close("failed: rank 1 ended with exit code 3");
  a->close("failed: rank 1 ended with exit code 3");
}
