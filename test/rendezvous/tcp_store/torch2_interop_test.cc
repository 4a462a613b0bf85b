// Real interop with torch 2.x's TCPStore, every query type of the 2.x
// dialect included (the queues and LIST_KEYS of torch 2.11, BARRIER of
// 2.15): torch 2.x clients against collie's server, and collie's client
// against torch 2.x's own server, libuv (the 2.x default) and classic.
// torch's TCPStore prefixes "/" to every key on the wire, so torch's
// store.set("a") is collie's "/a".
//
// The Python comes from COLLIE_TORCH2_PYTHON (a virtual environment's
// bin/python; test/CMakeLists.txt sets it from COLLIE_TORCH_VENVS, and runs
// these cases once per environment). Without it the tests say why and exit
// 77 (ctest: Skipped); under CI=true they fail instead.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>

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

// The torch 2.x Python, or a skip naming what is missing.
std::string torch2_python() {
  const char* python = std::getenv("COLLIE_TORCH2_PYTHON");
  if (python == nullptr || *python == '\0') {
    test::skip_test(
        "COLLIE_TORCH2_PYTHON is not set (a torch 2.x environment's bin/python; "
        "tools/collie.sh makes them, and ctest sets it from COLLIE_TORCH_VENVS)");
  }
  if (::access(python, X_OK) != 0)
    test::skip_test(std::string("COLLIE_TORCH2_PYTHON=") + python + " is not an executable");
  return python;
}

// Whether the torch the script runs has Store.barrier (2.15 and later), as
// its first line says: "torch <version> barrier <0|1>".
bool torch_has_barrier(Subprocess& p) {
  const std::string out = p.wait_for_output("\n", 120s);
  std::smatch m;
  INFO(out);
  REQUIRE(std::regex_search(out, m, std::regex("barrier ([01])")));
  return m[1] == "1";
}

// Waits for `key` (set by the Python side) while the process runs: a
// Python that dies fails the test at once instead of at a long timeout.
void wait_for_python(TcpStore& store, Subprocess& p, const std::string& key) {
  for (int i = 0; i < 240; ++i) {
    try {
      store.wait({key}, 500ms);
      return;
    } catch (const TimeoutError&) {
      INFO("stdout: " << p.out() << "\nstderr: " << p.err());
      REQUIRE(p.running());
    }
  }
  FAIL("the Python side never set " << key);
}

// A torch 2.x client: every query type, checked in Python, against our
// server. Without Store.barrier (torch < 2.15) it says so and skips it.
constexpr const char* kTorchClient = R"PY(
import datetime, sys
import torch, torch.distributed as dist
T = datetime.timedelta
host, port = sys.argv[1], int(sys.argv[2])
s = dist.TCPStore(host, port, None, False, timeout=T(seconds=60))  # VALIDATE, PING
print("torch", torch.__version__, "barrier", int(hasattr(s, "barrier")), flush=True)
s.set("a", "alpha")
assert s.get("a") == b"alpha", s.get("a")
assert s.add("cnt", 5) == 5
assert s.add("cnt", -2) == 3
assert s.get("cnt") == b"3"
assert s.compare_set("cs", "", "first") == b"first"
assert s.compare_set("nokey", "x", "y") == b"x"
assert s.compare_set("cs", "first", "second") == b"second"
assert s.compare_set("cs", "nope", "third") == b"second"
assert s.check(["a", "cnt"]) and not s.check(["a", "nokey"])
s.wait(["a", "cnt"])
s.wait(["a"], T(seconds=5))
n = s.num_keys()
assert s.delete_key("a") is True
assert s.delete_key("a") is False
assert s.num_keys() == n - 1, (s.num_keys(), n)
s.append("log", "x")
s.append("log", "yz")
assert s.get("log") == b"xyz"
s.multi_set(["m1", "m2"], ["one", "two"])
assert s.multi_get(["m2", "m1"]) == [b"two", b"one"]
assert s.get("from_collie") == b"hello torch"
# A wait that times out is cancelled (CANCEL_WAIT); the client goes on.
try:
    s.wait(["never"], T(milliseconds=300))
    sys.exit("wait did not time out")
except dist.DistStoreError as e:
    print("wait timeout ok:", e)
assert s.add("cnt", 1) == 4
# Queues: QUEUE_PUSH, QUEUE_LEN, QUEUE_POP (blocking is WAIT + QUEUE_POP).
s.queue_push("q", "1")
s.queue_push("q", b"\x00two")
s.queue_push("q", "")
assert s.queue_len("q") == 3 and s.queue_len("none") == 0
assert s.queue_pop("q") == b"1"
assert s.queue_pop("q", False) == b"\x00two"
assert s.queue_pop("q", block=False) == b""
try:
    s.queue_pop("q", False)
    sys.exit("a pop of an empty queue did not raise")
