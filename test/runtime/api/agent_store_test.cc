// init_process_group under a launcher's agent store (collie-run, torchrun):
// every rank is a client of the launcher's TcpStore, under torch's
// per-attempt prefix. Tested against our own TcpStoreServer standing in for
// the launcher, and against PyTorch's own torchrun where it is installed.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <optional>
#include <string>

#include "collie/base/error.h"
#include "collie/rendezvous/prefix_store.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/runtime/api/distributed.h"
#include "collie/runtime/api/init_rendezvous.h"
#include "collie/test/runtime/api/rank_runner.h"
#include "collie/test/support/skip.h"
#include "collie/test/support/subprocess.h"

using namespace collie;
using namespace collie::test;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

EnvLookup table(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace

TEST_CASE("agent store: every rank is a client under /worker/attempt_<restart count>", "[agent]") {
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  const std::string port = std::to_string(server->port());
  auto env = table({{"TORCHELASTIC_USE_AGENT_STORE", "True"},
                    {"TORCHELASTIC_RESTART_COUNT", "3"},
                    {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", port},
                    {"RANK", "0"},
                    {"WORLD_SIZE", "2"}});
  // Rank 0 too connects: a second server on the launcher's port would fail.
  Rendezvous r = open_rendezvous(InitOptions{}, 10s, env);
  CHECK(r.rank == 0);
  CHECK(r.world_size == 2);
  CHECK_THAT(r.source, Contains("agent store 127.0.0.1:" + port) && Contains("attempt 3"));
  r.store->set("probe", "hello");
  auto raw = TcpStore::connect("127.0.0.1", server->port(), {.timeout = 10s});
  CHECK(to_string(raw->get("/worker/attempt_3/probe")) == "hello");
  CHECK(agent_store_prefix(0) == "/worker/attempt_0");

  // tcp:// under the agent store names the launcher's store the same way.
  Rendezvous t = open_rendezvous(
      InitOptions{.init_method = "tcp://127.0.0.1:" + port, .world_size = 2, .rank = 1}, 10s, env);
  CHECK(t.rank == 1);
  CHECK(to_string(t.store->get("probe")) == "hello");

  // Options override the launcher's variables, as torch's rank=/world_size=.
  Rendezvous o = open_rendezvous(InitOptions{.world_size = 4, .rank = 3}, 10s, env);
  CHECK(o.rank == 3);
  CHECK(o.world_size == 4);
}

TEST_CASE("env:// without an agent store: rank 0 hosts the store (port 0 for a job of one)",
          "[agent]") {
  auto env = table(
      {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "0"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}});
  Rendezvous r = open_rendezvous(InitOptions{}, 10s, env);
  r.store->set("k", "v");
  CHECK(to_string(r.store->get("k")) == "v");
  CHECK(r.source == "env://");
}

TEST_CASE("srun starting the program itself: env:// finds the store on the job's first node",
          "[agent][slurm]") {
  // What srun gives a task when the job script exports no MASTER_ADDR: the
  // store's host is the first node of the (compressed) node list, and the
  // data plane listens on the address that routes there.
  auto env = table({{"SLURM_PROCID", "0"},
                    {"SLURM_NTASKS", "1"},
                    {"SLURM_LOCALID", "0"},
                    {"SLURM_NODEID", "0"},
                    {"SLURM_JOB_ID", "77"},
                    {"SLURM_JOB_NODELIST", "localhost,node[2-3]"},
                    {"MASTER_PORT", "0"}});
  Rendezvous r = open_rendezvous(InitOptions{}, 10s, env);
  CHECK(r.rank == 0);
  CHECK(r.world_size == 1);
  CHECK(r.store_host == "localhost");
  r.store->set("k", "v");
  CHECK(to_string(r.store->get("k")) == "v");
  // Without a node list there is nothing to derive it from: the error
  // still names MASTER_ADDR.
  CHECK_THROWS_WITH(
      open_rendezvous(InitOptions{}, 1s, table({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}})),
      Contains("MASTER_ADDR"));
}

