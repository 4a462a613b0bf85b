// BackendContext: what every backend's factory is given to build one group
// (the API layer fills it in; see runtime/api/backend_registry.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/rendezvous/store.h"

namespace collie {

struct BackendContext {
  // The group's own store (already prefixed for this group); the backend may
  // keep it for the group's lifetime.
  std::shared_ptr<Store> store;
  int rank = -1;
  int size = -1;
  // The group's collective timeout (never kUnsetTimeout here).
  Timeout timeout = kDefaultTimeout;
  // "0" for the default group, "1", "2"... for new_group's, as in torch.
  std::string group_name;
  // The cpu backend's channels: "auto", "tcp" or "shm" ("" =
  // COLLIE_TRANSPORT, else auto; see CommunicatorOptions::transport).
  std::string transport;
  // The store's host, for a backend that must pick which local address to
  // listen on (the one that routes there; MASTER_ADDR when set wins):
  // under srun without a launcher no MASTER_ADDR is set. Empty: unknown
  // (a file:// store, a caller's store).
  std::string route_host;
  // The members' ranks in the world, by group rank (the flight recorder's
  // pg_config); empty: 0..size-1. And the group's description ("default_pg"
  // for the world group; "": "undefined"), as torch's group_desc.
  std::vector<int> global_ranks;
  std::string group_desc;
};

}  // namespace collie
