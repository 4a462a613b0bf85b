// TcpStoreClient: the TcpStore a process talks through. One socket to the
// server, requests serialized by a mutex so that several threads may share
// one client. Keys go on the wire verbatim (torch's own TCPStore prefixes
// "/" to every key; see docs/store-protocol.md).
#pragma once

#include <memory>
#include <mutex>

#include "collie/rendezvous/tcp_store/store_protocol.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/rendezvous/tcp_store/tcp_store_socket.h"

namespace collie {

class TcpStoreClient final : public TcpStore {
 public:
  // Connects (with backoff, until options.timeout) and shakes hands.
  TcpStoreClient(std::string host, uint16_t port, const TcpStoreOptions& options,
                 std::unique_ptr<TcpStoreServer> server = nullptr);
  ~TcpStoreClient() override;
  // A new client of the same server, with the same secret.
  std::shared_ptr<Store> clone(Timeout timeout) override;

  void set(const std::string& key, std::span<const uint8_t> value) override;
  using Store::set;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, std::span<const uint8_t> expected,
                    std::span<const uint8_t> desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Timeout timeout = kUnsetTimeout) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  void append(const std::string& key, std::span<const uint8_t> value) override;
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  void queue_push(const std::string& key, std::span<const uint8_t> value) override;
  using TcpStore::queue_push;
  Bytes queue_pop(const std::string& key, Timeout timeout = kUnsetTimeout) override;
  std::optional<Bytes> try_queue_pop(const std::string& key) override;
  int64_t queue_len(const std::string& key) override;
  std::vector<std::string> list_keys() override;
  void barrier(const std::string& key, int64_t world_size,
               Timeout timeout = kUnsetTimeout) override;

  std::string host() const override { return host_; }
  uint16_t port() const override { return port_; }
  StoreProtocol protocol() const override;

 private:
  using Op = store_protocol::Op;
  // How long a server gets to answer CANCEL_WAIT, or a reconnect, after a
  // timed-out wait: the wait's own limit has already passed.
  static constexpr Timeout kCleanupTimeout = std::chrono::seconds(10);

  // Opens a connection (backoff + jitter until `deadline`) and shakes hands
  // in the configured dialect, detecting it first for kDetect.
  void open(const Deadline& deadline);
  enum class Handshake {
    kDone,
    kRetryIn2x,  // a kDetect probe found a 2.x torch server (tcp_store_detect.h)
    kBusy,       // the server sent the busy notice (store_auth.h): try again
  };
  // One handshake on a fresh socket. Throws StoreError naming the cause when
  // the server refuses us for good (store_auth.h's notices).
  Handshake handshake(StoreSocket& socket, const Deadline& deadline);
  // A handshake answer byte that is a refusal notice: true for busy, throws
  // for the others, false when it is no notice.
  bool refused(uint8_t answer) const;
  // The server sent `notice` instead of an answer: close, throw StoreError.
  [[noreturn]] void refused_by_server(uint8_t notice);
  void ensure_open();

  // The request header: the query byte of `op` in this connection's dialect.
  Bytes begin(Op op);
  void send(const Bytes& request, const char* what, const Deadline& deadline);
  void recv(void* data, size_t n, const char* what, const Deadline& deadline);
  uint8_t recv_u8(const char* what, const Deadline& deadline);
  int64_t recv_i64(const char* what, const Deadline& deadline);
  Bytes recv_bytes(const char* what, const Deadline& deadline);
  // Closes the (now unusable) connection and throws NetworkError or
  // TimeoutError naming the server, the request and the time spent.
  [[noreturn]] void fail(const IoResult& r, const char* what, const Deadline& deadline);

  // Says in a WARN line that a connect or a wait is still going: first at
  // TcpStoreOptions::report_after, then each time its duration doubles (at
  // most every 5 min).
  class SlowWaitLog {
   public:
    SlowWaitLog(const Deadline& deadline, Timeout first);
    Clock::time_point next() const { return next_; }
    bool due() const { return Clock::now() >= next_; }
    void report(const std::string& line);

   private:
    Clock::time_point start_;
    Clock::time_point next_;
  };

  // Waits until the answer to a request that waits on `keys` starts to
  // arrive (without reading it), reporting while it does not. `awaited`
  // names what is awaited in those reports; empty: the keys.
  IoResult await_answer(const std::vector<std::string>& keys, const Deadline& deadline,
                        const std::string& awaited = {});
  // Sends WAIT and waits for STOP_WAITING; false on timeout (the wait is
  // then cancelled, or the connection dropped in 1.13).
  bool wait_locked(const std::vector<std::string>& keys, const Deadline& deadline);
  // Reads the STOP_WAITING that answers a parked WAIT or BARRIER (`what`)
  // once it comes; false on timeout, after cancelling the request (2.x) or
  // dropping the connection (1.13).
  bool await_stop_waiting(const char* what, const std::vector<std::string>& keys,
                          const Deadline& deadline, const std::string& awaited = {});
  // QUEUE_POP: the oldest element, or nullopt when the queue is empty.
  std::optional<Bytes> pop_locked(const std::string& key, const Deadline& deadline);
  std::vector<std::string> missing_locked(const std::vector<std::string>& keys);
  // Reads the values of `keys` with one GET (op kGet, one key) or MULTI_GET,
  // waiting for them: one round trip to collie's server, which parks the
  // request until the keys exist, WAIT then the request to others.
  std::vector<Bytes> fetch_locked(Op op, const std::vector<std::string>& keys,
                                  const Deadline& deadline);
  std::string describe(const std::string& what) const;
  // Throws InvalidArgument when a key or value is over the cap the server
  // would drop the connection for.
  void check_size(const std::string& key, size_t value_bytes) const;

  const std::string host_;
  const uint16_t port_;
  const TcpStoreOptions options_;
  std::unique_ptr<TcpStoreServer> server_;  // when this store hosts it
  mutable std::mutex mu_;
  StoreSocket socket_;
  store_protocol::Dialect dialect_ = store_protocol::Dialect::kUnknown;
  // No answer has come on this connection yet (a 1.13 connection without a
  // secret has no handshake): its first may be a refusal notice.
  bool awaiting_first_answer_ = false;
  // The dialect probe found collie's server, which parks a GET or MULTI_GET
  // of missing keys until they exist (docs/store-protocol.md).
  bool server_parks_gets_ = false;
};

}  // namespace collie
