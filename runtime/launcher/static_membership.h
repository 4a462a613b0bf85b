// StaticMembership: how the launchers of a static job (--rdzv-backend
// static, node ranks given) find one another. Node 0's launcher hosts the
// agent store (a TcpStore server on master-addr:port that the workers use
// too); every launcher, node 0's included, is a client of it. Every attempt
// starts on every node together and ends on every node together, so a
// failure anywhere restarts (or ends) the job everywhere.
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
//   node/<i>/alive        node i's heartbeat counter (node_heartbeat.h)
//   gone                  node 0's verdict: which launcher stopped beating
//
// With several nodes every launcher beats, and node 0 watches the beats, so
// that a launcher that is gone (SIGKILLed, its machine lost) ends the job
// within seconds, named, on every other node, instead of holding them at
// the next barrier for the whole --rdzv-timeout.
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

#include "collie/rendezvous/store.h"
#include "collie/runtime/launcher/membership.h"
#include "collie/runtime/launcher/node_heartbeat.h"

namespace collie {
class TcpStoreServer;
}

namespace collie::launcher {

struct StaticRendezvousOptions {
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
  // How often each launcher beats, and how many beats one may miss before
  // the others count it as gone.
  HeartbeatOptions heartbeat;
};

class StaticMembership : public Membership {
 public:
  // Node 0 starts the store; every node connects to it. Throws
  // NetworkError naming master-addr:port when node 0 cannot host it or be
  // reached in time.
  static std::unique_ptr<StaticMembership> start(const StaticRendezvousOptions& options);
  ~StaticMembership() override;

  void set_interrupt_check(std::function<int()> check) override {
    interrupt_check_ = std::move(check);
  }
  // The first call joins the job: registers this node and waits for all
  // nnodes nodes (TimeoutError naming the missing ones, InvalidArgument for
  // a duplicate node rank or mismatched flags). Every call then waits until
  // every node is ready to start the next attempt.
  Round next_round() override;
  // The failure another node reported during this attempt (a one-node job
  // has no other node to hear from).
  std::optional<RoundEnd> check() override;
  std::optional<std::string> membership_change() override { return std::nullopt; }
  void report_failure(const std::string& reason) override;
  // Waits until every node finished the attempt, whatever its outcome.
  std::optional<std::string> finish(bool succeeded) override;
  // Node 0 waits (briefly) for every node to leave before it stops the
  // store, so that no launcher loses the store in its last call.
  void close(const std::string& outcome) override;

  RoundWords words() const override { return {"attempt", "attempt", "restarting the group"}; }
  std::string hosting_line() const override;
  std::string round_line() const override { return ""; }
  std::string store_lost_line() const override;
  std::string failed_elsewhere_line(const std::string& reason) const override;

 private:
  StaticMembership() = default;
  void join();
  void barrier(const std::string& name, const std::string& what);
  std::string key(const std::string& k) const;
  // The reason recorded for the current attempt, if any.
  std::optional<std::string> recorded_failure();
  // Why the job cannot go on when another node's launcher stopped beating.
  std::optional<std::string> gone_node();
  // "node 1 (host h)", with the hostname once the node registered it.
  std::string describe_node(int node);

  StaticRendezvousOptions options_;
  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<Store> store_;
  uint16_t port_ = 0;  // the store's real port
  // The MASTER_ADDR the workers get: master_addr, or for a one-node job
  // (whose store listens on loopback only) the loopback address.
  std::string worker_master_addr_;
  int rank_base_ = 0;
  int world_size_ = 0;
  bool joined_ = false;
  int attempt_ = -1;
  bool closed_ = false;
  std::function<int()> interrupt_check_;
  std::unique_ptr<HeartbeatWatch> watch_;  // node 0 of several
  // Nodes > 0: when they last looked for node 0's verdict ("gone").
  std::optional<std::chrono::steady_clock::time_point> last_verdict_look_;  // several nodes only
  std::unique_ptr<NodeHeartbeat> heartbeat_;  // after store_, before server_ stops
};

}  // namespace collie::launcher
