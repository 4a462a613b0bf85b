// PeerNumbering (collectives/transport/peer_numbering.h): the world's
// numbering outside a sub-group, the sub-group's inside one, and nesting
// that restores the numbering before it. The Transport's SubgroupScope is
// these calls around restarts of the completion counters; the hierarchical
// tests (test/collectives/hierarchical_test.cc) run it for real.
#include <catch2/catch.hpp>

#include <vector>

#include "collie/base/error.h"
#include "collie/collectives/transport/peer_numbering.h"

using namespace collie;

TEST_CASE("peer numbering outside a sub-group is the world's") {
  const PeerNumbering n(2, 5);
  CHECK(n.rank() == 2);
  CHECK(n.size() == 5);
  CHECK(n.world_rank() == 2);
  CHECK(n.world_size() == 5);
  CHECK_FALSE(n.in_subgroup());
  for (int p = 0; p < 5; ++p) CHECK(n.world(p) == p);
}

TEST_CASE("peer numbering in a sub-group maps its peers to world ranks") {
  PeerNumbering n(4, 8);
  const std::vector<int> members{1, 4, 6};
  const int self = n.find_self(members);
  CHECK(self == 1);
  auto outer = n.save();
  n.enter(members, self);
  CHECK(n.in_subgroup());
  CHECK(n.rank() == 1);
  CHECK(n.size() == 3);
  CHECK(n.world(0) == 1);
  CHECK(n.world(1) == 4);
  CHECK(n.world(2) == 6);
  // The world's numbers stay the world's.
  CHECK(n.world_rank() == 4);
  CHECK(n.world_size() == 8);
  n.restore(std::move(outer));
  CHECK_FALSE(n.in_subgroup());
  CHECK(n.rank() == 4);
  CHECK(n.size() == 8);
  CHECK(n.world(6) == 6);
}

TEST_CASE("peer numbering nests: closing a sub-group restores the one around it") {
  PeerNumbering n(3, 8);
  // The host's ranks, then the leaders' sub-group inside it (members are
  // world ranks either way, as in hierarchical.cc).
  const std::vector<int> host{2, 3, 5, 7};
  const std::vector<int> leaders{0, 3};
  auto world = n.save();
  n.enter(host, n.find_self(host));
  CHECK(n.rank() == 1);
  CHECK(n.size() == 4);
  auto in_host = n.save();
  n.enter(leaders, n.find_self(leaders));
  CHECK(n.rank() == 1);
  CHECK(n.size() == 2);
  CHECK(n.world(0) == 0);
  n.restore(std::move(in_host));
  CHECK(n.rank() == 1);
  CHECK(n.size() == 4);
  CHECK(n.world(2) == 5);
  CHECK(n.world(3) == 7);
  n.restore(std::move(world));
  CHECK_FALSE(n.in_subgroup());
  CHECK(n.rank() == 3);
  CHECK(n.size() == 8);
}

TEST_CASE("peer numbering refuses a sub-group without this rank and changes nothing") {
  PeerNumbering n(3, 8);
  const std::vector<int> others{0, 1, 2};
  CHECK_THROWS_WITH(n.find_self(others),
                    Catch::Matchers::Contains("rank 3 is not in its sub-group"));
  CHECK_FALSE(n.in_subgroup());
  CHECK(n.rank() == 3);
  CHECK(n.size() == 8);
}
