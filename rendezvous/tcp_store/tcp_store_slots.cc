#include "collie/rendezvous/tcp_store/tcp_store_slots.h"

namespace collie {

ConnectionSlots::Arrival ConnectionSlots::arrive(ConnectionId id, Clock::time_point now) {
  Arrival a;
  if (!limits_.strict) {
    if (admitted_.size() >= limits_.max_connections) {
      a.verdict = Verdict::kRefuseFull;
      return a;
    }
    admitted_.insert(id);
    a.verdict = Verdict::kAdmitted;
    return a;
  }
  if (pending_.size() >= limits_.max_unauthenticated) {
    a.evict = pending_.begin()->first;
    pending_.erase(pending_.begin());
  }
  pending_.emplace(id, now);
  a.verdict = Verdict::kPending;
  return a;
}

bool ConnectionSlots::admit(ConnectionId id) {
  if (admitted_.contains(id)) return true;
  pending_.erase(id);
  if (admitted_.size() >= limits_.max_connections) return false;
  admitted_.insert(id);
  return true;
}

void ConnectionSlots::leave(ConnectionId id) {
  pending_.erase(id);
  admitted_.erase(id);
}

std::vector<ConnectionId> ConnectionSlots::overdue(Clock::time_point now) const {
  std::vector<ConnectionId> out;
  for (const auto& [id, since] : pending_) {
    if (now - since < limits_.handshake_timeout) break;  // arrival order: the rest are younger
    out.push_back(id);
  }
  return out;
}

}  // namespace collie
