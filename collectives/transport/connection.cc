#include "collie/collectives/transport/connection.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "collie/base/str_cat.h"
#include "collie/collectives/reduce_kernels.h"

namespace collie {

namespace {

// What one channel read means for a receive loop: bytes came, try again
// (EINTR), nothing more for now, or the stream failed (*problem set: kEof
// with *eof, or kError with *err).
enum class ReadOutcome { kData, kRetry, kDrained, kFailed };
ReadOutcome classify_read(ssize_t r, bool* eof, RecvProblem* problem, int* err) {
  if (r > 0) return ReadOutcome::kData;
  if (r == 0) {
    *eof = true;
    *problem = RecvProblem::kEof;
    return ReadOutcome::kFailed;
  }
  if (errno == EINTR) return ReadOutcome::kRetry;
  if (errno == EAGAIN || errno == EWOULDBLOCK) return ReadOutcome::kDrained;
  *err = errno;
  *problem = RecvProblem::kError;
  return ReadOutcome::kFailed;
}

}  // namespace

Connection::Connection(std::unique_ptr<Channel> channel, int peer, std::string address)
    : channel_(std::move(channel)),
      shm_(channel_ ? channel_->shared_memory() : nullptr),
      peer_(peer),
      address_(std::move(address)) {}

Connection::~Connection() = default;

void Connection::attach(std::unique_ptr<Channel> channel, std::string address) {
  channel_ = std::move(channel);
  shm_ = channel_ ? channel_->shared_memory() : nullptr;
  address_ = std::move(address);
}

std::string Connection::name() const { return str_cat("rank ", peer_, " (", address_, ")"); }

void Connection::post_send(const WireHeader& header, const void* payload) {
  sends_.push_back(SendOp{header, static_cast<const uint8_t*>(payload)});
}

void Connection::post_recv(const WireHeader& expected, void* data) {
  recvs_.push_back(RecvOp{expected, static_cast<uint8_t*>(data)});
}

int Connection::unsent(SendOp& op, iovec iov[2]) {
  int n = 0;
  if (op.sent < kHeaderBytes) {
    iov[n++] = {reinterpret_cast<uint8_t*>(&op.header) + op.sent, kHeaderBytes - op.sent};
  }
  const size_t payload_done = op.sent > kHeaderBytes ? op.sent - kHeaderBytes : 0;
  if (payload_done < op.header.payload_bytes) {
    iov[n++] = {const_cast<uint8_t*>(op.data) + payload_done,
                op.header.payload_bytes - payload_done};
  }
  return n;
}

bool Connection::send_now(const WireHeader& header, const void* payload) {
  SendOp op{header, static_cast<const uint8_t*>(payload)};
  iovec iov[2];
  const ssize_t r = channel_->write(iov, unsent(op, iov));
  if (r == static_cast<ssize_t>(kHeaderBytes + header.payload_bytes)) {
    ++sends_completed_;
    return true;
  }
  // The ring was full (or the channel failed: progress_send() meets the
  // error again and reports it).
  op.sent = r > 0 ? static_cast<size_t>(r) : 0;
  sends_.push_back(op);
  return false;
}

int Connection::take_now(const WireHeader& expected, void* data) {
  const int r = shm_ ? shm_->take_frame(&expected, kHeaderBytes, data, expected.payload_bytes) : -1;
  if (r > 0) ++recvs_completed_;
  return r;
}

long Connection::progress_send(int* err) {
  long moved = 0;
  while (!sends_.empty() && channel_) {
    SendOp& op = sends_.front();
    const size_t total = kHeaderBytes + op.header.payload_bytes;
    iovec iov[2];
    const ssize_t r = channel_->write(iov, unsent(op, iov));
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      *err = errno;
      return -1;
    }
    op.sent += static_cast<size_t>(r);
    moved += r;
    if (op.sent < total) break;  // the channel is full
    sends_.pop_front();
    ++sends_completed_;
  }
  return moved;
}

