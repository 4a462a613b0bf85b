// Joining a group: listen (TCP, and a Unix socket for ranks on the same
// host), publish this rank's record in the store, wait until every rank has
// joined, and hand the Transport a PeerLinker (linker.h) that connects peers
// when an algorithm first talks to them (lazy connections: a rank's sockets
// grow with the peers it talks to, not with the world).
//
// Store work is O(1) per rank, O(N) for the job: one add to find the join
// round, one compare_set to publish the record (which is how a rank that
// joins twice is caught), one add and one wait for the join barrier, and a
// multi_get of the ring neighbours' records; any other peer's record is read
// when that peer is first needed. A group that spans hosts (up to
// kHostMapMaxRanks ranks) reads every record in that multi_get instead:
// O(N) per rank, for the host map of the hierarchical algorithms.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collie/collectives/communicator.h"
#include "collie/collectives/transport/linker.h"
#include "collie/collectives/transport/transport.h"
#include "collie/rendezvous/store.h"

namespace collie {

// CommunicatorOptions::transport ("": auto); InvalidArgument for anything
// but auto, tcp or shm.
TransportChoice resolve_transport(const std::string& option);

// Above this world size a group spanning hosts does not read every rank's
// record at join (the host map the hierarchical algorithms need), keeping
// the store's work O(1) per rank; the flat algorithms run.
inline constexpr int kHostMapMaxRanks = 256;

struct Bootstrap {
  std::string address;                 // this rank's TCP "host:port"
  int local_ranks = 1;                 // ranks (this one included) with this host id
  std::unique_ptr<PeerLinker> linker;  // connects peers on first use
  // When the group spans hosts (local_ranks < size, transport not tcp, size
  // <= kHostMapMaxRanks): host_of[r] is rank r's host, the hosts numbered
  // in the order of their lowest rank. The same on every rank. Else empty.
  std::vector<int> host_of;
};

// Joins the group (see above) within options.timeout. Throws TimeoutError
// naming the ranks that never joined, NetworkError when a rank joined twice
// (on every rank, promptly), InvalidArgument for a bad option.
Bootstrap join_group(Store& store, int rank, int size, const CommunicatorOptions& options);

}  // namespace collie
