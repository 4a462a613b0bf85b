// Real interop with PyTorch's TCPStore (Debian's python3-torch, 1.13, run by
// /usr/bin/python3): torch clients against collie's server, and collie's
// client against torch's own server. torch's TCPStore prefixes "/" to every
// key on the wire, so torch's store.set("a") is collie's "/a".
//
// When /usr/bin/python3 cannot import torch the tests say why and exit 77
// (ctest: Skipped); under CI=true they fail instead. The same cases with
// torch 2.x, every 2.x query type included, are in torch2_interop_test.cc.
#include <catch2/catch.hpp>

#include <fstream>
#include <regex>

#include "collie/base/error.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/test/rendezvous/tcp_store/python_ranks.h"
#include "collie/test/support/skip.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

namespace collie {
namespace {

using namespace std::chrono_literals;
using test::Subprocess;

constexpr const char* kPython = "/usr/bin/python3";

#define SKIP_WITHOUT_TORCH() \
  if (!test::torch_missing().empty()) test::skip_test(test::torch_missing())

// A torch client: every operation, checked in Python, against our server.
constexpr const char* kTorchClient = R"PY(
import datetime, sys
import torch.distributed as dist
host, port = sys.argv[1], int(sys.argv[2])
s = dist.TCPStore(host, port, None, False, timeout=datetime.timedelta(seconds=60))
s.set("a", "alpha")
assert s.get("a") == b"alpha", s.get("a")
assert s.add("cnt", 5) == 5
assert s.add("cnt", -2) == 3
assert s.get("cnt") == b"3"
# compare_set: missing + empty expected sets; missing otherwise returns expected;
# equal sets; different returns the current value.
assert s.compare_set("cs", "", "first") == b"first"
assert s.compare_set("nokey", "x", "y") == b"x"
assert s.compare_set("cs", "first", "second") == b"second"
assert s.compare_set("cs", "nope", "third") == b"second"
s.wait(["a", "cnt"])
s.wait(["a"], datetime.timedelta(seconds=5))
n = s.num_keys()
assert s.delete_key("a") is True
assert s.delete_key("a") is False
assert s.num_keys() == n - 1, (s.num_keys(), n)
# A key collie set before we started ("/from_collie" on the wire).
assert s.get("from_collie") == b"hello torch"
s.set("done", "1")
# Last: a wait that times out (1.13 leaves this client unusable afterwards).
t = datetime.timedelta(milliseconds=500)
try:
    s.wait(["never"], t)
    sys.exit("wait did not time out")
except RuntimeError as e:
    print("timeout ok:", e)
print("TORCH CLIENT OK")
)PY";

TEST_CASE("torch interop: a torch 1.13 client against collie's server", "[tcp_store][torch]") {
  SKIP_WITHOUT_TORCH();
  test::TempDir dir;
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  auto store = TcpStore::connect("127.0.0.1", server->port());
  store->set("/from_collie", "hello torch");
  auto script = test::write_script(dir, "client.py", kTorchClient);
  auto p = Subprocess::spawn({kPython, script, "127.0.0.1", std::to_string(server->port())});
  auto status = p.wait(120s);
  INFO("stdout: " << p.out() << "\nstderr: " << p.err());
  REQUIRE(status.ok());
  CHECK_THAT(p.out(), Catch::Contains("TORCH CLIENT OK"));
  // What torch wrote is visible to collie under torch's "/" prefix.
  CHECK(to_string(store->get("/cs")) == "second");
  CHECK(to_string(store->get("/cnt")) == "3");
  CHECK(!store->check({"/a"}));
  CHECK(store->check({"/done"}));
}

constexpr const char* kTorchRank = R"PY(
import datetime, os, sys
import torch.distributed as dist
host, port, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
s = dist.TCPStore(host, port, world, False, timeout=datetime.timedelta(seconds=90))
s.set("rank/%d" % rank, str(os.getpid()))
s.add("joined", 1)
s.wait(["rank/%d" % r for r in range(world)])
assert all(s.get("rank/%d" % r) for r in range(world))
print("RANK", rank, "OK")
)PY";

TEST_CASE("torch interop: several torch clients rendezvous through collie's server",
          "[tcp_store][torch]") {
  SKIP_WITHOUT_TORCH();
  test::TempDir dir;
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  auto script = test::write_script(dir, "rank.py", kTorchRank);
  constexpr int kWorld = 3;
  test::run_ranks(kPython, script, server->port(), kWorld);
  auto store = TcpStore::connect("127.0.0.1", server->port());
  CHECK(to_string(store->get("/joined")) == std::to_string(kWorld));
  // torch clients created with a world size also count themselves in "init/".
  CHECK(to_string(store->get("init/")) == std::to_string(kWorld));
}

// torch's own 1.13 server, hosted by Python, which prints its port and then
// serves until collie sets "/done".
constexpr const char* kTorchServer = R"PY(
import datetime, sys
import torch.distributed as dist
s = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=120),
                  wait_for_workers=False)
s.set("hello", "world")
print("PORT", s.port, flush=True)
s.wait(["done"])
assert s.get("from_collie") == b"x", s.get("from_collie")
assert s.get("appended") == b"abc", s.get("appended")
print("TORCH SERVER OK", flush=True)
)PY";

TEST_CASE("torch interop: collie's client against torch 1.13's server", "[tcp_store][torch]") {
  SKIP_WITHOUT_TORCH();
  auto protocol = GENERATE(StoreProtocol::kDetect, StoreProtocol::kV1_13);
  test::TempDir dir;
  auto script = test::write_script(dir, "server.py", kTorchServer);
  auto p = Subprocess::spawn({kPython, script});
  const std::string out = p.wait_for_output("\n", 120s);
  std::smatch m;
  REQUIRE(std::regex_search(out, m, std::regex("PORT (\\d+)")));
  const auto port = static_cast<uint16_t>(std::stoi(m[1]));

  TcpStoreOptions options;
  options.protocol = protocol;
  options.timeout = 60s;
  auto store = TcpStore::connect("127.0.0.1", port, options);
  CHECK(store->protocol() == StoreProtocol::kV1_13);  // detected, or as asked

  test::check_basic_queries(*store);
  // 1.13 has no APPEND/MULTI_*: the client falls back to compare_set and get.
  store->append("/appended", as_span("ab"));
  store->append("/appended", as_span("c"));
  auto values = store->multi_get({"/hello", "/appended"});
  CHECK(to_string(values[1]) == "abc");
  // A wait that times out on a 1.13 server: named, and the client recovers.
  CHECK_THROWS_WITH(store->wait({"/never"}, 300ms), Catch::Contains("[/never]"));
  CHECK(store->add("/n", 1) == 6);

  store->set("/done", "1");
  auto status = p.wait(60s);
  INFO("stdout: " << p.out() << "\nstderr: " << p.err());
  CHECK(status.ok());
  CHECK_THAT(p.out(), Catch::Contains("TORCH SERVER OK"));
}

}  // namespace
}  // namespace collie
