// init_method URLs: a table of good URLs and their parsed fields, a table of
// malformed ones whose message must name the wrong part, and create_store()
// with real processes: 4 ranks rendezvous over tcp://, env:// (rank 0 hosting
// a TcpStore on port 0 and publishing the port) and file://.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <map>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/file_store.h"
#include "collie/rendezvous/init_method.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/test/support/child.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using Catch::Matchers::Contains;
using test::Subprocess;

namespace {

using Env = std::map<std::string, std::string>;

EnvLookup lookup(const Env& env) {
  return [env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

const Env kMaster = {{"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29500"}};

Env with(Env env, const Env& more) {
  for (const auto& [k, v] : more) env[k] = v;
  return env;
}

}  // namespace

TEST_CASE("parse_init_method: well-formed URLs", "[init_method]") {
  struct Row {
    std::string url;
    Env env;
    InitScheme scheme;
    std::string host;
    int port;
    std::string path;
    int rank, world_size;  // -1: not given
  };
  using S = InitScheme;
  const std::vector<Row> rows = {
      {"tcp://127.0.0.1:29500?rank=1&world_size=4", {}, S::kTcp, "127.0.0.1", 29500, "", 1, 4},
      {"tcp://node-1.cluster:1?world_size=2&rank=0", {}, S::kTcp, "node-1.cluster", 1, "", 0, 2},
      {"tcp://localhost:65535", {}, S::kTcp, "localhost", 65535, "", -1, -1},
      {"tcp://localhost:0?rank=0&world_size=3", {}, S::kTcp, "localhost", 0, "", 0, 3},
      {"tcp://localhost:0", {}, S::kTcp, "localhost", 0, "", -1, -1},
      {"tcp://host:80/", {}, S::kTcp, "host", 80, "", -1, -1},
      {"tcp://[::1]:29500?rank=0&world_size=1", {}, S::kTcp, "::1", 29500, "", 0, 1},
      {"tcp://[fe80::1%eth0]:7", {}, S::kTcp, "fe80::1%eth0", 7, "", -1, -1},
      {"env://", kMaster, S::kEnv, "10.1.2.3", 29500, "", -1, -1},
      {"env://", with(kMaster, {{"RANK", "2"}, {"WORLD_SIZE", "3"}}), S::kEnv, "10.1.2.3", 29500,
       "", 2, 3},
      {"env://?rank=1&world_size=2", with(kMaster, {{"RANK", "7"}, {"WORLD_SIZE", "8"}}), S::kEnv,
       "10.1.2.3", 29500, "", 1, 2},
      {"env://?rank=0", with(kMaster, {{"WORLD_SIZE", "5"}}), S::kEnv, "10.1.2.3", 29500, "", 0, 5},
      {"env://",
       {{"MASTER_ADDR", "[::1]"}, {"MASTER_PORT", "0"}, {"RANK", "0"}},
       S::kEnv,
       "::1",
       0,
       "",
       0,
       -1},
      {"env://",
       {{"MASTER_ADDR", "::1"}, {"MASTER_PORT", "1234"}},
       S::kEnv,
       "::1",
       1234,
       "",
       -1,
       -1},
      {"file:///tmp/rdzv?rank=3&world_size=4", {}, S::kFile, "", 0, "/tmp/rdzv", 3, 4},
      {"file:///shared/dir/job 1/store", {}, S::kFile, "", 0, "/shared/dir/job 1/store", -1, -1},
  };
  for (const auto& row : rows) {
    INFO("url: " << row.url);
    InitMethod m = parse_init_method(row.url, lookup(row.env));
    CHECK(m.scheme == row.scheme);
    CHECK(m.host == row.host);
    CHECK(m.port == row.port);
    CHECK(m.path == row.path);
    CHECK(m.rank_given == (row.rank >= 0));
    CHECK(m.world_size_given == (row.world_size >= 0));
    if (row.rank >= 0) CHECK(m.rank == row.rank);
    if (row.world_size >= 0) CHECK(m.world_size == row.world_size);
    CHECK(m.url == row.url);
  }
  CHECK(parse_init_method("tcp://[::1]:5", lookup({})).address() == "[::1]:5");
  CHECK(parse_init_method("tcp://a.b:5", lookup({})).address() == "a.b:5");
  CHECK(std::string(to_string(InitScheme::kFile)) == "file");
}

TEST_CASE("parse_init_method: malformed URLs name the part that is wrong", "[init_method]") {
  struct Bad {
    std::string url;
    Env env;
    std::vector<std::string> named;
  };
  const std::vector<Bad> rows = {
      {"127.0.0.1:29500", {}, {"no scheme"}},
      {"", {}, {"no scheme"}},
      {"udp://host:1", {}, {"unknown scheme 'udp'"}},
      {"TCP://host:1", {}, {"unknown scheme 'TCP'"}},
      {"tcp://host", {}, {"missing port", "'host'"}},
      {"tcp://host:", {}, {"missing port"}},
      {"tcp://:29500", {}, {"missing host"}},
      {"tcp://", {}, {"missing host"}},
      {"tcp://host:65536", {}, {"port='65536'"}},
      {"tcp://host:99999999999", {}, {"port='99999999999'", "out of range"}},
      {"tcp://host:-1", {}, {"port='-1'"}},
      {"tcp://host:http", {}, {"port='http'"}},
      {"tcp://host:80/path", {}, {"port='80/path'"}},
      {"tcp://::1:29500", {}, {"brackets"}},
      {"tcp://[::1:29500", {}, {"closing ']'"}},
      {"tcp://[::1]", {}, {"missing port", "[::1]"}},
      {"tcp://[::1]29500", {}, {"unexpected '29500'"}},
      {"tcp://h:1?rank=x&world_size=2", {}, {"rank='x'"}},
      {"tcp://h:1?rank=3x&world_size=4", {}, {"rank='3x'"}},
      {"tcp://h:1?rank=&world_size=4", {}, {"rank=''"}},
      {"tcp://h:1?rank=-1&world_size=4", {}, {"rank='-1'"}},
      {"tcp://h:1?rank=4&world_size=4", {}, {"rank=4", "world_size=4"}},
      {"tcp://h:1?rank=0&world_size=0", {}, {"world_size=0"}},
      {"tcp://h:1?rank=0&world_size=two", {}, {"world_size='two'"}},
      {"tcp://h:1?rank=0&rank=1", {}, {"'rank' is given twice"}},
      {"tcp://h:1?rank", {}, {"'rank' has no value"}},
      {"tcp://h:1?rank=0&&world_size=1", {}, {"empty query parameter"}},
      {"tcp://h:1?ranks=0", {}, {"unknown query parameter 'ranks'"}},
      {"tcp://h:1?rank=0&group=x", {}, {"unknown query parameter 'group'"}},
      {"tcp://h:0?rank=1&world_size=2", {}, {"port 0", "rank 1"}},
      {"env://", {{"MASTER_PORT", "1"}}, {"MASTER_ADDR is not set"}},
      {"env://", {{"MASTER_ADDR", ""}, {"MASTER_PORT", "1"}}, {"MASTER_ADDR=''"}},
      {"env://", {{"MASTER_ADDR", "h"}}, {"MASTER_PORT is not set"}},
      {"env://", {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}, {"MASTER_PORT='70000'"}},
      {"env://", with(kMaster, {{"RANK", "3x"}}), {"RANK='3x'"}},
      {"env://", with(kMaster, {{"RANK", "1"}, {"WORLD_SIZE", "-2"}}), {"WORLD_SIZE='-2'"}},
      {"env://", with(kMaster, {{"RANK", "2"}, {"WORLD_SIZE", "2"}}), {"rank=2", "world_size=2"}},
      {"env://?world_size=2", with(kMaster, {{"RANK", "5"}}), {"rank=5", "world_size=2"}},
      {"env://?foo=1", kMaster, {"unknown query parameter 'foo'"}},
      {"env://host:1", kMaster, {"env:// takes no host or path", "'host:1'"}},
      {"env://", {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "0"}, {"RANK", "1"}}, {"port 0", "rank 1"}},
      {"file://", {}, {"missing path"}},
      {"file://tmp/x", {}, {"absolute path", "'tmp'"}},
      {"file://?rank=0", {}, {"missing path"}},
  };
  for (const auto& row : rows) {
    INFO("url: '" << row.url << "'");
    try {
      parse_init_method(row.url, lookup(row.env));
      FAIL("accepted");
    } catch (const InvalidArgument& e) {
      CHECK_THAT(e.what(), Contains("init_method '" + row.url + "'"));
      for (const auto& part : row.named) CHECK_THAT(e.what(), Contains(part));
    }
  }
}

TEST_CASE("create_store needs a rank and a world size", "[init_method]") {
  InitMethod m = parse_init_method("file:///tmp/x", lookup({}));
  CHECK_THROWS_WITH(create_store(m), Contains("rank is not given"));
  m = parse_init_method("env://?rank=0", lookup(kMaster));
  CHECK_THROWS_WITH(create_store(m), Contains("set WORLD_SIZE"));
  // Fields filled in by the caller are checked again.
  m = parse_init_method("tcp://h:0", lookup({}));
  m.rank = 1;
  m.world_size = 2;
  m.rank_given = m.world_size_given = true;
  CHECK_THROWS_WITH(create_store(m), Contains("port 0"));
}

TEST_CASE("create_store with file:// opens a FileStore", "[init_method]") {
  test::TempDir dir;
  auto url = str_cat("file://", dir.file("store"), "?rank=0&world_size=1");
  auto store = create_store(parse_init_method(url, lookup({})), std::chrono::seconds(30));
  REQUIRE(dynamic_cast<FileStore*>(store.get()) != nullptr);
  CHECK(store->timeout() == std::chrono::seconds(30));
  store->set("k", "v");
  CHECK(std::filesystem::exists(dir.file("store")));
  store.reset();
  CHECK_FALSE(std::filesystem::exists(dir.file("store")));
}

// One rank of a rendezvous through create_store. args: rank, world size,
// url. Rank 0 prints the port its store bound; every rank publishes its key,
// waits for everyone's and checks them; the others then report done and
// rank 0, which hosts the server, waits for all of them before leaving.
COLLIE_TEST_CHILD(init_method_rank) {
  const int rank = std::stoi(args.at(0));
  const int world = std::stoi(args.at(1));
  InitMethod method = parse_init_method(args.at(2));
  if (method.rank != rank || method.world_size != world) return 5;
  auto store = create_store(method, std::chrono::seconds(60));
  if (rank == 0) {
    if (auto* tcp = dynamic_cast<TcpStore*>(store.get())) std::printf("PORT %u\n", tcp->port());
    std::printf("READY\n");
    std::fflush(stdout);
  }
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back(str_cat("rank/", r));
  store->set(keys[rank], str_cat("hello from ", rank));
  store->wait(keys);
  for (int r = 0; r < world; ++r)
    if (to_string(store->get(keys[r])) != str_cat("hello from ", r)) return 3;
  if (store->add("joined", 1) > world) return 4;
  std::vector<std::string> done;
  for (int r = 1; r < world; ++r) done.push_back(str_cat("done/", r));
  if (rank == 0)
    store->wait(done);
  else
    store->set(done[rank - 1], "1");
  return 0;
}

namespace {

constexpr int kWorld = 4;

uint16_t read_port(Subprocess& rank0) {
  std::string out = rank0.wait_for_output("READY", std::chrono::seconds(60));
  unsigned port = 0;
  REQUIRE(std::sscanf(out.c_str(), "PORT %u", &port) == 1);
  REQUIRE(port > 0);
  return static_cast<uint16_t>(port);
}

void require_all_ok(std::vector<Subprocess>& procs) {
  for (auto& p : procs) {
    auto status = p.wait(std::chrono::seconds(90));
    INFO(p.command_line() << "\nstdout:\n" << p.out() << "\nstderr:\n" << p.err());
    REQUIRE(status.ok());
  }
}

}  // namespace

TEST_CASE("create_store: 4 processes rendezvous over tcp:// with rank 0 on port 0",
          "[init_method][multiprocess]") {
  auto url = [](int rank, uint16_t port) {
    return str_cat("tcp://127.0.0.1:", port, "?rank=", rank, "&world_size=", kWorld);
  };
  std::vector<Subprocess> procs;
  procs.push_back(Subprocess::spawn(test::child_argv("init_method_rank", {"0", "4", url(0, 0)})));
  const uint16_t port = read_port(procs[0]);
  for (int r = 1; r < kWorld; ++r)
    procs.push_back(Subprocess::spawn(
        test::child_argv("init_method_rank", {std::to_string(r), "4", url(r, port)})));
  require_all_ok(procs);
}

TEST_CASE("create_store: 4 processes rendezvous over env:// with rank 0 on port 0",
          "[init_method][multiprocess]") {
  auto spawn = [](int rank, uint16_t port) {
    test::SpawnOptions options;
    options.env = {{"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", std::to_string(port)},
                   {"RANK", std::to_string(rank)},
                   {"WORLD_SIZE", std::to_string(kWorld)}};
    return Subprocess::spawn(
        test::child_argv("init_method_rank", {std::to_string(rank), "4", "env://"}), options);
  };
  std::vector<Subprocess> procs;
  procs.push_back(spawn(0, 0));
  const uint16_t port = read_port(procs[0]);
  for (int r = 1; r < kWorld; ++r) procs.push_back(spawn(r, port));
  require_all_ok(procs);
}

TEST_CASE("create_store: 4 processes rendezvous over file://", "[init_method][multiprocess]") {
  test::TempDir dir;
  std::vector<Subprocess> procs;
  for (int r = 0; r < kWorld; ++r) {
    auto url = str_cat("file://", dir.file("rdzv"), "?rank=", r, "&world_size=", kWorld);
    procs.push_back(
        Subprocess::spawn(test::child_argv("init_method_rank", {std::to_string(r), "4", url})));
  }
  require_all_ok(procs);
  CHECK_FALSE(std::filesystem::exists(dir.file("rdzv")));
}
