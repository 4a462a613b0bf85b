// The TcpStore server: one Asio event loop on its own thread. Each accepted
// socket becomes a StoreConnection, which reads bytes, cuts them into
// requests with store_protocol::parse_request and hands them to the one
// TcpStoreState. Nothing in the loop ever blocks: a request that must wait
// parks in the state and its reply is delivered when a write completes it.
#include <fcntl.h>

#include <asio.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "collie/base/error.h"
#include "collie/base/host_port.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/store_util.h"
#include "collie/rendezvous/tcp_store/store_auth.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/rendezvous/tcp_store/tcp_store_connection.h"
#include "collie/rendezvous/tcp_store/tcp_store_os_limits.h"
#include "collie/rendezvous/tcp_store/tcp_store_slots.h"
#include "collie/rendezvous/tcp_store/tcp_store_state.h"

namespace collie {
namespace {

void close_on_exec(int fd) {
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

using asio::ip::tcp;

// The default budget for unsent replies (TcpStoreServerOptions::max_reply_bytes).
constexpr size_t kDefaultReplyBudget = size_t{256} << 20;

std::string format_mib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

class TcpStoreServerImpl final : public TcpStoreServer, public StoreConnectionOwner {
 public:
  explicit TcpStoreServerImpl(const TcpStoreServerOptions& options)
      : options_(options),
        auth_{options.secret.value_or(JobSecret::from_env()),
              options.accept_unauthenticated.value_or(store_compat_from_env())},
        acceptor_(io_),
        retry_timer_(io_),
        sweep_timer_(io_),
        state_([this](ConnectionId id, ReplyQueue reply,
                      bool resumed) { deliver(id, std::move(reply), resumed); },
               options.max_value_bytes, &ledger_),
        reply_budget_(options.max_reply_bytes
                          ? options.max_reply_bytes
                          : std::max(kDefaultReplyBudget, 4 * options.max_value_bytes)),
        slots_({.max_connections = options.max_connections,
                .max_unauthenticated = options.max_unauthenticated,
                .handshake_timeout = options.handshake_timeout,
                .strict = static_cast<bool>(auth_.secret) && !auth_.accept_unauthenticated}) {
    limits_.max_value_bytes = options.max_value_bytes;
    bind();
    thread_ = std::thread([this] { run(); });
  }

  ~TcpStoreServerImpl() override { stop(); }

  uint16_t port() const override { return port_; }
  std::string host() const override { return bound_host_; }

  void stop() override {
    std::lock_guard lock(stop_mu_);
    if (!thread_.joinable()) return;
    asio::post(io_, [this] {
      std::error_code ec;
      acceptor_.close(ec);
      retry_timer_.cancel();
      sweep_timer_.cancel();
      auto connections = std::move(connections_);
      for (auto& [id, c] : connections) c->close();
      io_.stop();
    });
    thread_.join();
  }

  // StoreConnectionOwner: called on the loop thread.
  TcpStoreState& state() override { return state_; }
  const store_protocol::Limits& limits() const override { return limits_; }
  std::string address() const override {
    return bound_host_.find(':') != std::string::npos ? str_cat("[", bound_host_, "]:", port_)
                                                      : str_cat(bound_host_, ":", port_);
  }
  const StoreAuthPolicy* auth_policy() const override { return &auth_; }
  void closed(ConnectionId id) override {
    slots_.leave(id);
    state_.drop(id);
    connections_.erase(id);
  }
  bool admit(ConnectionId id) override { return slots_.admit(id); }
  void activity() override {
    enforce_reply_budget();
    if (++activity_ % 16 == 0 && acceptor_.is_open()) drain_accept_queue();
  }
  ReplyLedger* reply_ledger() override { return &ledger_; }

 private:
  void bind() {
    // "[::1]" as collie-run spells IPv6 literals; "" is no address.
    const std::string host(strip_brackets(options_.host));
    if (host.empty())
      throw InvalidArgument(
          "TcpStoreServer: the host to bind is empty; give an address (0.0.0.0 for every IPv4 "
          "interface, :: for every IPv6 one, 127.0.0.1 for this machine only) or a name");
    const std::string where = str_cat(host, ":", options_.port);
    std::error_code ec;
    tcp::resolver resolver(io_);
    auto endpoints = resolver.resolve(host, std::to_string(options_.port),
                                      tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec || endpoints.empty()) {
      throw NetworkError(str_cat("TcpStoreServer: cannot resolve ", where, ": ", ec.message()));
    }
    tcp::endpoint endpoint = endpoints.begin()->endpoint();
    acceptor_.open(endpoint.protocol(), ec);
    // Asio opens and accepts without close-on-exec: every process a launcher
    // hosting this store starts would hold the listening port (and each
    // accepted connection) open.
    if (!ec) close_on_exec(acceptor_.native_handle());
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    // As deep a backlog as the kernel allows: a whole job's ranks connect
    // at once, and a full backlog costs a client a SYN retransmit (1 s).
    if (!ec) acceptor_.listen(listen_backlog(), ec);
    if (!ec) acceptor_.non_blocking(true, ec);  // for accept()'s drain loop
    if (ec) {
      throw NetworkError(str_cat("TcpStoreServer: cannot listen on ", where, ": ", ec.message(),
                                 ec == asio::error::address_in_use
                                     ? " (another process holds the port; pick another or 0)"
                                     : ""));
    }
    port_ = acceptor_.local_endpoint().port();
    bound_host_ = acceptor_.local_endpoint().address().to_string();
    // One descriptor per client, and some for everything else.
    const size_t unproven = slots_.limits().strict ? options_.max_unauthenticated : 0;
    raise_open_files_limit(
        options_.max_connections + unproven + 64, address(),
        str_cat("max_connections=", options_.max_connections,
                unproven ? str_cat(" + max_unauthenticated=", unproven) : std::string()));
    COLLIE_LOG(kInfo) << "TcpStoreServer listening on " << address()
                      << (!auth_.secret ? " (unauthenticated)"
                          : auth_.accept_unauthenticated
                              ? " (job secret, torch-compatible: unauthenticated clients admitted)"
                              : " (job secret required)");
  }

  void run() {
    accept();
    if (slots_.limits().strict) sweep();
    // Handlers never throw (each connection catches its own errors); a throw
    // here would be a bug, logged rather than silently ending the loop.
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        COLLIE_LOG(kError) << "TcpStoreServer " << address() << ": event loop error: " << e.what();
      }
    }
  }