TEST_CASE("rendezvous errors name what is missing", "[agent]") {
  CHECK_THROWS_AS(open_rendezvous(InitOptions{}, 1s, table({})), InvalidArgument);
  CHECK_THROWS_WITH(open_rendezvous(InitOptions{}, 1s, table({{"RANK", "0"}, {"WORLD_SIZE", "2"}})),
                    Contains("MASTER_ADDR"));
  CHECK_THROWS_WITH(open_rendezvous(InitOptions{.init_method = "carrier://x"}, 1s, table({})),
                    Contains("carrier"));
}

namespace {

// `world` ranks run every collective (distributed_children.cc checks each
// result) after init_process_group through env:// under an agent store the
// parent hosts on `master_addr`, the MASTER_ADDR they are given.
std::unique_ptr<TcpStoreServer> run_under_agent_store(const std::string& master_addr, int world) {
  auto server = TcpStoreServer::start({.host = master_addr, .port = 0});
  run_ranks(world, [&](int rank) {
    return RankLaunch{child_argv("dist_rank", {"env", "collectives"}),
                      {{"TORCHELASTIC_USE_AGENT_STORE", "True"},
                       {"TORCHELASTIC_RESTART_COUNT", "1"},
                       {"MASTER_ADDR", master_addr},
                       {"MASTER_PORT", std::to_string(server->port())},
                       {"RANK", std::to_string(rank)},
                       {"WORLD_SIZE", std::to_string(world)}}};
  });
  return server;
}

}  // namespace

TEST_CASE("init_process_group through an agent store hosted by the parent, 4 ranks", "[agent]") {
  auto server = run_under_agent_store("127.0.0.1", 4);
  // The group's keys went under the attempt's prefix.
  auto raw = TcpStore::connect("127.0.0.1", server->port(), {.timeout = 10s});
  CHECK(raw->num_keys() > 0);
}

TEST_CASE("MASTER_ADDR=localhost, a host name: the store and the data plane resolve it, 3 ranks",
          "[agent]") {
  // Each rank's data listener binds the address that routes to the name
  // (127.0.0.1 or ::1), and the ranks reduce over it.
  run_under_agent_store("localhost", 3);
}

TEST_CASE("MASTER_ADDR=::1: the store and the data plane over IPv6, 2 ranks", "[agent]") {
  // CI machines have ::1 on lo; a kernel booted without IPv6 has not.
  const int probe = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (probe < 0) test::skip_test("no IPv6 on this machine (socket(AF_INET6) failed)");
  ::close(probe);
  run_under_agent_store("::1", 2);
}

TEST_CASE("under PyTorch's torchrun (1.13 agent store), collie ranks run collectives",
          "[agent][torch]") {
  test::require_or_skip(test::torch_missing().empty(), test::torch_missing());
  // torch 1.13's Std.from_str (its --redirects/--tee parser) returns None
  // under Python 3.11's enum, and torchrun then dies before starting a
  // worker; the snippet replaces it with an equivalent before running
  // torchrun's own main().
  const std::string torchrun =
      "import re\n"
      "from torch.distributed.elastic.multiprocessing import api\n"
      "def from_str(vm):\n"
      "    if re.fullmatch(r'\\d', vm):\n"
      "        return api.Std(int(vm))\n"
      "    return {int(k): api.Std(int(v)) for k, v in (p.split(':') for p in vm.split(','))}\n"
      "api.Std.from_str = staticmethod(from_str)\n"
      "from torch.distributed.run import main\n"
      "main()\n";
  // --standalone: torchrun picks a free port and hosts its agent store there.
  auto argv = std::vector<std::string>{"/usr/bin/python3", "-c", torchrun,     "--standalone",
                                       "--nproc_per_node", "2",  "--no_python"};
  for (auto& a : child_argv("dist_rank", {"env", "collectives"})) argv.push_back(a);
  SpawnOptions options;
  for (const char* name :
       {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE"})
    options.env[name] = std::nullopt;
  options.new_process_group = true;
  auto p = Subprocess::spawn(argv, options);
  auto status = p.wait(120s);
  INFO("stdout:\n" << p.out() << "\nstderr:\n" << p.err());
  REQUIRE(status.ok());
  CHECK_THAT(p.out(), Contains("ok rank 0") && Contains("ok rank 1"));
}
