#include "collie/collectives/transport/p2p_inbox.h"

#include <algorithm>
#include <cstring>

#include "collie/base/str_cat.h"
#include "collie/base/types.h"

namespace collie {

bool P2PInbox::post(Recv* recv) {
  ++pending_;
  for (auto it = buffered_.begin(); it != buffered_.end(); ++it) {
    if (it->claimed || it->header.root != recv->tag) continue;
    if (recv->peer != kAnySource && recv->peer != it->peer) continue;
    if (it->header.payload_bytes != recv->bytes) {
      error_ = size_mismatch(it->peer, it->header, *recv);
      --pending_;
      return false;
    }
    if (!it->complete) {
      it->claimed = recv;  // end_frame() finishes it
      return true;
    }
    if (recv->bytes > 0) std::memcpy(recv->data, it->payload.get(), recv->bytes);
    finish(recv, it->peer);
    buffered_.erase(it);
    return true;
  }
  posted_.push_back(recv);
  return true;
}

bool P2PInbox::wants(int peer) const {
  for (const Recv* r : posted_)
    if (r->peer == kAnySource || r->peer == peer) return true;
  return false;
}

bool P2PInbox::wants_exactly(int peer) const {
  for (const Recv* r : posted_)
    if (r->peer == peer) return true;
  return false;
}

std::vector<std::string> P2PInbox::describe_posted() const {
  std::vector<std::string> out;
  for (const Recv* r : posted_) {
    out.push_back(
        str_cat("receive from ",
                r->peer == kAnySource ? std::string("any rank") : str_cat("rank ", r->peer),
                " (tag ", r->tag, ", ", r->bytes, " bytes)"));
  }
  return out;
}

void P2PInbox::clear() {
  posted_.clear();
  for (auto& m : buffered_) m.claimed = nullptr;
  for (auto& f : in_flight_) f.recv = nullptr;
  pending_ = 0;
}

std::string P2PInbox::size_mismatch(int peer, const WireHeader& h, const Recv& r) const {
  return str_cat("rank ", peer, " sent ", static_cast<DataType>(h.dtype), " x ", h.count, " (",
                 h.payload_bytes, " bytes) with tag ", h.root, " but the matching recv expects ",
                 r.bytes, " bytes (send and recv must have the same size)");
}

bool P2PInbox::begin_frame(int peer, const WireHeader& header, void** payload) {
  const int tag = header.root;
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    Recv* r = *it;
    if (r->tag != tag || (r->peer != kAnySource && r->peer != peer)) continue;
    if (r->bytes != header.payload_bytes) {
      error_ = size_mismatch(peer, header, *r);
      return false;
    }
    posted_.erase(it);
    in_flight_[peer] = InFlight{r, nullptr};
    *payload = r->data;
    return true;
  }
  buffered_.push_back(
      Message{peer, header,
              std::unique_ptr<uint8_t[]>(new uint8_t[std::max<size_t>(1, header.payload_bytes)])});
  in_flight_[peer] = InFlight{nullptr, &buffered_.back()};
  *payload = buffered_.back().payload.get();
  return true;
}

void P2PInbox::end_frame(int peer) {
  const InFlight f = in_flight_[peer];
  in_flight_[peer] = InFlight{};
  if (f.recv != nullptr) {
    finish(f.recv, peer);
    return;
  }
  if (f.message == nullptr) return;  // its receive was dropped by clear()
  f.message->complete = true;
  if (Recv* r = f.message->claimed) {
    if (r->bytes > 0) std::memcpy(r->data, f.message->payload.get(), r->bytes);
    finish(r, peer);
    buffered_.remove_if([&](const Message& m) { return &m == f.message; });
  }
}

void P2PInbox::finish(Recv* recv, int peer) {
  recv->done = true;
  recv->source = peer;
  --pending_;
  ++completed_;
}

}  // namespace collie
