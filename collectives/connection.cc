#include "collectives/connection.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "runtime/base/str_cat.h"

namespace collie {

Connection::Connection(int fd, int peer, std::string address)
    : fd_(fd), peer_(peer), address_(std::move(address)) {}

Connection::~Connection() {
  if (fd_ >= 0) ::close(fd_);
}

std::string Connection::name() const { return str_cat("rank ", peer_, " (", address_, ")"); }

void Connection::post_send(const WireHeader& header, const void* payload) {
  sends_.push_back(SendOp{header, static_cast<const uint8_t*>(payload)});
}

void Connection::post_recv(const WireHeader& expected, void* data) {
  recvs_.push_back(RecvOp{expected, static_cast<uint8_t*>(data)});
}

long Connection::progress_send(int* err) {
  long moved = 0;
  while (!sends_.empty()) {
    SendOp& op = sends_.front();
    const size_t total = kHeaderBytes + op.header.payload_bytes;
    iovec iov[2];
    int n = 0;
    if (op.sent < kHeaderBytes) {
      iov[n++] = {reinterpret_cast<uint8_t*>(&op.header) + op.sent, kHeaderBytes - op.sent};
    }
    const size_t payload_done = op.sent > kHeaderBytes ? op.sent - kHeaderBytes : 0;
    if (payload_done < op.header.payload_bytes) {
      iov[n++] = {const_cast<uint8_t*>(op.data) + payload_done,
                  op.header.payload_bytes - payload_done};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    const ssize_t r = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      *err = errno;
      return -1;
    }
    op.sent += static_cast<size_t>(r);
    moved += r;
    if (op.sent < total) break;  // the socket buffer is full
    sends_.pop_front();
    ++sends_completed_;
  }
  return moved;
}

size_t Connection::take_from_stash(RecvOp& op) {
  // Until the header is complete and checked, take only header bytes: the
  // payload must not reach op.data before progress_recv() has compared it.
  const size_t limit =
      op.got < kHeaderBytes ? kHeaderBytes : kHeaderBytes + op.expected.payload_bytes;
  const size_t n = std::min(limit - op.got, stash_.size() - stash_pos_);
  const uint8_t* src = stash_.data() + stash_pos_;
  if (op.got < kHeaderBytes) {
    std::memcpy(reinterpret_cast<uint8_t*>(&op.header) + op.got, src, n);
  } else {
    std::memcpy(op.data + (op.got - kHeaderBytes), src, n);
  }
  op.got += n;
  stash_pos_ += n;
  if (stash_pos_ == stash_.size()) {
    stash_.clear();
    stash_pos_ = 0;
  }
  return n;
}

ssize_t Connection::read_small_frame(RecvOp& op) {
  // One read for header and payload; the payload is copied to the caller's
  // buffer only if the header is the expected one. Anything read past a
  // header that is not (an abort frame's text, another call's data) goes to
  // the stash, where the rest of progress_recv() and read_abort_text() look
  // first, exactly as if it were still in the socket.
  uint8_t buf[kHeaderBytes + kBounceBytes];
  const size_t total = kHeaderBytes + op.expected.payload_bytes;
  const ssize_t r = ::read(fd_, buf, total);
  if (r <= 0) return r;
  const size_t n = static_cast<size_t>(r);
  std::memcpy(&op.header, buf, std::min(n, kHeaderBytes));
  if (n <= kHeaderBytes) return r;
  if (std::memcmp(&op.header, &op.expected, kHeaderBytes) == 0) {
    std::memcpy(op.data, buf + kHeaderBytes, n - kHeaderBytes);
    return r;
  }
  stash_.assign(buf + kHeaderBytes, buf + n);  // the stash is empty when we read the socket
  stash_pos_ = 0;
  return static_cast<ssize_t>(kHeaderBytes);
}

long Connection::progress_recv(RecvProblem* problem, int* err) {
  long moved = 0;
  while (!recvs_.empty()) {
    if (p2p_.open) {  // a p2p frame came first: its payload, then ours
      const long r = read_p2p_payload(problem, err);
      if (r < 0) return -1;
      moved += r;
      if (p2p_.open) break;
    }
    RecvOp& op = recvs_.front();
    const size_t total = kHeaderBytes + op.expected.payload_bytes;
    const bool had_header = op.got >= kHeaderBytes;
    if (stash_pos_ < stash_.size()) {
      moved += static_cast<long>(take_from_stash(op));
    } else if (op.got < total) {
      if (eof_) {
        *problem = RecvProblem::kEof;
        return -1;
      }
      // The header is read on its own and checked before the payload is
      // read straight into the caller's buffer (still zero-copy): reading
      // both with one readv would let another call's payload land in the
      // user's tensor before the mismatch is seen (a mismatched call must
      // never mix data). The price is one extra read() per message, which small
      // messages avoid by reading the whole frame into a bounce buffer.
      const ssize_t r =
          op.got == 0 && op.expected.payload_bytes <= kBounceBytes ? read_small_frame(op)
          : op.got < kHeaderBytes
              ? ::read(fd_, reinterpret_cast<uint8_t*>(&op.header) + op.got, kHeaderBytes - op.got)
              : ::read(fd_, op.data + (op.got - kHeaderBytes), total - op.got);
      if (r == 0) {
        eof_ = true;
        *problem = RecvProblem::kEof;
        return -1;
      }
      if (r < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        *err = errno;
        *problem = RecvProblem::kError;
        return -1;
      }
      op.got += static_cast<size_t>(r);
      moved += r;
    }
    // Check the header before reporting any payload: a frame from another
    // call must never be taken for data.
    if (!had_header && op.got >= kHeaderBytes &&
        std::memcmp(&op.header, &op.expected, kHeaderBytes) != 0) {
      if (sink_ != nullptr && op.header.magic == kWireMagic &&
          op.header.frame == static_cast<uint8_t>(FrameType::kP2P)) {
        // A point-to-point message sent before the data this receive waits
        // for: the inbox takes it, and the receive reads its header again.
        const WireHeader h = op.header;
        op.got = 0;
        if (!open_p2p(h)) {
          *problem = RecvProblem::kMismatch;
          return -1;
        }
        continue;
      }
      problem_header_ = op.header;
      const auto frame = static_cast<FrameType>(op.header.frame);
      if (op.header.magic == kWireMagic && frame == FrameType::kAbort) {
        // Nothing past the header was read: the text is still in the socket
        // or the stash, where read_abort_text() finds it.
        problem_text_.clear();
        *problem = RecvProblem::kAbort;
      } else if (op.header.magic == kWireMagic && frame == FrameType::kGoodbye) {
        *problem = RecvProblem::kGoodbye;
      } else {
        *problem = RecvProblem::kMismatch;
      }
      return -1;
    }
    if (op.got < total) {
      // A header just completed and checked: go on to read its payload.
      if (!had_header && op.got == kHeaderBytes) continue;
      break;  // the socket (or the stash) has nothing more for now
    }
    recvs_.pop_front();
    ++recvs_completed_;
  }
  return moved;
}

bool Connection::open_p2p(const WireHeader& header) {
  void* dest = nullptr;
  problem_header_ = header;
  if (!sink_->begin_frame(peer_, header, &dest)) return false;
  p2p_ = P2PFrame{true, header, static_cast<uint8_t*>(dest), 0};
  return true;
}

long Connection::read_p2p_payload(RecvProblem* problem, int* err) {
  long moved = 0;
  const size_t want = p2p_.header.payload_bytes;
  while (p2p_.got < want) {
    if (stash_pos_ < stash_.size()) {
      const size_t n = std::min(want - p2p_.got, stash_.size() - stash_pos_);
      std::memcpy(p2p_.dest + p2p_.got, stash_.data() + stash_pos_, n);
      p2p_.got += n;
      stash_pos_ += n;
      moved += static_cast<long>(n);
      if (stash_pos_ == stash_.size()) {
        stash_.clear();
        stash_pos_ = 0;
      }
      continue;
    }
    if (eof_) {
      *problem = RecvProblem::kEof;
      return -1;
    }
    const ssize_t r = ::read(fd_, p2p_.dest + p2p_.got, want - p2p_.got);
    if (r == 0) {
      eof_ = true;
      *problem = RecvProblem::kEof;
      return -1;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      *err = errno;
      *problem = RecvProblem::kError;
      return -1;
    }
    p2p_.got += static_cast<size_t>(r);
    moved += r;
  }
  if (p2p_.got == want) {
    p2p_.open = false;
    sink_->end_frame(peer_);
  }
  return moved;
}

long Connection::progress_p2p(RecvProblem* problem, int* err, bool* other_next) {
  long moved = 0;
  *other_next = false;
  for (;;) {
    if (p2p_.open) {
      const long r = read_p2p_payload(problem, err);
      if (r < 0) return -1;
      moved += r;
      if (p2p_.open) return moved;
    }
    WireHeader h;
    if (stash_pos_ < stash_.size()) {
      if (stash_.size() - stash_pos_ < kHeaderBytes) return moved;
      std::memcpy(&h, stash_.data() + stash_pos_, kHeaderBytes);
    } else {
      if (eof_) return moved;
      const ssize_t r = ::recv(fd_, &h, kHeaderBytes, MSG_PEEK | MSG_DONTWAIT);
      if (r == 0) {
        eof_ = true;
        *problem = RecvProblem::kEof;
        return -1;
      }
      if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        *err = errno;
        *problem = RecvProblem::kError;
        return -1;
      }
      if (r < static_cast<ssize_t>(kHeaderBytes)) return moved;  // the rest is on its way
    }
    if (h.magic != kWireMagic || h.frame != static_cast<uint8_t>(FrameType::kP2P)) {
      *other_next = true;  // for the Transport: an abort, a goodbye, a later call's data
      return moved;
    }
    if (stash_pos_ < stash_.size()) {
      stash_pos_ += kHeaderBytes;
    } else {
      WireHeader discard;
      if (::recv(fd_, &discard, kHeaderBytes, MSG_DONTWAIT) != static_cast<ssize_t>(kHeaderBytes)) {
        *err = errno;
        *problem = RecvProblem::kError;
        return -1;
      }
    }
    moved += static_cast<long>(kHeaderBytes);
    if (!open_p2p(h)) {
      *problem = RecvProblem::kMismatch;
      return -1;
    }
  }
}