except dist.QueueEmptyError:
    pass
s.set_timeout(T(milliseconds=300))
try:
    s.queue_pop("q")
    sys.exit("a blocking pop of an empty queue did not time out")
except dist.DistStoreError as e:
    print("pop timeout ok:", e)
s.set_timeout(T(seconds=60))
# LIST_KEYS: torch's client keeps the "/"-prefixed keys, without the "/";
# collie's server sends them sorted.
assert s.list_keys() == ["cnt", "cs", "from_collie", "log", "m1", "m2"], s.list_keys()
# A blocking pop that collie's client satisfies.
s.set("ready_for_job", "1")
assert s.queue_pop("job") == b"from collie"
if hasattr(s, "barrier"):
    s.barrier("mixed", 2)  # with collie's client
    s.barrier("solo", 1)
    try:
        s.barrier("lonely", 2, T(milliseconds=300))
        sys.exit("barrier did not time out")
    except dist.DistStoreError as e:
        assert "barrier timeout" in str(e), e
    assert s.add("cnt", 1) == 5
else:
    print("no Store.barrier in this torch")
s.set("done", "1")
print("TORCH2 CLIENT OK", flush=True)
)PY";

TEST_CASE("torch2 interop: a torch 2.x client against collie's server, every query type",
          "[tcp_store][torch2]") {
  const std::string python = torch2_python();
  test::TempDir dir;
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  auto store = TcpStore::connect("127.0.0.1", server->port());
  store->set("/from_collie", "hello torch");
  store->set("raw_no_prefix", "torch's list_keys leaves this out");
  auto script = test::write_script(dir, "client.py", kTorchClient);
  auto p = Subprocess::spawn({python, script, "127.0.0.1", std::to_string(server->port())});
  const bool has_barrier = torch_has_barrier(p);
  wait_for_python(*store, p, "/ready_for_job");
  store->queue_push("/job", "from collie");
  if (has_barrier) store->barrier("/mixed", 2, 120s);
  auto status = p.wait(180s);
  INFO("stdout: " << p.out() << "\nstderr: " << p.err());
  REQUIRE(status.ok());
  CHECK_THAT(p.out(), Catch::Contains("TORCH2 CLIENT OK"));
  // What torch wrote is visible to collie under torch's "/" prefix.
  CHECK(to_string(store->get("/cs")) == "second");
  CHECK(store->queue_len("/q") == 0);
  CHECK(store->queue_len("/job") == 0);
  const auto keys = store->list_keys();
  CHECK(std::is_sorted(keys.begin(), keys.end()));
  CHECK(std::count(keys.begin(), keys.end(), "raw_no_prefix") == 1);
  CHECK(std::count(keys.begin(), keys.end(), "/done") == 1);
  if (has_barrier) CHECK(to_string(store->get("/mixed")) == "2");
}

// One rank of a torch 2.x job that hands out work through a queue: each
// pushes its rank, meets the others at a barrier (a WAIT on every rank's
// key before torch 2.15), then takes one element.
constexpr const char* kTorchRank = R"PY(
import datetime, os, sys
import torch.distributed as dist
host, port, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
s = dist.TCPStore(host, port, world, False, timeout=datetime.timedelta(seconds=90))
s.queue_push("ranks", str(rank))
if hasattr(s, "barrier"):
    s.barrier("all_pushed", world)
else:
    s.set("pushed/%d" % rank, "1")
    s.wait(["pushed/%d" % r for r in range(world)])
s.set("took/%d" % rank, s.queue_pop("ranks"))
print("RANK", rank, "OK")
)PY";

TEST_CASE("torch2 interop: torch 2.x ranks share a queue and a barrier on collie's server",
          "[tcp_store][torch2]") {
  const std::string python = torch2_python();
  test::TempDir dir;
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  auto script = test::write_script(dir, "rank.py", kTorchRank);
  constexpr int kWorld = 3;
  test::run_ranks(python, script, server->port(), kWorld);
  auto store = TcpStore::connect("127.0.0.1", server->port());
  std::set<std::string> took;
  for (int r = 0; r < kWorld; ++r) took.insert(to_string(store->get("/took/" + std::to_string(r))));
  CHECK(took == std::set<std::string>{"0", "1", "2"});  // each element once
  CHECK(store->queue_len("/ranks") == 0);
  CHECK(to_string(store->get("init/")) == std::to_string(kWorld));
}

// torch 2.x's own server (libuv or classic), hosted by Python, which prints
// its port and then serves until collie sets "/done". It meets collie at a
// barrier when it has one, and checks what collie wrote.
constexpr const char* kTorchServer = R"PY(
import datetime, sys
import torch, torch.distributed as dist
uv = sys.argv[1] == "libuv"
s = dist.TCPStore("127.0.0.1", 0, None, True, timeout=datetime.timedelta(seconds=120),
                  wait_for_workers=False, use_libuv=uv)
