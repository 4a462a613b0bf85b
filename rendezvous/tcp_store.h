// TcpStore: a Store over TCP that speaks PyTorch's TCPStore wire protocol
// (docs/store-protocol.md), so collie processes and torch processes can
// rendezvous through one another's servers.
//
//   auto server = TcpStoreServer::start({.host = "0.0.0.0", .port = 0});
//   auto store = TcpStore::connect("127.0.0.1", server->port());
//   store->set("key", "value");
//
// The server is one Asio event loop on its own thread serving any number of
// clients; get/wait on a missing key park the request without blocking
// anyone else.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "rendezvous/job_secret.h"
#include "rendezvous/store.h"

namespace collie {

// Which TCPStore dialect a client speaks.
enum class StoreProtocol {
  kDetect,  // probe the server safely, then speak what it speaks (default)
  kV2,      // PyTorch 2.x: VALIDATE first, query types VALIDATE=0..PING=13
  kV1_13,   // PyTorch 1.13: no VALIDATE, SET=0..DELETE_KEY=8
};

// The most connections a server may be asked to hold.
inline constexpr size_t kMaxConnectionsLimit = size_t{1} << 20;

struct TcpStoreServerOptions {
  std::string host = "0.0.0.0";  // address to bind
  uint16_t port = 0;             // 0: an ephemeral port, see port()
  // Cap on any key or value: 1 to 512 MiB (store_protocol::kMaxValueBytesLimit).
  size_t max_value_bytes = size_t{64} << 20;
  // Clients served at once: 1 to kMaxConnectionsLimit.
  size_t max_connections = 16384;
  // With a job secret (unless accept_unauthenticated): connections that have
  // not proven it yet may number at most max_unauthenticated at once (a new
  // one closes the oldest) and last at most handshake_timeout, so that
  // strangers cannot hold the job's slots (docs/security.md).
  size_t max_unauthenticated = 1024;
  Timeout handshake_timeout = std::chrono::seconds(10);
  // The job secret clients must prove (docs/security.md); unset:
  // COLLIE_JOB_SECRET. A default JobSecret() means no authentication.
  std::optional<JobSecret> secret;
  // With a secret, also serve clients that have none (torch's TCPStore);
  // unset: COLLIE_STORE_COMPAT=1.
  std::optional<bool> accept_unauthenticated;
};

class TcpStoreServer {
 public:
  // Binds and starts serving; throws NetworkError naming host:port when the
  // address is in use or cannot be bound, InvalidArgument naming the option
  // and its allowed range when an option is out of range.
  static std::unique_ptr<TcpStoreServer> start(const TcpStoreServerOptions& options = {});
  virtual ~TcpStoreServer() = default;

  virtual uint16_t port() const = 0;
  virtual std::string host() const = 0;
  // Closes every connection and joins the event loop (idempotent).
  virtual void stop() = 0;
};

struct TcpStoreOptions {
  Timeout timeout = kDefaultTimeout;  // connect deadline and get/wait default
  StoreProtocol protocol = StoreProtocol::kDetect;
  size_t max_value_bytes = size_t{64} << 20;  // 1 to 512 MiB, as the server's
  // The job secret to prove to the server; unset: COLLIE_JOB_SECRET.
  std::optional<JobSecret> secret;
  // A connect or a wait that lasts this long says so in a WARN line (what it
  // awaits, for how long so far, the limit), then again each time its
  // duration doubles (at most every 5 min). The first connect retry is an
  // INFO line.
  Timeout report_after = std::chrono::seconds(30);
};

class TcpStore : public Store {
 public:
  // Connects with exponential backoff and jitter until options.timeout;
  // throws StoreError/TimeoutError naming host:port, elapsed and limit.
  static std::unique_ptr<TcpStore> connect(const std::string& host, uint16_t port,
                                           const TcpStoreOptions& options = {});
  // torch's TCPStore(host, port, is_master): when is_master, also hosts a
  // server on host:port (port 0 allowed) owned by the returned store.
  static std::unique_ptr<TcpStore> create(const std::string& host, uint16_t port, bool is_master,
                                          const TcpStoreOptions& options = {});

  virtual std::string host() const = 0;
  virtual uint16_t port() const = 0;
  virtual StoreProtocol protocol() const = 0;

 protected:
  explicit TcpStore(Timeout timeout) : Store(timeout) {}
};

}  // namespace collie