std::string Connection::read_abort_text() {
  std::string text = problem_text_;
  const size_t want = problem_header_.payload_bytes;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (text.size() < want && std::chrono::steady_clock::now() < until) {
    if (stash_pos_ < stash_.size()) {
      const size_t n = std::min(want - text.size(), stash_.size() - stash_pos_);
      text.append(reinterpret_cast<const char*>(stash_.data() + stash_pos_), n);
      stash_pos_ += n;
      continue;
    }
    char buf[4096];
    const ssize_t r = ::recv(fd_, buf, std::min(sizeof buf, want - text.size()), MSG_DONTWAIT);
    if (r > 0) {
      text.append(buf, static_cast<size_t>(r));
    } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      break;
    } else {
      pollfd p{fd_, POLLIN, 0};
      ::poll(&p, 1, 50);
    }
  }
  return text;
}

RecvProblem Connection::absorb(std::string* abort_text) {
  uint8_t buf[64 << 10];
  while (!eof_) {
    const ssize_t r = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (r > 0) {
      stash_.insert(stash_.end(), buf, buf + r);
    } else if (r == 0) {
      eof_ = true;
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      break;
    } else {
      eof_ = true;  // reset: nothing more will come
    }
  }
  // Walk the frames the peer sent before hanging up, looking for the one that
  // says why it did.
  size_t pos = stash_pos_;
  // A data frame cut off by the hang-up ends the walk: `pos` then lies past
  // the stash, where the unsigned difference would wrap.
  while (pos <= stash_.size() && stash_.size() - pos >= kHeaderBytes) {
    WireHeader h;
    std::memcpy(&h, stash_.data() + pos, kHeaderBytes);
    if (h.magic != kWireMagic) break;
    const size_t end = pos + kHeaderBytes + h.payload_bytes;
    const auto frame = static_cast<FrameType>(h.frame);
    if (frame == FrameType::kGoodbye) return RecvProblem::kGoodbye;
    if (frame == FrameType::kAbort) {
      problem_header_ = h;
      const size_t n = std::min(end, stash_.size()) - (pos + kHeaderBytes);
      abort_text->assign(reinterpret_cast<const char*>(stash_.data() + pos + kHeaderBytes), n);
      return RecvProblem::kAbort;
    }
    pos = end;
  }
  return eof_ ? RecvProblem::kEof : RecvProblem::kNone;
}