  void accept() {
    acceptor_.async_accept([this](std::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (ec) {
        // Out of file descriptors (EMFILE) and the like: say so and try
        // again shortly instead of spinning on the same error.
        COLLIE_LOG(kWarn) << "TcpStoreServer " << address() << ": accept failed: " << ec.message()
                          << "; retrying in 50ms";
        retry_timer_.expires_after(std::chrono::milliseconds(50));
        retry_timer_.async_wait([this](std::error_code e) {
          if (!e) accept();
        });
        return;
      }
      admit_socket(std::move(socket));
      drain_accept_queue();
      accept();
    });
  }

  // Takes every connection waiting in the kernel's accept queue and sets it
  // up. A job's ranks connect all at once: a connection that finds the queue
  // full waits for a SYN retransmit (a second or more), while taking one off
  // the queue costs a few microseconds (its requests wait in its socket
  // meanwhile). So the queue is emptied first, and again between batches of
  // set-ups, and also every few requests the loop serves (activity()),
  // since a loop busy with thousands of requests would otherwise come back
  // to its acceptor only once per round.
  void drain_accept_queue() {
    constexpr size_t kBatch = 64;
    std::deque<tcp::socket> arrived;
    for (;;) {
      for (;;) {
        tcp::socket next(io_);
        std::error_code ec;
        acceptor_.accept(next, ec);
        if (ec) break;
        arrived.push_back(std::move(next));
      }
      if (arrived.empty()) return;
      for (size_t i = 0; i < kBatch && !arrived.empty(); ++i) {
        admit_socket(std::move(arrived.front()));
        arrived.pop_front();
      }
    }
  }

  void admit_socket(tcp::socket socket) {
    close_on_exec(socket.native_handle());
    const ConnectionId id = next_id_++;
    const ConnectionSlots::Arrival arrival = slots_.arrive(id, Clock::now());
    if (arrival.evict) {
      close_unproven(*arrival.evict, str_cat("it was the oldest of ", options_.max_unauthenticated,
                                             " connections that have not proven the job secret "
                                             "(max_unauthenticated), and another arrived"));
    }
    if (arrival.verdict == ConnectionSlots::Verdict::kRefuseFull) {
      std::error_code ignored;
      COLLIE_LOG(kWarn) << "TcpStoreServer " << address() << ": refusing a connection from "
                        << socket.remote_endpoint(ignored) << ": already " << slots_.admitted()
                        << " clients (max_connections)";
      const uint8_t notice = kStoreRefusedFull;
      socket.non_blocking(true, ignored);
      socket.write_some(asio::buffer(&notice, 1), ignored);
      socket.close(ignored);
      return;
    }
    auto connection = std::make_shared<StoreConnection>(id, std::move(socket), *this);
    connections_.emplace(id, connection);
    connection->start();
  }

  // Strict mode: closes the pending connections past the handshake deadline,
  // a few times per deadline.
  void sweep() {
    sweep_timer_.expires_after(
        std::max<Timeout>(options_.handshake_timeout / 4, std::chrono::milliseconds(10)));
    sweep_timer_.async_wait([this](std::error_code ec) {
      if (ec) return;
      for (ConnectionId id : slots_.overdue(Clock::now())) {
        close_unproven(
            id, str_cat("it did not prove the job secret within ",
                        format_duration(options_.handshake_timeout), " (handshake_timeout)"));
      }
      sweep();
    });
  }

