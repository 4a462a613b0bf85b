// The process hosting the store dies: rank 0 hosting the TcpStore (what
// tcp:// and env:// do), and collie-run hosting the agent store. Clients
// blocked in a wait or busy with adds must fail with a StoreError or
// NetworkError naming the store's host:port within seconds, not at the end
// of their 60 s store timeout.
#include <signal.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdio>

#include "collie/base/str_cat.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/runtime/api/distributed.h"
#include "collie/test/faults/fault_harness.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {
constexpr double kDetectBoundMs = 10000;
}

// Rank 0 of 3: hosts the store as torch's rank 0 does, joins the group,
// runs one all_reduce, then idles until killed.
COLLIE_TEST_CHILD(store_host) {
  std::shared_ptr<Store> store =
      TcpStore::create("127.0.0.1", 0, true, {.timeout = std::chrono::seconds(60)});
  std::printf("port=%u\n", static_cast<unsigned>(dynamic_cast<TcpStore&>(*store).port()));
  std::fflush(stdout);
  init_process_group({.backend = "cpu", .world_size = 3, .rank = 0, .store = store});
  std::vector<float> v(16, 1.0f);
  all_reduce(view(v.data(), v.size()));
  std::printf("looping\n");
  std::fflush(stdout);
  for (;;) ::pause();
}

// args: port, rank (-1: not a group member, only a store client), mode
// (wait: blocked on a key nobody sets; add: adds in a loop).
COLLIE_TEST_CHILD(store_client) {
  const uint16_t port = static_cast<uint16_t>(std::stoi(args.at(0)));
  const int rank = std::stoi(args.at(1));
  std::shared_ptr<Store> store =
      TcpStore::connect("127.0.0.1", port, {.timeout = std::chrono::seconds(60)});
  if (rank >= 0) {
    init_process_group({.backend = "cpu", .world_size = 3, .rank = rank, .store = store});
    std::vector<float> v(16, 1.0f);
    all_reduce(view(v.data(), v.size()));
  }
  std::printf("looping\n");
  std::fflush(stdout);
  try {
    if (args.at(2) == "wait") {
      store->wait({"never_set"}, std::chrono::seconds(60));
    } else {
      for (;;) store->add(str_cat("counter", rank), 1);
    }
    std::printf("store call returned\n");
  } catch (const std::exception& e) {
    print_caught(e);
  }
  std::fflush(stdout);
  std::_Exit(3);
}

namespace {

void check_clients(std::vector<Subprocess*> clients, int64_t fault_ns, uint16_t port,
                   const std::string& what) {
  for (size_t i = 0; i < clients.size(); ++i) {
    auto st = clients[i]->wait(std::chrono::seconds(90));
    std::string out = clients[i]->out();
    INFO(what << " client " << i << " " << st.describe() << "\n" << out << clients[i]->err());
    CHECK(st.exit_code == 3);
    CHECK_THAT(out, Contains("type=StoreError") || Contains("type=NetworkError"));
    CHECK_THAT(out, Contains(str_cat("127.0.0.1:", port)));
    double ms = detection_ms(out, fault_ns);
    CHECK(ms < kDetectBoundMs);
    size_t t = out.find("type=");
    record(what, str_cat("client ", i, " failed after ", static_cast<int64_t>(ms),
                         " ms: ", out.substr(t, out.find('\n', t) - t)));
  }
}

}  // namespace

TEST_CASE("rank 0 hosting the TcpStore is killed: clients fail naming the address",
          "[faults][store]") {
  auto host = Subprocess::spawn(child_argv("store_host"), {.env = clean_env()});
  std::string out = host.wait_for_output("\n", std::chrono::seconds(30));
  auto port = static_cast<uint16_t>(*find_int(out, "port"));
  auto waiter = Subprocess::spawn(child_argv("store_client", {std::to_string(port), "1", "wait"}),
                                  {.env = clean_env()});
  auto adder = Subprocess::spawn(child_argv("store_client", {std::to_string(port), "2", "add"}),
                                 {.env = clean_env()});
  for (Subprocess* p : {&host, &waiter, &adder})
    p->wait_for_output("looping", std::chrono::seconds(60));
  const int64_t fault_ns = monotonic_ns();
  host.kill(SIGKILL);
  check_clients({&waiter, &adder}, fault_ns, port, "SIGKILL rank 0 hosting the TcpStore");
}

TEST_CASE(
    "collie-run hosting the agent store is killed: clients fail naming the address, workers die",
    "[faults][store][launcher]") {
  TempDir pids;
  // The agent store requires the job secret; the outside clients (another
  // node's agent, a monitoring tool of the same job) are given it.
  const EnvOverrides env = clean_env({{"COLLIE_JOB_SECRET", std::string(64, 'c')}});
  auto launcher =
      Subprocess::spawn(collie_run_argv({"--standalone", "--nproc-per-node", "2"}, "loop_rank",
                                        {"env", "barrier", "-1", "-1", pids.path(), "0", "60"}),
                        {.env = env, .new_process_group = true});
  auto workers = wait_for_pid_files(pids.path(), 2, std::chrono::seconds(60));
  uint16_t port =
      agent_store_port(launcher.wait_for_stderr("agent store listening", std::chrono::seconds(30)));
  // Clients outside the launcher's process tree (another node's agent, a
  // monitoring tool): only the socket can tell them.
  auto waiter = Subprocess::spawn(child_argv("store_client", {std::to_string(port), "-1", "wait"}),
                                  {.env = env});
  auto adder = Subprocess::spawn(child_argv("store_client", {std::to_string(port), "-1", "add"}),
                                 {.env = env});
  for (Subprocess* p : {&waiter, &adder}) p->wait_for_output("looping", std::chrono::seconds(60));
  const int64_t fault_ns = monotonic_ns();
  launcher.kill(SIGKILL);
  check_clients({&waiter, &adder}, fault_ns, port, "SIGKILL collie-run hosting the agent store");
  CHECK(wait_until_dead(workers, std::chrono::seconds(10)).empty());
}
