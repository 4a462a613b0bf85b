// StoreConnection: one client socket of the TcpStore server. It reads what
// arrives into a buffer, cuts complete requests out of it with
// store_protocol::parse_request, applies them to the shared TcpStoreState and
// writes the replies back, all on the server's event loop thread.
//
// Bad input closes this connection only: a first message that is not a
// TCPStore query, an unknown query type, a key or value over the cap, a
// request the state refuses. A client that dies mid-message is simply
// forgotten. Memory per connection stays bounded: the input buffer never
// holds more than one capped request, and reading pauses while replies pile
// up unsent.
#pragma once

#include <asio.hpp>

#include <memory>
#include <string>

#include "rendezvous/store_auth.h"
#include "rendezvous/store_protocol.h"
#include "rendezvous/tcp_store_state.h"

namespace collie {

// What a connection needs from the server that owns it.
class StoreConnectionOwner {
 public:
  virtual ~StoreConnectionOwner() = default;
  virtual TcpStoreState& state() = 0;
  virtual const store_protocol::Limits& limits() const = 0;
  virtual std::string address() const = 0;  // the server's host:port, for logs
  virtual void closed(ConnectionId id) = 0;
  // Who may talk to this server (rendezvous/store_auth.h); none by default.
  virtual const StoreAuthPolicy* auth_policy() const { return nullptr; }
};

class StoreConnection : public std::enable_shared_from_this<StoreConnection> {
 public:
  StoreConnection(ConnectionId id, asio::ip::tcp::socket socket, StoreConnectionOwner& owner);

  void start();
  // Queues bytes to send (a reply to a parked request).
  void send(Bytes bytes);
  // A parked GET completed: go on with the requests buffered behind it.
  void resume();
  void close();

 private:
  void read();
  void on_read(std::error_code ec, size_t n);
  // Parses and applies every complete buffered request.
  void process();
  void apply(store_protocol::Request&& request);
  void flush();
  void drop(const std::string& why);
  size_t pending_output() const { return out_.size() + writing_.size(); }

  ConnectionId id_;
  asio::ip::tcp::socket socket_;
  StoreConnectionOwner& owner_;
  std::string peer_;

  Bytes in_;  // in_[begin_, end_) is received, unparsed input
  size_t begin_ = 0;
  size_t end_ = 0;
  size_t need_ = 0;  // don't re-parse before end_ - begin_ reaches this
  Bytes out_;        // replies not yet handed to the socket
  Bytes writing_;    // replies being written
  bool write_in_flight_ = false;
  bool read_in_flight_ = false;
  bool blocked_ = false;  // a GET is parked: later requests wait behind it
  bool closing_ = false;  // dropped: send what is queued, then close
  bool closed_ = false;
  store_protocol::Dialect dialect_ = store_protocol::Dialect::kUnknown;
  std::unique_ptr<StoreAuthGate> auth_;  // until the job secret is proven
};

}  // namespace collie
