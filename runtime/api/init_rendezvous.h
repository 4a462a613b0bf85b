// How init_process_group finds its store, rank and world size (the order
// torch.distributed follows): the caller's store, else the launcher's agent
// store, else the init_method URL. Separate from distributed.cc so that the
// decision is testable without creating a process group.
#pragma once

#include <memory>
#include <string>

#include "collie/base/deadline.h"
#include "collie/rendezvous/env/launch_env.h"
#include "collie/rendezvous/store.h"

namespace collie {

struct InitOptions;

struct Rendezvous {
  std::shared_ptr<Store> store;  // not yet prefixed with "default_pg"
  int rank = -1;
  int world_size = -1;
  // For logs: "caller's store", "agent store 10.0.0.1:29500 attempt 0", "env://".
  std::string source;
  // The TCP store's host ("" for file:// and a caller's store).
  std::string store_host;
};

// Blocks until the store is reachable (connect) within `timeout`. Throws
// InvalidArgument for missing or inconsistent rank/world size/URL, and the
// store's errors (StoreError, TimeoutError, NetworkError) naming host:port.
Rendezvous open_rendezvous(const InitOptions& options, Timeout timeout,
                           const EnvLookup& env = process_env);

// torchrun's key prefix for the agent store: "/worker/attempt_<restart_count>".
std::string agent_store_prefix(int restart_count);

}  // namespace collie
