// Workers that rendezvous through a store the way a real job does, whatever
// started them: collie-run or torchrun (the agent store under
// "/worker/attempt_<N>"), or srun / mpirun (rank 0 hosts a TcpStore at
// MASTER_ADDR:MASTER_PORT), then run an all_reduce through
// init_process_group.
#include <cstdio>
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

using namespace collie;

// args: fail_rank (-1: none; fails with exit 4 on attempt 0 after the
// rendezvous) and "allreduce" to also run init_process_group + all_reduce.
COLLIE_TEST_CHILD(store_rdv) {
  const int fail_rank = args.empty() ? -1 : std::stoi(args[0]);
  const bool do_all_reduce = args.size() > 1 && args[1] == "allreduce";
  const LaunchEnv le = detect_launch_env();
  if (!le.distributed) throw Error("store_rdv: no launcher detected");
  if (le.master_addr.empty() || !le.master_port)
    throw Error("store_rdv: MASTER_ADDR/MASTER_PORT unset");
  const int rank = le.rank, world = le.world_size, attempt = le.restart_count;
  TcpStoreOptions options;
  options.timeout = std::chrono::seconds(60);

  std::shared_ptr<Store> raw, store;
  std::string source;
  if (le.use_agent_store) {
    raw = TcpStore::connect(le.master_addr, *le.master_port, options);
    // torchrun's contract, spelled out here rather than taken from collie's
    // runtime: the agent store's keys for attempt N live under this prefix.
    store = std::make_shared<PrefixStore>(str_cat("/worker/attempt_", attempt), raw);
    source = "agent store";
  } else {
    raw = TcpStore::create(le.master_addr, *le.master_port, rank == 0, options);
    store = std::make_shared<PrefixStore>("launcher_test", raw);
    source = str_cat("store hosted by rank 0 (", to_string(le.source), ")");
  }
  auto* tcp = dynamic_cast<TcpStore*>(raw.get());
  const char* protocol = tcp && tcp->protocol() == StoreProtocol::kV1_13 ? "1.13" : "2.x";

  store->set(str_cat("addr/", rank), str_cat("hello from rank ", rank));
  int64_t joined = store->add("joined", 1);
  if (joined < 1 || joined > world)
    throw Error(str_cat("rank ", rank, ": 'joined' reached ", joined, " in a world of ", world,
                        ": keys of another attempt leaked in"));
  for (int r = 0; r < world; ++r) {
    std::string got = to_string(store->get(str_cat("addr/", r)));
    if (got != str_cat("hello from rank ", r))
      throw Error(str_cat("rank ", rank, " read '", got, "' for rank ", r));
  }
  if (le.use_agent_store && !raw->check({str_cat("/worker/attempt_", attempt, "/addr/", rank)}))
    throw Error("the prefixed key is missing from the raw agent store");
  std::printf("rdv ok rank %d of %d local %d attempt %d via %s protocol %s\n", rank, world,
              le.local_rank, attempt, source.c_str(), protocol);
  std::fflush(stdout);

  // Everyone has reported before the failure comes, so the test sees each
  // rank's rendezvous of attempt 0.
  if (store->add("reported", 1) == world) store->set("all_reported", "1");
  if (rank == fail_rank && attempt == 0) {
    store->wait({"all_reported"});
    std::fprintf(stderr, "rank %d fails attempt 0 after the rendezvous\n", rank);
    return 4;
  }

  if (do_all_reduce) {
    InitOptions init;
    init.backend = "cpu";
    init.timeout = std::chrono::seconds(60);
    if (!le.use_agent_store) {
      init.store = raw;
      init.rank = rank;
      init.world_size = world;
    }
    init_process_group(init);
    std::vector<float> v(1000, static_cast<float>(rank + 1));
    all_reduce(view(v.data(), v.size()));
    const float want = static_cast<float>(world * (world + 1) / 2);
    for (float x : v)
      if (x != want) throw Error(str_cat("rank ", rank, ": all_reduce gave ", x, ", want ", want));
    std::printf("allreduce ok rank %d sum %g\n", rank, static_cast<double>(want));
    std::fflush(stdout);
    destroy_process_group();
  }

  // Nobody leaves before everyone is done with the store, and rank 0 (which
  // may host it) leaves last: the others announce that they are leaving.
  if (store->add("done", 1) == world) store->set("all_done", "1");
  store->wait({"all_done"});
  if (rank != 0) {
    if (store->add("left", 1) == world - 1) store->set("all_left", "1");
  } else if (world > 1) {
    store->wait({"all_left"});
  }
  return 0;
}
