// ConnectionSlots: who may hold a connection to the TcpStore server, with no
// sockets in sight (the server's event loop owns one and calls it from its
// single thread).
//
// A server with a job secret that admits only clients proving it (strict
// mode) keeps two pools. A new connection is *pending* until it proves the
// secret: at most max_unauthenticated are pending at once (a new one closes
// the oldest, which an honest client, authenticating in one round trip, has
// long left) and each for at most handshake_timeout. Proven clients are
// *admitted*, up to max_connections. So a stranger holding thousands of
// idle connections occupies only the pending pool, and only briefly, while
// the job's ranks get in.
//
// A server without a secret, or one that also serves clients without it
// (torch compatibility), cannot tell a stranger from a torch client (whose
// second connection, 1.13's callback socket, sends nothing at all): every
// connection is admitted on arrival, up to max_connections.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <unordered_set>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/rendezvous/tcp_store/tcp_store_state.h"

namespace collie {

class ConnectionSlots {
 public:
  struct Limits {
    size_t max_connections = 16384;
    size_t max_unauthenticated = 1024;
    Timeout handshake_timeout = std::chrono::seconds(10);
    bool strict = false;  // a secret is required: new connections start pending
  };

  explicit ConnectionSlots(const Limits& limits) : limits_(limits) {}

  enum class Verdict {
    kPending,     // strict mode: must prove the secret within the deadline
    kAdmitted,    // served
    kRefuseFull,  // max_connections clients are served already
  };
  struct Arrival {
    Verdict verdict = Verdict::kAdmitted;
    // Strict mode, pending pool full: the oldest pending connection, to be
    // closed to make room.
    std::optional<ConnectionId> evict;
  };
  Arrival arrive(ConnectionId id, Clock::time_point now);

  // A pending connection proved the secret: true when it is admitted, false
  // when max_connections clients are served already. True for a connection
  // admitted before.
  bool admit(ConnectionId id);

  // A connection closed, whichever pool it was in.
  void leave(ConnectionId id);

  // Pending connections whose deadline has passed, oldest first.
  std::vector<ConnectionId> overdue(Clock::time_point now) const;

  size_t admitted() const { return admitted_.size(); }
  size_t pending() const { return pending_.size(); }
  const Limits& limits() const { return limits_; }

 private:
  Limits limits_;
  // Ids grow with arrival, so the map's first entry is the oldest.
  std::map<ConnectionId, Clock::time_point> pending_;
  std::unordered_set<ConnectionId> admitted_;
};

}  // namespace collie
