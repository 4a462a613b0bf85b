// NodeRendezvous: how the launchers of one job find one another. Node 0's
// launcher hosts the agent store (a TcpStore server on master-addr:port that
// the workers use too); every launcher, node 0's included, is a client of it.
//
// Launcher keys live under "/collie-run/<run id>/", apart from the workers'
// "/worker/attempt_<N>/" prefix:
//
//   node/<i>/claims       add(1) must return 1: two launchers with one --node-rank fail
//   config                first writer wins; "nnodes=2 max_restarts=0" must match
//   node/<i>              "<nproc> <hostname>": global rank bases are prefix sums
//   join/...              barrier: every node joined
//   attempt/<N>/start/... barrier: every node starts attempt N together
//   attempt/<N>/failed    the first failure any node reported during attempt N
//   attempt/<N>/end/...   barrier: every node's workers of attempt N are done
//   exit/...              node 0 keeps the store up until every node left
//
// A barrier is add(<name>/count, 1) by each node; the node that brings it to
// nnodes sets <name>/done, which everyone waits for under the rendezvous
// timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "rendezvous/store.h"

namespace collie {
class TcpStoreServer;
}

namespace collie::launcher {

// Thrown out of a rendezvous wait when the launcher got a termination signal.
class RendezvousInterrupted : public Error {
 public:
  RendezvousInterrupted(int signal, const std::string& what) : Error(what), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

struct NodeRendezvousOptions {
  int nnodes = 1;
  int node_rank = 0;
  int nproc = 1;
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = 29500;  // 0 on node 0: a free port
  std::string run_id = "none";
  int max_restarts = 0;
  std::string hostname;
  std::chrono::milliseconds timeout = std::chrono::seconds(600);
  // What the job secret was derived from, if it was: added to a failed
  // connection's message, since every node must derive it alike.
  std::string secret_source;
};

class NodeRendezvous {
 public:
  // Node 0 starts the store; every node connects to it. Throws
  // NetworkError naming master-addr:port when node 0 cannot host it or be
  // reached in time.
  static std::unique_ptr<NodeRendezvous> start(const NodeRendezvousOptions& options);
  ~NodeRendezvous();

  // Barriers poll this between looks at the store (returns a signal number,
  // or 0), so that Ctrl-C is not held up by nodes that are slow to arrive.
  void set_interrupt_check(std::function<int()> check) { interrupt_check_ = std::move(check); }

  // Registers this node and waits for all nnodes nodes; then rank_base()
  // and world_size() are known. Throws TimeoutError naming the missing
  // nodes, InvalidArgument for a duplicate node rank or mismatched flags.
  void join();

  uint16_t port() const { return port_; }  // the store's real port
  // Node 0: "host:port" the store really listens on (numeric, IPv6 in
  // brackets); "" on the other nodes.
  std::string listen_address() const;
  // The MASTER_ADDR the workers get: master_addr, or for a one-node job
  // (whose store listens on loopback only) the loopback address.
  const std::string& worker_master_addr() const { return worker_master_addr_; }
  int rank_base() const { return rank_base_; }
  int world_size() const { return world_size_; }

  // Waits until every node is ready to start attempt N.
  void begin_attempt(int attempt);
  // The reason another node (or this one) gave for failing attempt N, if any.
  std::optional<std::string> remote_failure(int attempt);
  // Records this node's failure of attempt N (the first report wins).
  void report_failure(int attempt, const std::string& reason);
  // Waits until every node finished attempt N; returns the failure reported
  // during it, if any.
  std::optional<std::string> finish_attempt(int attempt);
  // Leaves the job. Node 0 waits (briefly) for every node to leave before it
  // stops the store, so no launcher loses the store in its last call.
  void close();

 private:
  NodeRendezvous() = default;
  void barrier(const std::string& name, const std::string& what);
  std::string key(const std::string& k) const;

  NodeRendezvousOptions options_;
  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<Store> store_;
  uint16_t port_ = 0;
  std::string worker_master_addr_;
  int rank_base_ = 0;
  int world_size_ = 0;
  bool closed_ = false;
  std::function<int()> interrupt_check_;
};

}  // namespace collie::launcher
