// Connection's failure forensics (connection.h): what a rank reads and
// writes once something went wrong, apart from the frame parsing of the
// data path (connection.cc). After a hang-up, absorb() reads what the peer
// sent before it into the stash and looks for the control frame that says
// why; skim() walks the stream frame by frame for the timeout probe; the
// abort frame's text is read with a short deadline; write_raw() sends the
// error path's bytes (probe, abort notice, goodbye). Invariant: none of
// these runs while the data path has a frame half-read that it will go on
// reading, except skim(), which takes the stream over for good (the
// operations are void once the group fails).
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "collie/collectives/transport/connection.h"
#include "collie/collectives/transport/waiting.h"

namespace collie {

std::string Connection::read_abort_text() {
  std::string text = problem_text_;
  const size_t want = problem_header_.payload_bytes;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (text.size() < want && std::chrono::steady_clock::now() < until) {
    char buf[4096];
    const ssize_t r = read_some(buf, std::min(sizeof buf, want - text.size()));
    if (r > 0) {
      text.append(buf, static_cast<size_t>(r));
    } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      break;
    } else {
      PollEntry e{this, true, false};
      poll_connections({&e, 1}, 50);
    }
  }
  return text;
}

RecvProblem Connection::absorb(std::string* abort_text) {
  uint8_t buf[64 << 10];
  while (!eof_ && channel_) {
    const ssize_t r = channel_->read(buf, sizeof buf);
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
  if (!channel_) return false;
  return channel_->peek(header, kHeaderBytes) == static_cast<ssize_t>(kHeaderBytes);
}

std::string Connection::take_abort_frame() {
  if (!peek_header(&problem_header_)) return "";
  WireHeader discard;
  if (read_some(&discard, kHeaderBytes) != static_cast<ssize_t>(kHeaderBytes)) return "";
  problem_text_.clear();
  return read_abort_text();
}

Connection::Skimmed Connection::skim(uint32_t group) {
  if (!skimming_) {
    if (recv_pending()) {
      RecvProblem problem = RecvProblem::kNone;
      int err = 0;
      if (progress_recv(&problem, &err) >= 0) {
        if (recv_pending()) return Skimmed::kNothingYet;  // the receive waits for more
      } else {
        const WireHeader& h = received_header();
        switch (problem) {
          case RecvProblem::kMismatch:
            if (h.is_probe(group)) return Skimmed::kProbe;
            if (h.magic != kWireMagic || h.group != group ||
                h.frame != static_cast<uint8_t>(FrameType::kData)) {
              return Skimmed::kGarbled;
            }
            // A frame of another call where this call's data was expected:
            // the stream is not walked further, since the bytes behind such
            // a header may already be in the stash.
            return Skimmed::kOtherCall;
          case RecvProblem::kAbort: return Skimmed::kAbort;
          case RecvProblem::kGoodbye: return Skimmed::kGoodbye;
          default: return Skimmed::kGone;
        }
      }
    }
    if (eof_) {
      std::string ignored;
      switch (absorb(&ignored)) {
        case RecvProblem::kAbort: return Skimmed::kAbort;
        case RecvProblem::kGoodbye: return Skimmed::kGoodbye;
        default: return Skimmed::kGone;
      }
    }
    if (p2p_.open) {  // the rest of a p2p message is skipped: the group is failing
      skim_skip_ = p2p_.header.payload_bytes - p2p_.got;
      p2p_.open = false;
    }
    skimming_ = true;  // from here on the stream is walked frame by frame
  }
  uint8_t scratch[16 << 10];
  for (;;) {
    ssize_t r;
    if (skim_skip_ > 0) {
      r = read_some(scratch, std::min<uint64_t>(skim_skip_, sizeof scratch));
      if (r > 0) skim_skip_ -= static_cast<uint64_t>(r);
    } else {
      r = read_some(skim_head_ + skim_got_, kHeaderBytes - skim_got_);
      if (r > 0) skim_got_ += static_cast<size_t>(r);
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Skimmed::kNothingYet;
    if (r <= 0) return Skimmed::kGone;  // closed or reset without an abort frame: it died
    if (skim_skip_ > 0 || skim_got_ < kHeaderBytes) continue;
    WireHeader h;
    std::memcpy(&h, skim_head_, kHeaderBytes);
    skim_got_ = 0;
    if (h.is_probe(group)) return Skimmed::kProbe;
    if (h.magic != kWireMagic || h.group != group) return Skimmed::kGarbled;
    switch (static_cast<FrameType>(h.frame)) {
      case FrameType::kData:
      case FrameType::kP2P: skim_skip_ = h.payload_bytes; break;
      case FrameType::kAbort: return Skimmed::kAbort;
      case FrameType::kGoodbye: return Skimmed::kGoodbye;
      default: return Skimmed::kGarbled;
    }
  }
}

bool Connection::write_raw(const void* bytes, size_t size, size_t* sent) {
  const auto* p = static_cast<const uint8_t*>(bytes);
  while (*sent < size) {
    if (!channel_) return true;
    iovec iov{const_cast<uint8_t*>(p + *sent), size - *sent};
    const ssize_t r = channel_->write(&iov, 1);
    if (r > 0) {
      *sent += static_cast<size_t>(r);
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return true;
    } else {
      *sent = size;
    }
  }
  return false;
}

void Connection::say_goodbye(uint32_t group) {
  if (!channel_ || eof_) return;
  const WireHeader bye = WireHeader::control(group, FrameType::kGoodbye, 0);
  size_t sent = 0;
  write_raw(&bye, sizeof bye, &sent);
  channel_->shutdown_write();
}

void Connection::shutdown_write() {
  if (channel_) channel_->shutdown_write();
}

void Connection::shutdown_both() {
  if (channel_) channel_->shutdown_both();
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
