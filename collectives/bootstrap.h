// Wiring a communicator up: listen, publish the address in the store, connect
// the full mesh and check every peer's identity, within one deadline.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/connection.h"

namespace collie {

struct Mesh {
  std::string address;                                   // this rank's "host:port"
  std::vector<std::unique_ptr<Connection>> connections;  // by rank, null for self
};

// Every pair (i < j) gets one connection, opened by j to i's listener, which
// j finds under "<prefix>/collectives/addr/<i>". The connector introduces
// itself with a hello (magic, group hash, rank, size, its address).
Mesh build_mesh(Store& store, int rank, int size, const CommunicatorOptions& options);

// The address to listen on: options.bind_host, else COLLIE_SOCKET_IFNAME's
// IPv4 address, else the one that routes to MASTER_ADDR, else 127.0.0.1.
std::string resolve_bind_host(const std::string& bind_host);

// "socket(): Too many open files (RLIMIT_NOFILE is 64; a world of 6 needs
// ...)": why `call`, which creates a descriptor, failed with `err` on a rank
// of a `size`-rank world. Running out of descriptors is the usual cause at
// scale (each rank holds a listener plus one socket per peer), so that case
// names the limit and what the world needs.
std::string describe_fd_failure(std::string_view call, int err, int size);

}  // namespace collie
