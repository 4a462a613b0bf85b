// TcpStoreState: the TcpStore server's keys, values, queues and parked
// requests, with no sockets in sight. The server's event loop owns one and
// calls it from its single thread, so nothing here locks.
//
// A request that cannot be answered yet parks: a WAIT until every key
// exists (torch's semantics: the reply is one STOP_WAITING byte), a GET or
// MULTI_GET until its keys exist (torch's own server would drop the
// connection instead; its clients always WAIT first, so parking is a safe
// superset), a BARRIER until its last participant arrives. Every write (set,
// add, compare_set, append, multi_set) wakes the parked requests on its key.
//
// Queues (torch 2.11's QUEUE_PUSH/POP/LEN) live beside the keys, under
// names of their own: a key and a queue may share a name. For WAIT and
// CHECK a name exists when it has a value or a non-empty queue, and a push
// wakes the first WAIT in line on its name, only one, as torch's server
// does: torch's blocking queue_pop is a WAIT on the queue's name followed
// by a QUEUE_POP, and one element should release one popper. QUEUE_POP
// itself never parks.
//
// Values are stored as shared buffers: a reply carries a reference to the
// value it reads (rendezvous/tcp_store/tcp_store_reply.h), so building a reply never
// copies a large value, however many replies ask for it. An APPEND grows a
// value in place, even while replies refer to it (each sends only the bytes
// it was given, which never change), and copies it only when its buffer
// is full: then into one twice as large, so that an APPEND + GET per
// request cannot pin a copy of the value per request. Every buffer the
// state lets go of while replies still hold it is handed to the
// ReplyLedger, which counts it against the server's reply budget.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "collie/rendezvous/tcp_store/store_protocol.h"
#include "collie/rendezvous/tcp_store/tcp_store_reply.h"

namespace collie {

using ConnectionId = uint64_t;

class TcpStoreState {
 public:
  // Called when a parked request of `connection` completes, with its reply.
  // `resumed` is true when the connection had stopped reading requests (a
  // parked GET/MULTI_GET) and may now go on.
  using Deliver = std::function<void(ConnectionId connection, ReplyQueue reply, bool resumed)>;

  // `max_value_bytes`: no APPEND grows a value past it (the server's
  // --max-value-bytes, which also caps what one request carries).
  // `ledger`, when given, learns of every buffer the state lets go of (it
  // must outlive the state's replies).
  explicit TcpStoreState(Deliver deliver, size_t max_value_bytes = size_t{64} << 20,
                         ReplyLedger* ledger = nullptr)
      : deliver_(std::move(deliver)), max_value_bytes_(max_value_bytes), ledger_(ledger) {}

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
    // kWait for a WAIT and for a BARRIER (both are answered STOP_WAITING),
    // kGet or kMultiGet for a parked read.
    store_protocol::Op op = store_protocol::Op::kWait;
    std::vector<std::string> keys;  // the GET/MULTI_GET keys, in request order
    size_t remaining = 0;           // keys not yet written
  };

  // Stores a value and wakes the parked requests on its key.
  void write(const std::string& key, Bytes value);
  void write(const std::string& key, std::shared_ptr<Bytes> value);
  // Stores a value without waking anyone (a barrier's count before its
  // last participant).
  void store(const std::string& key, std::shared_ptr<Bytes> value);
  // Wakes the parked requests waiting on `key`.
  void wake(const std::string& key);
  // A push onto the queue `key`: wakes the first WAIT in line on it.
  void wake_one(const std::string& key);
  // Registers `connection` on the keys it lacks, for a read (`values`: a
  // stored value is needed) or a WAIT (a non-empty queue will do); returns
  // how many.
  size_t park_on_missing(ConnectionId connection, const std::vector<std::string>& keys,
                         bool values);
  // What WAIT and CHECK see: a stored value or a non-empty queue.
  bool exists(const std::string& key) const;
  bool all_exist(const std::vector<std::string>& keys) const;
  // What GET and MULTI_GET read: stored values only.
  bool has_values(const std::vector<std::string>& keys) const;
  void append_values(const std::vector<std::string>& keys, ReplyQueue& reply) const;
  // BARRIER: counts the arrival; answers the last one and wakes the rest.
  Outcome barrier(ConnectionId connection, const std::string& key, int64_t world_size,
                  ReplyQueue& reply);
  // LIST_KEYS's reply: the key count, then every key, sorted.
  void append_key_list(ReplyQueue& reply);
  // APPEND to the stored value `value` of `key`.
  void append(const std::string& key, std::shared_ptr<Bytes>& value, std::span<const uint8_t> tail);
  // Lets go of a buffer, telling the ledger when replies still hold it.
  void retire(SharedValue buffer);
  // The key list is outdated (a key was added or deleted).
  void forget_key_list() { retire(std::move(key_list_)); }

  Deliver deliver_;
  const size_t max_value_bytes_;
  ReplyLedger* ledger_ = nullptr;
  // shared_ptr<Bytes>, not <const Bytes>: APPEND grows a value in place
  // (past the bytes any reply refers to).
  std::unordered_map<std::string, std::shared_ptr<Bytes>> map_;
  std::unordered_map<std::string, std::deque<SharedValue>> queues_;  // never empty
  std::unordered_map<ConnectionId, Parked> parked_;
  std::unordered_map<std::string, std::vector<ConnectionId>> waiting_on_;
  // LIST_KEYS's reply, encoded once and shared by every LIST_KEYS until a
  // key is added or deleted: a job's ranks listing an unchanged store cost
  // one copy of the key names, not one each.
  SharedValue key_list_;
};

}  // namespace collie
