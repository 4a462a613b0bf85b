// StoreConnection: one client socket of the TcpStore server. It reads what
// arrives into a buffer, cuts complete requests out of it with
// store_protocol::parse_request, applies them to the shared TcpStoreState and
// writes the replies back, all on the server's event loop thread.
//
// Bad input closes this connection only: a first message that is not a
// TCPStore query, an unknown query type, a key or value over the cap, a
// request the state refuses. A client that dies mid-message is simply
// forgotten. Memory per connection stays bounded: the input buffer never
// holds more than one capped request; replies refer to stored values rather
// than copying them (tcp_store_reply.h); and while more than
// kReplyHighWater bytes of replies are unsent, no further request is read
// or applied, whatever its kind, until the client has read them
// (back-pressure: one such client holds at most kReplyHighWater plus one
// reply). Across connections, the server's ReplyLedger counts what unsent
// replies alone keep alive, and the server drops the worst holders when it
// passes the budget (tcp_store_server.cc).
#pragma once

#include <asio.hpp>

#include <memory>
#include <string>

#include "collie/base/logging.h"
#include "collie/rendezvous/tcp_store/store_auth.h"
#include "collie/rendezvous/tcp_store/store_protocol.h"
#include "collie/rendezvous/tcp_store/tcp_store_reply.h"
#include "collie/rendezvous/tcp_store/tcp_store_state.h"

namespace collie {

// What a connection needs from the server that owns it.
class StoreConnectionOwner {
 public:
  virtual ~StoreConnectionOwner() = default;
  virtual TcpStoreState& state() = 0;
  virtual const store_protocol::Limits& limits() const = 0;
  virtual std::string address() const = 0;  // the server's host:port, for logs
  virtual void closed(ConnectionId id) = 0;
  // The connection proved the job secret (or was admitted without it):
  // false when the server is full and must refuse it.
  virtual bool admit(ConnectionId id) = 0;
  // A connection has served what it read: a moment to look for new ones.
  virtual void activity() {}
  // Who may talk to this server (rendezvous/tcp_store/store_auth.h); none by default.
  virtual const StoreAuthPolicy* auth_policy() const { return nullptr; }
  // Where the connection's unsent replies are counted; none by default.
  virtual ReplyLedger* reply_ledger() { return nullptr; }
};

class StoreConnection : public std::enable_shared_from_this<StoreConnection> {
 public:
  // Unsent reply bytes beyond which the connection stops reading and
  // applying requests.
  static constexpr size_t kReplyHighWater = size_t{1} << 20;

  StoreConnection(ConnectionId id, asio::ip::tcp::socket socket, StoreConnectionOwner& owner);

  void start();
  // Queues a reply to a parked request and sends what it can.
  void send(ReplyQueue reply);
  // A parked GET completed: go on with the requests buffered behind it.
  void resume();
  // Sends `notice` (store_auth.h's refusals) in place of any further answer,
  // then closes; `why` is logged at `level`.
  void refuse(uint8_t notice, const std::string& why, LogLevel level = LogLevel::kWarn);
  void close();
  const std::string& peer() const { return peer_; }
  // Bytes that this connection's unsent replies alone keep alive
  // (ReplyQueue::held).
  size_t held_reply_bytes(const ReplyLedger& ledger) const { return out_.held(ledger); }
  size_t unsent_reply_bytes() const { return out_.size(); }
  // Closes at once, discarding what is unsent (the server's reply budget
  // is spent); logs `why` at WARN.
  void abandon(const std::string& why);

 private:
  // Applies what is buffered, sends what is queued, reads more: each step
  // only as far as back-pressure allows.
  void pump();
  void read();
  void on_read(std::error_code ec, size_t n);
  // Parses and applies the complete buffered requests, until one parks or
  // the unsent replies pass kReplyHighWater.
  void process();
  void apply(store_protocol::Request&& request);
  // Writes queued replies until the socket would block, then waits for it
  // to become writable again.
  void flush();
  // Sends what is queued, then closes; logs `why` at `level`.
  void drop(const std::string& why, LogLevel level = LogLevel::kWarn);
  bool output_full() const { return out_.size() > kReplyHighWater; }
  // Brings the ledger's count of this connection's own reply bytes up to date.
  void account();

  ConnectionId id_;
  asio::ip::tcp::socket socket_;
  StoreConnectionOwner& owner_;
  std::string peer_;

  Bytes in_;  // in_[begin_, end_) is received, unparsed input
  size_t begin_ = 0;
  size_t end_ = 0;
  size_t need_ = 0;                // don't re-parse before end_ - begin_ reaches this
  ReplyQueue out_;                 // replies not yet written
  ReplyLedger* ledger_ = nullptr;  // the owner's, if it counts replies
  size_t accounted_ = 0;           // out_'s own bytes, as the ledger counts them
  bool write_in_flight_ = false;   // waiting for the socket to become writable
  bool read_in_flight_ = false;
  bool blocked_ = false;  // a GET is parked: later requests wait behind it
  bool closing_ = false;  // dropped: send what is queued, then close
  bool closed_ = false;
  store_protocol::Dialect dialect_ = store_protocol::Dialect::kUnknown;
  std::unique_ptr<StoreAuthGate> auth_;  // until the job secret is proven
};

}  // namespace collie
