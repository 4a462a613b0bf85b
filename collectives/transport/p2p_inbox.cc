#include "collie/collectives/transport/p2p_inbox.h"

#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "collie/base/str_cat.h"
#include "collie/base/types.h"

namespace collie {

bool P2PInbox::post(Recv* recv) {
  ++pending_;
  for (auto it = buffered_.begin(); it != buffered_.end(); ++it) {
    if (it->claimed || it->header.root != recv->tag) continue;
    if (recv->peer != kAnySource && recv->peer != it->peer) continue;
    if (it->bytes() != recv->bytes) {
      error_ = size_mismatch(it->peer, it->header, it->bytes(), *recv);
      --pending_;
      return false;
    }
    if (it->single_copy) {
      const Message m = std::move(*it);
      buffered_.erase(it);
      if (!copy_in(m.peer, m.header, m.copy, recv)) {
        --pending_;
        return false;
      }
      return true;
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

std::string P2PInbox::size_mismatch(int peer, const WireHeader& h, size_t bytes,
                                    const Recv& r) const {
  return str_cat("rank ", peer, " sent ", static_cast<DataType>(h.dtype), " x ", h.count, " (",
                 bytes, " bytes) with tag ", h.root, " but the matching recv expects ", r.bytes,
                 " bytes (send and recv must have the same size)");
}

std::vector<P2PInbox::Recv*>::iterator P2PInbox::find_posted(int peer, int tag) {
  return std::find_if(posted_.begin(), posted_.end(), [&](const Recv* r) {
    return r->tag == tag && (r->peer == kAnySource || r->peer == peer);
  });
}

bool P2PInbox::begin_frame(int peer, const WireHeader& header, void** payload) {
  if (header.algorithm == kP2PSingleCopy) {
    // Matched once the descriptor is in (end_frame()).
    if (header.payload_bytes != sizeof(P2PCopyDescriptor)) {
      error_ = str_cat("rank ", peer, " sent a single-copy message whose descriptor has ",
                       header.payload_bytes, " bytes, not ", sizeof(P2PCopyDescriptor),
                       " (a different collie build?)");
      return false;
    }
    in_flight_[peer] = InFlight{nullptr, nullptr, true};
    staged_[peer].header = header;
    *payload = &staged_[peer].copy;
    return true;
  }
  if (const auto it = find_posted(peer, header.root); it != posted_.end()) {
    Recv* r = *it;
    if (r->bytes != header.payload_bytes) {
      error_ = size_mismatch(peer, header, header.payload_bytes, *r);
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

bool P2PInbox::end_frame(int peer) {
  const InFlight f = in_flight_[peer];
  in_flight_[peer] = InFlight{};
  if (f.single_copy) return end_single_copy(peer);
  if (f.recv != nullptr) {
    finish(f.recv, peer);
    return true;
  }
  if (f.message == nullptr) return true;  // its receive was dropped by clear()
  f.message->complete = true;
  if (Recv* r = f.message->claimed) {
    if (r->bytes > 0) std::memcpy(r->data, f.message->payload.get(), r->bytes);
    finish(r, peer);
    buffered_.remove_if([&](const Message& m) { return &m == f.message; });
  }
  return true;
}

bool P2PInbox::end_single_copy(int peer) {
  const P2PCopyDescriptor d = staged_[peer].copy;
  const WireHeader h = staged_[peer].header;
  if (const auto it = find_posted(peer, h.root); it != posted_.end()) {
    Recv* r = *it;
    if (r->bytes != d.bytes) {
      error_ = size_mismatch(peer, h, d.bytes, *r);
      return false;
    }
    posted_.erase(it);
    return copy_in(peer, h, d, r);
  }
  Message m{peer, h, nullptr, true};
  m.single_copy = true;
  m.copy = d;
  buffered_.push_back(std::move(m));
  return true;
}

bool P2PInbox::copy_in(int peer, const WireHeader& h, const P2PCopyDescriptor& d, Recv* recv) {
  const pid_t pid = peers_ != nullptr ? peers_->copy_pid(peer) : 0;
  const auto failed = [&](const char* what, int err) {
    error_ = str_cat("reading the ", d.bytes, "-byte message with tag ", h.root, " from rank ",
                     peer, "'s memory (", what, ") failed: ", std::strerror(err),
                     err == ESRCH ? " (the sender exited)" : "");
    return false;
  };
  if (pid <= 0) return failed("no process to read from", EPERM);
  auto* to = static_cast<uint8_t*>(recv->data);
  for (size_t got = 0; got < d.bytes;) {
    iovec local{to + got, d.bytes - got};
    iovec remote{reinterpret_cast<void*>(d.address + got), d.bytes - got};
    const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failed("process_vm_readv", errno);
    if (n == 0) return failed("process_vm_readv read nothing", EFAULT);
    got += static_cast<size_t>(n);
  }
  // A sender that gave the send up (kP2PCopyAbandoned) may have freed the
  // buffer during the read: what was read is dropped. One that gives it up
  // from now on had it intact throughout.
  uint64_t state = 0;
  {
    iovec local{&state, sizeof state};
    iovec remote{reinterpret_cast<void*>(d.done_address), sizeof state};
    const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n != static_cast<ssize_t>(sizeof state)) return failed("reading its done word", errno);
  }
  if (state == kP2PCopyAbandoned) {
    error_ = str_cat("rank ", peer, " gave up its ", d.bytes, "-byte message with tag ", h.root,
                     " (its send failed or its group was destroyed) while this rank read it");
    return false;
  }
  // The sender's send is done: its buffer is its own again. A sender that
  // exited meanwhile needs no answer (the message is here).
  uint64_t value = d.done_value;
  iovec local{&value, sizeof value};
  iovec remote{reinterpret_cast<void*>(d.done_address), sizeof value};
  (void)::process_vm_writev(pid, &local, 1, &remote, 1, 0);
  peers_->wake(peer);
  finish(recv, peer);
  return true;
}

void P2PInbox::finish(Recv* recv, int peer) {
  recv->done = true;
  recv->source = peer;
  --pending_;
  ++completed_;
}

}  // namespace collie
