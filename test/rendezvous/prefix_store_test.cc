// PrefixStore beyond the contract: the keys it writes into the underlying
// store, isolation between prefixes, and the one timeout it shares with the
// store it wraps.
#include <catch2/catch.hpp>

#include "collie/base/error.h"
#include "collie/rendezvous/hash_store.h"
#include "collie/rendezvous/prefix_store.h"

using namespace collie;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

TEST_CASE("PrefixStore writes prefix/key into the underlying store", "[prefix_store]") {
  auto base = std::make_shared<HashStore>();
  PrefixStore pg("default_pg", base);
  pg.set("rank_0", "addr");
  pg.add("count", 2);
  pg.append("log", as_span("ab"));
  pg.multi_set({"x", "y"}, {to_bytes("1"), to_bytes("2")});
  pg.compare_set("cas", {}, to_bytes("v"));
  CHECK(base->check({"default_pg/rank_0", "default_pg/count", "default_pg/log", "default_pg/x",
                     "default_pg/y", "default_pg/cas"}));
  CHECK_FALSE(base->check({"rank_0"}));
  CHECK(base->num_keys() == 6);
  CHECK(pg.num_keys() == 6);
  CHECK(pg.delete_key("x"));
  CHECK_FALSE(base->check({"default_pg/x"}));

  // Nested prefixes compose, as torch's do.
  PrefixStore nested("inner", std::make_shared<PrefixStore>("outer", base));
  nested.set("k", "v");
  CHECK(to_string(base->get("outer/inner/k")) == "v");
}

TEST_CASE("PrefixStore keeps groups apart in one store", "[prefix_store]") {
  auto base = std::make_shared<HashStore>();
  PrefixStore a("0", base), b("1", base);
  a.set("key", "from a");
  b.set("key", "from b");
  CHECK(to_string(a.get("key")) == "from a");
  CHECK(to_string(b.get("key")) == "from b");
  CHECK(a.add("n", 1) == 1);
  CHECK(b.add("n", 1) == 1);
}

TEST_CASE("PrefixStore's timeout is the underlying store's", "[prefix_store]") {
  auto base = std::make_shared<HashStore>(5s);
  PrefixStore pg("p", base);
  CHECK(pg.timeout() == 5s);
  pg.set_timeout(200ms);
  CHECK(base->timeout() == 200ms);
  base->set_timeout(250ms);
  CHECK(pg.timeout() == 250ms);
  // The timeout error names the full key the underlying store waited for.
  CHECK_THROWS_WITH(pg.get("late"), Contains("p/late"));
  CHECK_THROWS_AS(pg.wait({"late"}), TimeoutError);
  CHECK_THROWS_AS(PrefixStore("p", nullptr), InvalidArgument);
}