void Connection::post_recv_reduce(const WireHeader& expected, void* out, const void* in,
                                  DataType dtype, ReduceOp op) {
  post_recv(expected, out);
  RecvOp& r = recvs_.back();
  r.reduce_in = static_cast<const uint8_t*>(in);
  r.dtype = dtype;
  r.op = op;
}

void Connection::deliver(RecvOp& op, size_t off, const uint8_t* src, size_t n) {
  if (op.reduce_in == nullptr) {
    std::memcpy(op.data + off, src, n);
    return;
  }
  const size_t es = element_size(op.dtype);
  if (op.carry_len > 0) {  // complete the element split at the last piece's end
    const size_t take = std::min(es - op.carry_len, n);
    std::memcpy(op.carry + op.carry_len, src, take);
    op.carry_len += take;
    src += take;
    n -= take;
    off += take;
    if (op.carry_len < es) return;
    reduce(op.data + off - es, op.reduce_in + off - es, op.carry, 1, op.dtype, op.op);
    op.carry_len = 0;
  }
  const size_t whole = n / es * es;
  if (reinterpret_cast<uintptr_t>(src) % es == 0) {
    if (whole > 0) reduce(op.data + off, op.reduce_in + off, src, whole / es, op.dtype, op.op);
  } else {
    // The stream put the elements off their alignment (a frame of an odd
    // size went before): through an aligned bounce, a few KiB at a time.
    alignas(16) uint8_t bounce[4096];
    for (size_t done = 0; done < whole;) {
      const size_t m = std::min(sizeof bounce / es * es, whole - done);
      std::memcpy(bounce, src + done, m);
      reduce(op.data + off + done, op.reduce_in + off + done, bounce, m / es, op.dtype, op.op);
      done += m;
    }
  }
  if (n > whole) {
    std::memcpy(op.carry, src + whole, n - whole);
    op.carry_len = n - whole;
  }
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
    deliver(op, op.got - kHeaderBytes, src, n);
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
  // first, exactly as if it were still in the channel.
  uint8_t buf[kHeaderBytes + kBounceBytes];
  const size_t total = kHeaderBytes + op.expected.payload_bytes;
  const ssize_t r = channel_->read(buf, total);
  if (r <= 0) return r;
  const size_t n = static_cast<size_t>(r);
  std::memcpy(&op.header, buf, std::min(n, kHeaderBytes));
  if (n <= kHeaderBytes) return r;
  if (std::memcmp(&op.header, &op.expected, kHeaderBytes) == 0) {
    deliver(op, 0, buf + kHeaderBytes, n - kHeaderBytes);
    return r;
  }
  stash_.assign(buf + kHeaderBytes, buf + n);  // the stash is empty when we read the channel
  stash_pos_ = 0;
  return static_cast<ssize_t>(kHeaderBytes);
}