assert s.libuvBackend == uv
s.set("hello", "world")
if uv:
    s.queue_push("jobs", "j1")
    s.queue_push("jobs", "j2")
has_barrier = hasattr(s, "barrier")
print("PORT", s.port, "torch", torch.__version__, "barrier", int(has_barrier), flush=True)
if has_barrier:
    s.barrier("joint", 2)  # with collie's client
s.wait(["done"])
assert s.get("from_collie") == b"x", s.get("from_collie")
assert s.get("appended") == b"abc", s.get("appended")
if uv:
    assert s.queue_pop("to_torch", False) == b"from collie"
keys = s.list_keys()
assert "from_collie" in keys and "hello" in keys, keys
print("TORCH SERVER OK", flush=True)
)PY";

TEST_CASE("torch2 interop: collie's client against torch 2.x's server, every query type",
          "[tcp_store][torch2]") {
  const std::string python = torch2_python();
  const std::string backend = GENERATE("libuv", "classic");
  INFO("torch's " << backend << " server");
  const bool libuv = backend == "libuv";
  test::TempDir dir;
  auto script = test::write_script(dir, "server.py", kTorchServer);
  auto p = Subprocess::spawn({python, script, backend});
  const std::string out = p.wait_for_output("\n", 120s);
  std::smatch m;
  REQUIRE(std::regex_search(out, m, std::regex("PORT (\\d+) .* barrier ([01])")));
  const auto port = static_cast<uint16_t>(std::stoi(m[1]));
  const bool has_barrier = m[2] == "1";

  TcpStoreOptions options;
  options.timeout = 60s;
  auto store = TcpStore::connect("127.0.0.1", port, options);  // kDetect
  CHECK(store->protocol() == StoreProtocol::kV2);

  test::check_basic_queries(*store);
  store->append("/appended", as_span("ab"));  // 2.x APPEND
  store->append("/appended", as_span("c"));
  store->multi_set({"/m1", "/m2"}, {to_bytes("one"), to_bytes("two")});
  auto values = store->multi_get({"/m2", "/appended"});
  CHECK(to_string(values[0]) == "two");
  CHECK(to_string(values[1]) == "abc");
  // A wait that times out is cancelled (CANCEL_WAIT), and the client goes on.
  CHECK_THROWS_WITH(store->wait({"/never"}, 300ms), Catch::Contains("[/never]"));
  CHECK(store->add("/n", 1) == 6);

  // LIST_KEYS: every key as stored (the Python side's barrier count among
  // them), in torch's order (none in particular); never the queues.
  auto listed = store->list_keys();
  std::sort(listed.begin(), listed.end());
  std::vector<std::string> expected{"/appended", "/from_collie", "/hello", "/m1", "/m2", "/n"};
  if (has_barrier) expected.insert(expected.begin() + 3, "/joint");
  CHECK(listed == expected);

  if (libuv) {
    CHECK(store->queue_len("/jobs") == 2);
    CHECK(to_string(store->queue_pop("/jobs")) == "j1");
    CHECK(store->try_queue_pop("/jobs") == std::optional<Bytes>(to_bytes("j2")));
    CHECK(store->try_queue_pop("/jobs") == std::nullopt);
    CHECK_THROWS_WITH(store->queue_pop("/jobs", 300ms), Catch::Contains("queue '/jobs'"));
    store->queue_push("/to_torch", "from collie");
    CHECK(store->queue_len("/to_torch") == 1);
  } else {
    // torch's classic server has no queues: it closes the connection, the
    // error says why, and the next call reconnects.
    CHECK_THROWS_WITH(store->queue_len("/jobs"), Catch::Contains("libuv backend"));
    CHECK(store->add("/n", 1) == 7);
  }

  if (has_barrier) {
    store->barrier("/joint", 2, 60s);  // with the Python side
    CHECK(to_string(store->get("/joint")) == "2");
    CHECK_THROWS_WITH(store->barrier("/lonely", 2, 300ms), Catch::Contains("1 of 2 arrived"));
  } else {
    CHECK_THROWS_WITH(store->barrier("/joint", 2, 60s), Catch::Contains("torch >= 2.15"));
  }
  CHECK(store->check({"/hello"}));  // usable after either

  store->set("/done", "1");
  auto status = p.wait(60s);
  INFO("stdout: " << p.out() << "\nstderr: " << p.err());
  CHECK(status.ok());
  CHECK_THAT(p.out(), Catch::Contains("TORCH SERVER OK"));
}

}  // namespace
}  // namespace collie
