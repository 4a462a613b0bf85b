// The worker programs of survive_test.cc: a training-like loop that shrinks
// its group when a peer dies under `collie-run --on-failure shrink`, and a
// worker that reports whether it is a replacement under
// `--on-failure replace`. Each is this test executable run as
// `test_runtime_launcher --collie-child NAME ARGS...` (test/support/child.h).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/env/launch_env.h"
#include "collie/rendezvous/prefix_store.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/runtime/api/distributed.h"
#include "collie/test/support/child.h"
#include "collie/test/support/pid_files.h"

using namespace collie;
using namespace collie::test;

namespace {

float value(int rank, int64_t k, size_t i) { return static_cast<float>((rank + 1) + (i + k) % 7); }

// One all_reduce of n floats on the default group, every 97th element
// checked against the sum of what each rank contributed.
void checked_all_reduce(int64_t k, size_t n) {
  const int rank = get_rank(), world = get_world_size();
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value(rank, k, i);
  get_default_group()->all_reduce(view(v.data(), n), {.timeout = std::chrono::seconds(60)})->wait();
  for (size_t i = 0; i < n; i += 97) {
    float want = 0;
    for (int r = 0; r < world; ++r) want += value(r, k, i);
    if (v[i] != want)
      throw Error(str_cat("all_reduce #", k, " element ", i, " is ", v[i], ", expected ", want));
  }
}

// The agent store under this attempt's prefix, as init_process_group sees it.
std::shared_ptr<Store> agent_store() {
  const LaunchEnv le = detect_launch_env();
  if (!le.use_agent_store || !le.master_port) throw Error("survive: not under collie-run");
  TcpStoreOptions options;
  options.timeout = std::chrono::seconds(60);
  std::shared_ptr<Store> raw = TcpStore::connect(le.master_addr, *le.master_port, options);
  return std::make_shared<PrefixStore>(str_cat("/worker/attempt_", le.restart_count), raw);
}

}  // namespace

// args: pid_dir. Joins the default group through the agent store, writes its
// pid, and runs all_reduce in a loop ("looping rank R" once under way)
// until a peer's death breaks the group; then shrinks to the survivors,
// checks one all_reduce on the new group, prints "shrunk rank R -> R' of N
// excluded=..." and exits 0. Whoever is SIGKILLed never gets that far.
COLLIE_TEST_CHILD(survive_shrink) {
  init_process_group({.backend = "cpu", .timeout = std::chrono::seconds(60)});
  const int rank = get_rank();
  write_pid_file(args.at(0), rank);
  try {
    for (int64_t k = 0;; ++k) {
      checked_all_reduce(k, k % 2 ? 1 << 16 : 5);
      if (k == 3) {
        std::printf("looping rank %d\n", rank);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d saw the failure: %s\n", rank, e.what());
  }
  std::vector<int> excluded;
  shrink_group({}, {}, {.timeout = std::chrono::seconds(30)}, &excluded);
  checked_all_reduce(1000, 1 << 16);
  std::printf("shrunk rank %d -> %d of %d excluded=%s\n", rank, get_rank(), get_world_size(),
              join(excluded, ",").c_str());
  std::fflush(stdout);
  barrier();
  destroy_process_group();
  return 0;
}

// args: pid_dir victim mode (once | always). Every worker prints its
// launch variables, tagged "orig" or "repl" (COLLIE_REPLACEMENT set). The
// victim's first process SIGKILLs itself once every original worker is
// running; its replacement exits 0 ("once", after telling the others
// through the agent store) or SIGKILLs itself too ("always"). The other
// workers wait for the replacement's word, then exit 0: they run
// throughout, so the replacement joins a running group.
COLLIE_TEST_CHILD(survive_replace) {
  const std::string dir = args.at(0);
  const int victim = std::stoi(args.at(1));
  const bool always = args.at(2) == "always";
  const bool replacement = std::getenv("COLLIE_REPLACEMENT") != nullptr;
  const int rank = std::stoi(std::getenv("RANK")), world = std::stoi(std::getenv("WORLD_SIZE"));
  const char* tag = replacement ? "repl" : "orig";
  for (const char* k :
       {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
        "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
        "TORCHELASTIC_USE_AGENT_STORE", "COLLIE_JOB_SECRET", "COLLIE_REPLACEMENT"}) {
    const char* v = std::getenv(k);
    std::printf("%s %s=%s\n", tag, k, v ? v : "<unset>");
  }
  std::printf("%s pid=%d\n", tag, static_cast<int>(::getpid()));
  std::fflush(stdout);
  auto store = agent_store();
  if (replacement) {
    if (always) ::raise(SIGKILL);
    store->set("replaced", "1");
    return 0;
  }
  write_pid_file(dir, rank);
  wait_for_pid_files(dir, world);
  if (rank == victim) ::raise(SIGKILL);
  store->wait({"replaced"}, std::chrono::seconds(60));
  std::printf("rank %d saw the replacement\n", rank);
  return 0;
}