long Connection::progress_recv(RecvProblem* problem, int* err) {
  long moved = 0;
  while (!recvs_.empty() && channel_) {
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
      // both at once would let another call's payload land in the user's
      // tensor before the mismatch is seen (a mismatched call must never
      // mix data). The price is one extra read per message, which small
      // messages avoid by reading the whole frame into a bounce buffer.
      const ssize_t r =
          op.got == 0 && op.expected.payload_bytes <= kBounceBytes ? read_small_frame(op)
          : op.got < kHeaderBytes ? channel_->read(reinterpret_cast<uint8_t*>(&op.header) + op.got,
                                                   kHeaderBytes - op.got)
          : op.reduce_in == nullptr
              ? channel_->read(op.data + (op.got - kHeaderBytes), total - op.got)
              : channel_->read_to(total - op.got, [&op, off = op.got - kHeaderBytes](
                                                      const uint8_t* p, size_t n) mutable {
                  deliver(op, off, p, n);
                  off += n;
                });
      const ReadOutcome outcome = classify_read(r, &eof_, problem, err);
      if (outcome == ReadOutcome::kFailed) return -1;
      if (outcome == ReadOutcome::kRetry) continue;
      if (outcome == ReadOutcome::kDrained) break;
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
      problem_expected_ = op.expected;
      const auto frame = static_cast<FrameType>(op.header.frame);
      if (op.header.magic == kWireMagic && frame == FrameType::kAbort) {
        // Nothing past the header was read: the text is still in the channel
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
      break;  // the channel (or the stash) has nothing more for now
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
    if (stash_pos_ >= stash_.size() && (eof_ || !channel_)) {
      if (!eof_) break;  // not attached yet: nothing can arrive
      *problem = RecvProblem::kEof;
      return -1;
    }
    const ssize_t r = read_some(p2p_.dest + p2p_.got, want - p2p_.got);
    const ReadOutcome outcome = classify_read(r, &eof_, problem, err);
    if (outcome == ReadOutcome::kFailed) return -1;
    if (outcome == ReadOutcome::kRetry) continue;
    if (outcome == ReadOutcome::kDrained) break;
    p2p_.got += static_cast<size_t>(r);
    moved += r;
  }
  if (p2p_.got == want) {
    p2p_.open = false;
    if (!sink_->end_frame(peer_)) {
      *problem = RecvProblem::kMismatch;  // received_header() is the p2p frame's
      return -1;
    }
  }
  return moved;
}

bool Connection::stash_header(WireHeader* h, RecvProblem* problem, int* err) {
  // Part of a header may be in the stash (after a bounce-buffer read): the
  // rest joins it there, so that the header is whole in one place.
  const size_t have = stash_.size() - stash_pos_;
  if (have < kHeaderBytes && channel_ && !eof_) {
    uint8_t more[kHeaderBytes];
    const ssize_t r = channel_->read(more, kHeaderBytes - have);
    if (r == 0) {
      eof_ = true;
    } else if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      *err = errno;
      *problem = RecvProblem::kError;
      return false;
    } else if (r > 0) {
      stash_.insert(stash_.end(), more, more + r);
    }
  }
  if (stash_.size() - stash_pos_ < kHeaderBytes) {
    if (eof_) *problem = RecvProblem::kEof;
    return false;
  }
  std::memcpy(h, stash_.data() + stash_pos_, kHeaderBytes);
  return true;
}

long Connection::progress_p2p(RecvProblem* problem, int* err, bool* other_next, bool wanted_only) {
  long moved = 0;
  *other_next = false;
  for (;;) {
    if (p2p_.open) {
      const long r = read_p2p_payload(problem, err);
      if (r < 0) return -1;
      moved += r;
      if (p2p_.open) return moved;
    }
    if (wanted_only && !sink_->wants(peer_)) return moved;
    WireHeader h;
    const bool stashed = stash_pos_ < stash_.size();
    if (stashed) {
      if (!stash_header(&h, problem, err)) return *problem == RecvProblem::kNone ? moved : -1;
    } else {
      if (eof_ || !channel_) return moved;
      const ssize_t r = channel_->peek(&h, kHeaderBytes);
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
    if (stashed) {
      stash_pos_ += kHeaderBytes;
    } else {
      WireHeader discard;
      if (channel_->read(&discard, kHeaderBytes) != static_cast<ssize_t>(kHeaderBytes)) {
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

ssize_t Connection::read_some(void* data, size_t bytes) {
  if (stash_pos_ < stash_.size()) {
    const size_t n = std::min(bytes, stash_.size() - stash_pos_);
    std::memcpy(data, stash_.data() + stash_pos_, n);
    stash_pos_ += n;
    return static_cast<ssize_t>(n);
  }
  if (eof_ || !channel_) return 0;
  const ssize_t r = channel_->read(data, bytes);
  if (r == 0) eof_ = true;
  return r;
}

}  // namespace collie
