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
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collie/rendezvous/env/job_secret.h"
#include "collie/rendezvous/store.h"

namespace collie {

// Which TCPStore dialect a client speaks.
enum class StoreProtocol {
  kDetect,  // probe the server safely, then speak what it speaks (default)
  kV2,      // PyTorch 2.x: VALIDATE first, query types VALIDATE=0..BARRIER=18
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
  // Memory that unsent replies may hold beyond the store's own keys and
  // values: values overwritten or deleted, key lists outdated, queue
  // elements popped, while a reply still carries them, plus the replies'
  // own encoded bytes (docs/security.md). A client that does not read its
  // replies is not read either past 1 MiB unsent; when the whole server
  // passes this budget, the clients holding the most are dropped, worst
  // first, each with a WARN line. 0: max(256 MiB, 4 * max_value_bytes);
  // else at least 1 MiB.
  size_t max_reply_bytes = 0;
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
  // The address bound, numeric ("0.0.0.0", "::", "127.0.0.1"); options.host
  // may spell an IPv6 literal in brackets ("[::1]").
  virtual std::string host() const = 0;
  // "host:port", IPv6 in brackets ("[::]:29500").
  virtual std::string address() const = 0;
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

  // torch 2.x's later TCPStore operations: the queues and list_keys (torch
  // 2.11), barrier (torch 2.15). They need the 2.x dialect (InvalidArgument
  // in 1.13) and a server that has them: collie's, or torch's libuv server
  // (the 2.x default; its classic one has no queues). A server without
  // them closes the connection, and the call throws NetworkError saying so
  // (for queue_push, which has no answer, the next call does).
  // Keys and queue names go on the wire verbatim, as in every TcpStore call.

  // Appends `value` to the queue `key`. Queues are apart from keys: a queue
  // and a key may share a name (only WAIT and CHECK see both).
  virtual void queue_push(const std::string& key, std::span<const uint8_t> value) = 0;
  void queue_push(const std::string& key, std::string_view value) {
    queue_push(key, as_span(value));
  }
  // Takes the oldest element of the queue `key`, waiting up to `timeout`
  // (kUnsetTimeout: timeout()) for one to be pushed; throws TimeoutError
  // naming the queue. torch's queue_pop(key, block=True).
  virtual Bytes queue_pop(const std::string& key, Timeout timeout = kUnsetTimeout) = 0;
  // The oldest element of the queue `key`, or nullopt at once when it is
  // empty. torch's queue_pop(key, block=False).
  virtual std::optional<Bytes> try_queue_pop(const std::string& key) = 0;
  virtual int64_t queue_len(const std::string& key) = 0;
  // Every key the server holds (not the queues), as stored: keys a torch
  // client set carry its "/" prefix. collie's server sorts them, torch's
  // lists them in no particular order.
  virtual std::vector<std::string> list_keys() = 0;
  // Waits until `world_size` callers (counting this one) have reached the
  // barrier `key`, up to `timeout` (kUnsetTimeout: timeout()); throws
  // TimeoutError naming the key, the world size and how many arrived. The
  // key holds the count of arrivals and is never reset: use a fresh key
  // for each round. torch 2.15's Store.barrier.
  virtual void barrier(const std::string& key, int64_t world_size,
                       Timeout timeout = kUnsetTimeout) = 0;

 protected:
  explicit TcpStore(Timeout timeout) : Store(timeout) {}
};

}  // namespace collie