  // Closes a connection that has not proven the job secret, with the busy
  // notice. One line per connection at INFO; at WARN, a summary at most
  // every 30s, so that a flood of strangers is reported without flooding
  // the log.
  void close_unproven(ConnectionId id, const std::string& why) {
    auto it = connections_.find(id);
    if (it == connections_.end()) return;
    const std::string peer = it->second->peer();
    it->second->refuse(kStoreRefusedBusy, why, LogLevel::kInfo);
    ++unproven_closed_;
    const auto now = Clock::now();
    // The first one at once, then at most one line per 30 s counting them.
    if (!warned_unproven_ || now - last_unproven_warning_ >= std::chrono::seconds(30)) {
      COLLIE_LOG(kWarn) << "TcpStoreServer " << address() << ": closed " << unproven_closed_
                        << " connection(s) without the job secret (last from " << peer << ": "
                        << why << "); someone may be holding connections open to this store";
      unproven_closed_ = 0;
      last_unproven_warning_ = now;
      warned_unproven_ = true;
    }
  }

  // When unsent replies hold more than the budget beyond the store's own
  // values, drops the connections that hold the most, worst first, until
  // they are back under it. Back-pressure has already stopped reading each
  // of them (a client that reads its replies holds little of this: what
  // it is sent is mostly the store's current values, which cost nothing
  // extra), so these are clients that ask and do not read while the store
  // changes under them: they would hold it for as long as they liked.
  void enforce_reply_budget() {
    if (ledger_.total() <= reply_budget_) return;
    ledger_.sweep();
    if (ledger_.total() <= reply_budget_) return;
    struct Holder {
      size_t bytes;
      std::shared_ptr<StoreConnection> connection;
    };
    std::vector<Holder> holders;
    for (const auto& [id, c] : connections_) {
      if (const size_t held = c->held_reply_bytes(ledger_)) holders.push_back({held, c});
    }
    std::sort(holders.begin(), holders.end(),
              [](const Holder& a, const Holder& b) { return a.bytes > b.bytes; });
    for (const Holder& h : holders) {
      if (ledger_.total() <= reply_budget_) break;
      const size_t total = ledger_.total();
      h.connection->abandon(str_cat(
          "it does not read its replies, and they hold ", h.bytes, " bytes (", format_mib(h.bytes),
          ") that the store does not, the most of any client (", h.connection->unsent_reply_bytes(),
          " bytes unsent); unsent replies hold ", total,
          " bytes in all, over the server's budget of ", reply_budget_, " (max_reply_bytes)"));
    }
  }

  // A parked request completed: send its reply on its own connection.
  void deliver(ConnectionId id, ReplyQueue reply, bool resumed) {
    auto it = connections_.find(id);
    if (it == connections_.end()) return;
    it->second->send(std::move(reply));
    // Resume on a fresh handler: we are inside another connection's request,
    // and the resumed one's next requests must not run inside it.
    if (resumed) asio::post(io_, [c = it->second] { c->resume(); });
  }

  // What unsent replies hold beyond the store's values: declared before
  // everything that may hold a reply (the loop's handlers, the state), so
  // that it outlives them.
  ReplyLedger ledger_;
  TcpStoreServerOptions options_;
  StoreAuthPolicy auth_;
  std::string bound_host_;  // numeric, as bound (no brackets)
  store_protocol::Limits limits_;
  // One thread runs the loop: the hint lets Asio skip locking it would need
  // for several.
  asio::io_context io_{1};
  tcp::acceptor acceptor_;
  asio::steady_timer retry_timer_;
  asio::steady_timer sweep_timer_;
  TcpStoreState state_;
  const size_t reply_budget_;
  ConnectionSlots slots_;
  size_t unproven_closed_ = 0;  // since the last WARN about them
  bool warned_unproven_ = false;
  Clock::time_point last_unproven_warning_;
  std::unordered_map<ConnectionId, std::shared_ptr<StoreConnection>> connections_;
  ConnectionId next_id_ = 1;
  uint64_t activity_ = 0;
  uint16_t port_ = 0;
  std::thread thread_;
  std::mutex stop_mu_;
};

}  // namespace

std::unique_ptr<TcpStoreServer> TcpStoreServer::start(const TcpStoreServerOptions& options) {
  check_option_range("TcpStoreServerOptions::max_value_bytes", options.max_value_bytes, 1,
                     store_protocol::kMaxValueBytesLimit);
  check_option_range("TcpStoreServerOptions::max_connections", options.max_connections, 1,
                     kMaxConnectionsLimit);
  check_option_range("TcpStoreServerOptions::max_unauthenticated", options.max_unauthenticated, 1,
                     kMaxConnectionsLimit);
  if (options.max_reply_bytes)
    check_option_range("TcpStoreServerOptions::max_reply_bytes", options.max_reply_bytes,
                       size_t{1} << 20, uint64_t{1} << 50);
  check_option_range("TcpStoreServerOptions::handshake_timeout (ms)",
                     static_cast<uint64_t>(std::max<int64_t>(0, options.handshake_timeout.count())),
                     1, 3'600'000);
  return std::make_unique<TcpStoreServerImpl>(options);
}

}  // namespace collie
