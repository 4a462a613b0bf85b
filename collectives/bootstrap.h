// Wiring a communicator up: listen (TCP, and a Unix socket for ranks on the
// same host), publish this rank's record in the store, wait until every rank
// has joined, and hand the Transport a PeerLinker that connects peers when an
// algorithm first talks to them (lazy connections: a rank's sockets grow
// with the peers it talks to, not with the world). Each pair's channel is
// chosen when it connects: shared memory when both ranks are on one host
// (same host id) and the pair proves it works, else TCP.
//
// Store work is O(1) per rank, O(N) for the job: one add to find the join
// round, one compare_set to publish the record (which is how a rank that
// joins twice is caught), one add and one wait for the join barrier, and a
// multi_get of the ring neighbours' records; any other peer's record is read
// when that peer is first needed. A group that spans hosts (up to
// kHostMapMaxRanks ranks) reads every record in that multi_get instead:
// O(N) per rank, for the host map of the hierarchical algorithms.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/transport.h"

namespace collie {

enum class TransportChoice { kAuto, kTcp, kShm };
// options.transport, else COLLIE_TRANSPORT, else auto; InvalidArgument for
// anything but auto, tcp or shm.
TransportChoice resolve_transport(const std::string& option);

// `option` (CommunicatorOptions::host_id), else COLLIE_HOST_ID, else
// hostname + boot id + network namespace inode: ranks with the same host id
// share memory; different network namespaces count as different hosts
// (which is how the tests make several "hosts").
std::string host_id(const std::string& option = "");

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

// The address to listen on: options.bind_host, else COLLIE_SOCKET_IFNAME's
// address, else the one that routes to MASTER_ADDR, else 127.0.0.1.
std::string resolve_bind_host(const std::string& bind_host);

// "socket(): Too many open files (RLIMIT_NOFILE is 64; ...)": why `call`,
// which creates a descriptor, failed with `err` on a rank of a `size`-rank
// world. Running out of descriptors is the usual cause at scale, so that case
// names the limit and what a rank needs.
std::string describe_fd_failure(std::string_view call, int err, int size);

// "host:port", with brackets around an IPv6 host ("[::1]:29500").
std::string join_address(const std::string& host, uint16_t port);
// The numeric host of an AF_INET or AF_INET6 address.
std::string numeric_host(const sockaddr* sa);
// join_address of an AF_INET or AF_INET6 address and its port.
std::string tcp_address(const sockaddr* sa);

}  // namespace collie
