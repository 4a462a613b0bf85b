#include "collie/runtime/launcher/static_membership.h"

#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <thread>

#include "collie/base/backoff.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/env/cluster_env.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/runtime/launcher/worker_stream.h"

namespace collie::launcher {
namespace {

// How long node 0 waits for the others to leave before it stops the store.
constexpr std::chrono::seconds kExitWait{30};

// Every interface for a job across nodes; loopback for one node, whose
// workers all connect over it: nothing on the network can reach the store.
std::string bind_host_for(const std::string& master_addr, int nnodes) {
  const bool v6 = master_addr.find(':') != std::string::npos;
  if (nnodes == 1) return v6 ? "::1" : "127.0.0.1";
  return v6 ? "::" : "0.0.0.0";
}

}  // namespace

std::string StaticMembership::key(const std::string& k) const {
  return str_cat("/collie-run/", options_.run_id, "/", k);
}

std::unique_ptr<StaticMembership> StaticMembership::start(const StaticRendezvousOptions& o) {
  std::unique_ptr<StaticMembership> r(new StaticMembership());
  r->options_ = o;
  std::string connect_host = o.master_addr;
  r->port_ = o.master_port;
  r->worker_master_addr_ = o.master_addr;
  if (o.node_rank == 0) {
    std::string host = bind_host_for(o.master_addr, o.nnodes);
    try {
      r->server_ = TcpStoreServer::start({.host = host, .port = o.master_port});
    } catch (const Error& e) {
      throw NetworkError(str_cat("collie-run: node 0 cannot host the agent store on ", host, ":",
                                 o.master_port, " (", e.what(),
                                 "); is another job using the port? Pick another --master-port, "
                                 "or --standalone for a free one"));
    }
    r->port_ = r->server_->port();
    // Our own server is always reachable over loopback, whatever name
    // master-addr has on the network.
    connect_host = host.find(':') != std::string::npos ? "::1" : "127.0.0.1";
    if (o.nnodes == 1) r->worker_master_addr_ = connect_host;
  }
  const Deadline deadline(o.timeout);
  // Node 0 too: its own connection goes over loopback, but its workers reach
  // the store at master_addr, and a name that never resolves would leave
  // them waiting for their whole timeout. One-node jobs use loopback only.
  if (o.nnodes > 1)
    wait_until_resolvable(o.master_addr, deadline, str_cat("collie-run: node ", o.node_rank),
                          [](const std::string& line) { write_all(STDERR_FILENO, line + "\n"); });
  TcpStoreOptions store_options;
  store_options.timeout = deadline.remaining();
  try {
    r->store_ = std::shared_ptr<Store>(TcpStore::connect(connect_host, r->port_, store_options));
  } catch (const Error& e) {
    std::string hint;
    if (!o.secret_source.empty() && std::string(e.what()).find("job secret") != std::string::npos)
      hint = str_cat(" (this node's job secret was ", o.secret_source,
                     ": every node must be given the same values)");
    throw NetworkError(str_cat("collie-run: node ", o.node_rank,
                               " could not reach the agent store of node 0 at ", o.master_addr, ":",
                               r->port_, " within ", format_duration(o.timeout), ": ", e.what(),
                               hint));
  }
  if (o.nnodes > 1) {
    // The beats go over a connection of their own, from a thread of their
    // own (node_heartbeat.h). Its requests are small and answered at once:
    // one that takes longer than this means the store is gone.
    TcpStoreOptions beat_options;
    beat_options.timeout = std::max<Timeout>(
        std::chrono::seconds(10),
        std::chrono::duration_cast<Timeout>(o.heartbeat.interval * o.heartbeat.misses));
    std::vector<std::string> keys;
    for (int i = 0; i < o.nnodes; ++i) keys.push_back(r->key(str_cat("node/", i, "/alive")));
    if (o.node_rank == 0) r->watch_ = std::make_unique<HeartbeatWatch>(keys, 0, o.heartbeat);
    r->heartbeat_ =
        std::make_unique<NodeHeartbeat>(TcpStore::connect(connect_host, r->port_, beat_options),
                                        keys[o.node_rank], o.heartbeat.interval);
  }
  return r;
}

StaticMembership::~StaticMembership() {
  heartbeat_.reset();
  if (server_) server_->stop();
}

std::string StaticMembership::describe_node(int node) {
  std::string host;
  try {
    const std::string k = key(str_cat("node/", node));
    if (store_->check({k})) {
      const std::string value = to_string(store_->get(k));  // "<nproc> <hostname>"
      if (size_t space = value.find(' '); space != std::string::npos)
        host = value.substr(space + 1);
    }
  } catch (const Error&) {
  }
  return host.empty() ? str_cat("node ", node) : str_cat("node ", node, " (host ", host, ")");
}

std::optional<std::string> StaticMembership::gone_node() {
  if (options_.nnodes == 1) return std::nullopt;
  if (!watch_) {
    // Only node 0 reads every counter (nnodes - 1 requests a second, on its
    // own machine); the others read its verdict, once a beat.
    const auto now = std::chrono::steady_clock::now();
    if (last_verdict_look_ && now - *last_verdict_look_ < options_.heartbeat.interval)
      return std::nullopt;
    last_verdict_look_ = now;
    if (!store_->check({key("gone")})) return std::nullopt;
    return to_string(store_->get(key("gone")));
  }
  std::optional<HeartbeatWatch::Silent> silent = watch_->look(*store_);
  if (!silent) return std::nullopt;
  const std::string reason = str_cat(
      "the launcher of ", describe_node(silent->node), " is gone: it sent no heartbeat for ",
      format_duration(silent->silent_for), " (limit ", format_duration(watch_->limit()),
      "; it was killed, or its machine or network failed), and a static job cannot go "
      "on without it");
  store_->compare_set(key("gone"), {}, as_span(reason));  // for the other nodes
  return reason;
}

void StaticMembership::join() {
  const auto& o = options_;
  std::string mine = str_cat("nnodes=", o.nnodes, " max_restarts=", o.max_restarts);
  Bytes first = store_->compare_set(key("config"), {}, as_span(mine));
  if (to_string(first) != mine)
    throw InvalidArgument(str_cat("collie-run: node ", o.node_rank, " was started with ", mine,
                                  " but another node with ", to_string(first),
                                  "; every launcher of a job needs the same --nnodes and "
                                  "--max-restarts"));
  int64_t claims = store_->add(key(str_cat("node/", o.node_rank, "/claims")), 1);
  if (claims != 1)
    throw InvalidArgument(str_cat("collie-run: another launcher already joined run '", o.run_id,
                                  "' as --node-rank ", o.node_rank,
                                  "; give every node its own rank in [0, ", o.nnodes, ")"));
  store_->set(key(str_cat("node/", o.node_rank)), str_cat(o.nproc, " ", o.hostname));
  barrier("join", "join the job");

  // Ranks as torchrun assigns them: node i's workers follow every worker of
  // nodes 0..i-1, so equal --nproc-per-node gives node_rank * nproc + local.
  std::vector<std::string> keys;
  for (int i = 0; i < o.nnodes; ++i) keys.push_back(key(str_cat("node/", i)));
  std::vector<Bytes> values = store_->multi_get(keys);
  rank_base_ = 0;
  world_size_ = 0;
  for (int i = 0; i < o.nnodes; ++i) {
    std::istringstream in(to_string(values[i]));
    int nproc = 0;
    in >> nproc;
    if (nproc <= 0)
      throw StoreError(str_cat("collie-run: node ", i, " registered a bad worker count '",
                               to_string(values[i]), "' under ", keys[i]));
    if (i < o.node_rank) rank_base_ += nproc;
    world_size_ += nproc;
  }
}

void StaticMembership::barrier(const std::string& name, const std::string& what) {
  const int n = options_.nnodes;
  int64_t count = store_->add(key(name + "/count"), 1);
  if (count == n) store_->set(key(name + "/done"), "1");
  // Look with check() rather than one long wait(): a launcher must stay
  // responsive to Ctrl-C while other nodes are slow to arrive.
  Deadline deadline(options_.timeout);
  Backoff backoff({.initial = std::chrono::milliseconds(1), .max = std::chrono::milliseconds(50)});
  while (!store_->check({key(name + "/done")})) {
    if (std::optional<std::string> gone = gone_node())
      throw NetworkError(str_cat("collie-run: node ", options_.node_rank, " stops waiting for all ",
                                 n, " nodes to ", what, ": ", *gone));
    if (int sig = interrupt_check_ ? interrupt_check_() : 0)
      throw MembershipInterrupted(
          sig, str_cat("collie-run: node ", options_.node_rank,
                       " was interrupted while waiting for all ", n, " nodes to ", what));
    if (deadline.expired()) {
      int64_t arrived = store_->add(key(name + "/count"), 0);
      std::string missing;
      if (name == "join") {
        for (int i = 0; i < n; ++i)
          if (!store_->check({key(str_cat("node/", i))}))
            missing += str_cat(missing.empty() ? "" : ", ", i);
        missing = str_cat("; missing node ranks: ", missing);
      }
      throw TimeoutError(str_cat("collie-run: node ", options_.node_rank, " waited ",
                                 format_duration(options_.timeout), " (--rdzv-timeout) for all ", n,
                                 " nodes to ", what, ", but only ", arrived, " did", missing));
    }
    backoff.sleep(deadline);
  }
}

Round StaticMembership::next_round() {
  if (!joined_) {
    join();
    joined_ = true;
  }
  ++attempt_;
  barrier(str_cat("attempt/", attempt_, "/start"), str_cat("start attempt ", attempt_));
  return {.number = attempt_,
          .node_rank = options_.node_rank,
          .nnodes = options_.nnodes,
          .rank_base = rank_base_,
          .world_size = world_size_,
          .master_addr = worker_master_addr_,
          .master_port = port_};
}

std::optional<std::string> StaticMembership::recorded_failure() {
  std::string k = key(str_cat("attempt/", attempt_, "/failed"));
  if (!store_->check({k})) return std::nullopt;
  return to_string(store_->get(k));
}

std::optional<RoundEnd> StaticMembership::check() {
  if (options_.nnodes == 1) return std::nullopt;
  std::optional<std::string> failure = recorded_failure();
  if (!failure) {
    failure = gone_node();
    if (!failure) return std::nullopt;
    report_failure(*failure);  // the first report wins: every node names the same cause
    failure = recorded_failure().value_or(*failure);
  }
  return RoundEnd{.reason = *failure};
}

void StaticMembership::report_failure(const std::string& reason) {
  store_->compare_set(key(str_cat("attempt/", attempt_, "/failed")), {}, as_span(reason));
}

std::optional<std::string> StaticMembership::finish(bool /*succeeded*/) {
  barrier(str_cat("attempt/", attempt_, "/end"), str_cat("finish attempt ", attempt_));
  return recorded_failure();
}

void StaticMembership::close(const std::string& /*outcome*/) {
  if (closed_) return;
  closed_ = true;
  int64_t count = store_->add(key("exit/count"), 1);
  if (count == options_.nnodes) store_->set(key("exit/done"), "1");
  if (!server_) return;
  // The job is over either way: a node that vanished (gone silent) must
  // not hold the store up for long.
  const Deadline deadline(std::chrono::duration_cast<Timeout>(kExitWait));
  Backoff backoff({.initial = std::chrono::milliseconds(1), .max = std::chrono::milliseconds(50)});
  try {
    while (!store_->check({key("exit/done")}) && !deadline.expired() && !gone_node())
      backoff.sleep(deadline);
  } catch (const Error&) {
  }
  heartbeat_.reset();
  server_->stop();
}

std::string StaticMembership::hosting_line() const {
  if (!server_) return "";
  const auto& o = options_;
  return str_cat("collie-run: agent store listening on ", server_->address(), " (node 0 of ",
                 o.nnodes, ", run id '", o.run_id, "'; workers reach it at ", o.master_addr, ")");
}

std::string StaticMembership::store_lost_line() const {
  return str_cat("collie-run: node ", options_.node_rank,
                 " gives up: the job cannot go on without node 0");
}

std::string StaticMembership::failed_elsewhere_line(const std::string& reason) const {
  return str_cat("collie-run: node ", options_.node_rank,
                 "'s workers succeeded, but another node failed: ", reason);
}

}  // namespace collie::launcher