bool Connection::peek_header(WireHeader* header) {
  if (stash_pos_ < stash_.size()) {
    if (stash_.size() - stash_pos_ < kHeaderBytes) return false;
    std::memcpy(header, stash_.data() + stash_pos_, kHeaderBytes);
    return true;
  }
  const ssize_t r = ::recv(fd_, header, kHeaderBytes, MSG_PEEK | MSG_DONTWAIT);
  return r == static_cast<ssize_t>(kHeaderBytes);
}

std::string Connection::take_abort_frame() {
  if (!peek_header(&problem_header_)) return "";
  if (stash_pos_ < stash_.size()) {
    stash_pos_ += kHeaderBytes;
  } else {
    WireHeader discard;
    if (::recv(fd_, &discard, kHeaderBytes, MSG_DONTWAIT) != static_cast<ssize_t>(kHeaderBytes))
      return "";
  }
  problem_text_.clear();
  return read_abort_text();
}

size_t Connection::partial_send_remaining() const {
  if (sends_.empty()) return 0;
  const SendOp& op = sends_.front();
  if (op.sent == 0) return 0;
  return kHeaderBytes + op.header.payload_bytes - op.sent;
}

void Connection::clear() {
  sends_.clear();
  recvs_.clear();
}

}  // namespace collie
