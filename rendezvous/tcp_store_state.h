// TcpStoreState: the TcpStore server's keys, values and parked requests,
// with no sockets in sight. The server's event loop owns one and calls it
// from its single thread, so nothing here locks.
//
// A request that cannot be answered yet parks: a WAIT until every key
// exists (torch's semantics: the reply is one STOP_WAITING byte), a GET or
// MULTI_GET until its keys exist (torch's own server would drop the
// connection instead; its clients always WAIT first, so parking is a safe
// superset). Every write (set, add, compare_set, append, multi_set) wakes
// the parked requests on its key.
//
// Values are stored as shared buffers: a reply carries a reference to the
// value it reads (rendezvous/tcp_store_reply.h), so building a reply never
// copies a large value, however many replies ask for it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "rendezvous/store_protocol.h"
#include "rendezvous/tcp_store_reply.h"

namespace collie {

using ConnectionId = uint64_t;

class TcpStoreState {
 public:
  // Called when a parked request of `connection` completes, with its reply.
  // `resumed` is true when the connection had stopped reading requests (a
  // parked GET/MULTI_GET) and may now go on.
  using Deliver = std::function<void(ConnectionId connection, ReplyQueue reply, bool resumed)>;

  explicit TcpStoreState(Deliver deliver) : deliver_(std::move(deliver)) {}

  enum class Outcome {
    kDone,     // answered (reply appended) or needs no answer
    kParked,   // a WAIT parked: the connection may go on sending requests
    kBlocked,  // a GET/MULTI_GET parked: the connection's next requests wait
  };

  // Applies one request. The immediate reply, if any, is appended to
  // `reply`. Throws StoreError when the request cannot be served (add on a
  // value that is not an integer); the server then drops that connection.
  Outcome handle(ConnectionId connection, store_protocol::Request&& request, ReplyQueue& reply);

  // Forgets the parked request of a closed connection.
  void drop(ConnectionId connection);

  size_t num_keys() const { return map_.size(); }

 private:
  struct Parked {
    store_protocol::Op op = store_protocol::Op::kWait;
    std::vector<std::string> keys;  // the GET/MULTI_GET keys, in request order
    size_t remaining = 0;           // keys not yet written
  };

  void write(const std::string& key, Bytes value);
  void write(const std::string& key, std::shared_ptr<Bytes> value);
  // Wakes the parked requests waiting on `key`.
  void wake(const std::string& key);
  // Registers `connection` on the missing keys of `keys`; returns how many.
  size_t park_on_missing(ConnectionId connection, const std::vector<std::string>& keys);
  bool has_all(const std::vector<std::string>& keys) const;
  void append_values(const std::vector<std::string>& keys, ReplyQueue& reply) const;

  Deliver deliver_;
  // shared_ptr<Bytes>, not <const Bytes>: APPEND grows a value in place
  // when no reply holds it.
  std::unordered_map<std::string, std::shared_ptr<Bytes>> map_;
  std::unordered_map<ConnectionId, Parked> parked_;
  std::unordered_map<std::string, std::vector<ConnectionId>> waiting_on_;
};

}  // namespace collie
