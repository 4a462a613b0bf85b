// Transport's failure path: what a rank does when a peer's frame does not
// match its call, a peer fails or hangs up, or the deadline passes (see
// transport.h and docs/algorithms.md, "the mismatch protocol" and "When a
// peer fails").
//
// The timeout probe. A stopped rank (SIGSTOP, a debugger, a hung GPU
// driver) keeps its sockets open, so nothing tells the others it is gone,
// and in a ring only its right neighbour waits on it directly: every other
// rank waits on a live neighbour that is itself stuck. What a rank waits on
// therefore does not name the culprit. What does: the stopped rank is the
// one that cannot answer. So a rank whose deadline passes sends a probe
// frame to every peer before it fails, and reads every connection for a
// short grace (probe_grace(): half the call's limit, at most 2 s). A live
// rank is inside progress() (it is stuck in the same collective), reads the
// probe as an unexpected frame where it expected data, and does the same:
// sends its own probe to every peer (its answer) and reads for theirs. The
// probes spread through the whole group within a poll each; when every
// peer has answered, or the grace is over, each rank fails with a
// TimeoutError naming the call, its sequence number and the ranks that never
// answered, with their addresses. All of this is on the error path: the
// data path only gained a case in a switch it already had.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "collectives/transport.h"
#include "runtime/base/error.h"
#include "runtime/base/logging.h"
#include "runtime/base/str_cat.h"

namespace collie {
namespace {

// Abort notices are best effort: a peer that does not read gets an EOF
// instead after this long.
constexpr auto kNoticeBudget = std::chrono::milliseconds(200);
constexpr size_t kMaxAbortText = 4096;

// Sends what the socket takes of bytes[*sent, size) without blocking, for
// the probe and the abort notices (error paths, several peers at once).
// True when the rest has to wait for POLLOUT; a peer that is gone counts as
// done (*sent = size).
bool send_without_blocking(int fd, const void* bytes, size_t size, size_t* sent) {
  const auto* p = static_cast<const uint8_t*>(bytes);
  while (*sent < size) {
    const ssize_t r = ::send(fd, p + *sent, size - *sent, MSG_NOSIGNAL | MSG_DONTWAIT);
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
// How long a rank that saw a frame of a later call waits for a frame of its
// own call from another peer, which would name the real mismatch.
constexpr auto kEvidenceGrace = std::chrono::milliseconds(200);
// Bounds of the timeout probe's grace (probe_grace()).
constexpr auto kMinProbeGrace = std::chrono::milliseconds(20);
constexpr auto kMaxProbeGrace = std::chrono::milliseconds(2000);

[[noreturn]] void throw_error(ErrorKind kind, const std::string& message) {
  switch (kind) {
    case ErrorKind::kTimeout: throw TimeoutError(message);
    case ErrorKind::kBackend: throw BackendError(message);
    case ErrorKind::kNetwork: break;
  }
  throw NetworkError(message);
}

}  // namespace
void Transport::on_hangup(Connection& c) {
  std::string text;
  switch (c.absorb(&text)) {
    case RecvProblem::kAbort: fail_from_peer(c, text);
    case RecvProblem::kEof:
      fail(ErrorKind::kNetwork, str_cat(context(), ": the connection to ", c.name(),
                                        " closed unexpectedly (the peer process exited, "
                                        "crashed or aborted)"));
    default: break;  // a goodbye, or the rest has not arrived yet
  }
}

void Transport::on_unexpected_input(Connection& c) {
  WireHeader h;
  if (!c.peek_header(&h)) return;  // the rest of the header is on its way
  if (h.magic != kWireMagic || h.group != group_) fail_mismatch(c, h);
  switch (static_cast<FrameType>(h.frame)) {
    case FrameType::kAbort: fail_from_peer(c, c.take_abort_frame());
    case FrameType::kGoodbye: break;
    case FrameType::kProbe:
      if (h.is_probe(group_)) fail_probed(c, h);
      fail_mismatch(c, h);
    case FrameType::kData:
      if (h.seq < call_.seq || (h.seq == call_.seq && !(h.call() == call_))) fail_mismatch(c, h);
      break;
    case FrameType::kP2P:
      // A point-to-point message: into the inbox now, whatever this rank is
      // doing, so that a peer sending before it receives never waits on us.
      progress_p2p_reads(c);
      return;
  }
  peeked_seq_[c.peer()] = call_.seq;
}

void Transport::fail_mismatch(const Connection& c, const WireHeader& h) {
  if (h.magic != kWireMagic || h.group != group_) {
    fail(ErrorKind::kBackend,
         str_cat(context(), ": received a message from ", c.name(),
                 " that does not belong to this group (magic ", h.magic, ", group ", h.group,
                 ", expected ", kWireMagic, ", ", group_, ")"));
  }
  // A peer that is already past our call is one symptom; another peer's
  // frame of this very call, waiting unread, usually names the real culprit.
  // It may still be on its way (the sender was descheduled between two
  // sends), so look for up to kEvidenceGrace: this is the error path.
  if (h.seq != call_.seq) {
    const auto until = std::min(Clock::now() + kEvidenceGrace, deadline_->when());
    for (;;) {
      std::vector<pollfd> quiet;
      for (auto& other : connections_) {
        if (!other || other.get() == &c || !other->at_frame_boundary() || other->finished())
          continue;
        WireHeader o;
        if (!other->peek_header(&o)) {
          quiet.push_back(pollfd{other->fd(), POLLIN, 0});
        } else if (o.magic == kWireMagic && o.group == group_ &&
                   o.frame == static_cast<uint8_t>(FrameType::kData) && o.seq == call_.seq &&
                   !(o.call() == call_)) {
          fail_mismatch(*other, o);
        }
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (quiet.empty() || left.count() <= 0) break;
      ::poll(quiet.data(), quiet.size(), static_cast<int>(left.count()));
    }
  }
  fail(ErrorKind::kBackend,
       str_cat("collective mismatch: rank ", c.peer(), " called ", h.call().describe_with_seq(),
               ", rank ", rank_, " called ", call_.describe_with_seq(),
               " (every rank must call the same collectives in the same order)"));
}

void Transport::on_recv_problem(Connection& c, RecvProblem problem, int err) {
  const WireHeader& h = c.received_header();
  switch (problem) {
    case RecvProblem::kMismatch:
      if (h.is_p2p(group_)) fail(ErrorKind::kBackend, str_cat(context(), ": ", inbox_.error()));
      if (h.is_probe(group_)) fail_probed(c, h);
      if (h.magic == kWireMagic && h.group == group_ && h.call() == call_) {
        fail(ErrorKind::kBackend,
             str_cat(context(), ": ", c.name(), " sent a ", h.payload_bytes,
                     "-byte message where a different size was expected: are the "
                     "CommunicatorOptions (segment_bytes, small_message_bytes) the same on "
                     "every rank?"));
      }
      fail_mismatch(c, h);
    case RecvProblem::kAbort: fail_from_peer(c, c.read_abort_text());
    case RecvProblem::kGoodbye:
      fail(ErrorKind::kNetwork, str_cat(context(), ": ", c.name(),
                                        " closed its communicator while this rank still "
                                        "expected its data (did the ranks call different "
                                        "numbers of collectives?)"));
    case RecvProblem::kEof:
      fail(ErrorKind::kNetwork, str_cat(context(), ": the connection to ", c.name(),
                                        " closed unexpectedly (the peer process exited, "
                                        "crashed or aborted)"));
    case RecvProblem::kError:
    case RecvProblem::kNone: break;
  }
  fail(ErrorKind::kNetwork,
       str_cat(context(), ": receiving from ", c.name(), " failed: ", std::strerror(err),
               " (the peer process exited, crashed or aborted)"));
}

void Transport::fail_from_peer(Connection& c, const std::string& text) {
  const auto kind = static_cast<ErrorKind>(c.received_header().error_kind);
  // A peer's timeout blames whom it waited for, which may itself be waiting
  // on the rank that really hangs (in a ring, rank 1 waits on rank 0, which
  // waits on a stopped rank 2). Our own outstanding operations are the next
  // link of that chain, so the timeout carries them on instead of replacing
  // them: whoever reads either message sees the whole chain.
  if (kind == ErrorKind::kTimeout) {
    const std::vector<std::string> waiting = waiting_for(&c);
    std::string merged = text;
    if (!waiting.empty()) {
      merged += str_cat("; rank ", rank_, ", relaying this, was itself still waiting to ",
                        join(waiting, ", "));
    }
    // The abort reached us without its probe being seen first (it was
    // behind a frame we had already looked at, and the hang-up came first):
    // probe now, so that this rank too names the silent ones from its own
    // view rather than only the sender's.
    if (!probed_) merged += str_cat("; rank ", rank_, " probed: ", probe_peers(&c));
    fail_impl(kind, str_cat(context(), ": ", c.name(), " failed: ", merged), merged);
  }
  fail_impl(kind, str_cat(context(), ": ", c.name(), " failed: ", text), text);
}

std::vector<std::string> Transport::waiting_for(const Connection* except) const {
  std::vector<std::string> waiting;
  for (auto& c : connections_) {
    if (!c || c.get() == except) continue;
    if (c->recv_pending()) {
      waiting.push_back(
          str_cat("receive from ", c->name(), " (", c->recvs_queued(), " message(s) outstanding)"));
    }
    if (c->send_pending()) {
      waiting.push_back(
          str_cat("send to ", c->name(), " (", c->sends_queued(), " message(s) outstanding)"));
    }
  }
  return waiting;
}

void Transport::fail_timeout() {
  std::vector<std::string> waiting = waiting_for(nullptr);
  if (!p2p_context_.empty()) {
    // Only this rank and its peers are in a send/recv: no probe (the other
    // ranks are not reading); the peers owing a message are the culprits.
    for (auto& r : inbox_.describe_posted()) waiting.push_back(std::move(r));
    fail(ErrorKind::kTimeout,
         str_cat(context(), " timed out ", deadline_->describe(), "; still waiting to ",
                 join(waiting, ", "),
                 ": the peer has not made the matching call (same tag and size), or it is "
                 "stopped or hung"));
  }
  // The limit as it stood when the deadline passed, not after the probe.
  const std::string head = str_cat(context(), " timed out ", deadline_->describe(),
                                   "; still waiting to ", join(waiting, ", "));
  const std::string verdict = probe_peers(nullptr);
  fail(ErrorKind::kTimeout, str_cat(head, "; ", verdict));
}

void Transport::fail_probed(Connection& c, const WireHeader& probe) {
  const std::vector<std::string> waiting = waiting_for(nullptr);
  const bool origin = probe.probe == static_cast<uint8_t>(ProbeReason::kTimedOut);
  std::string message = str_cat(context(), ": ", c.name(),
                                origin ? " timed out in " : " passed on a timeout probe for ",
                                probe.call().describe_with_seq());
  if (!waiting.empty())
    message += str_cat("; this rank was still waiting to ", join(waiting, ", "));
  message += str_cat("; ", probe_peers(&c));
  fail_impl(ErrorKind::kTimeout, message, message);
}

std::chrono::milliseconds Transport::probe_grace() const {
  // Long enough for a live rank to be scheduled, read the probe and answer
  // on a loaded machine; short next to the timeout the user chose, and never
  // unbounded. Every rank counts its own grace from when it starts probing.
  const auto half = deadline_ ? deadline_->limit() / 2 : kMaxProbeGrace;
  return std::clamp<std::chrono::milliseconds>(half, kMinProbeGrace, kMaxProbeGrace);
}

namespace {

// What the probe learnt about one peer.
enum class Answer { kSilent, kProbe, kAbort, kGoodbye, kGone, kGarbled, kOtherCall };

struct PeerWatch {
  Connection* c = nullptr;
  std::string out;  // still to send: the rest of a half-sent message, then our probe
  size_t sent = 0;
  bool raw = false;  // no receive posted: we walk the stream's frames ourselves
  uint8_t head[kHeaderBytes];
  size_t head_got = 0;
  uint64_t skip = 0;  // payload bytes of a data frame still to discard
  Answer answer = Answer::kSilent;
  WireHeader other_call;  // kOtherCall: the frame that came
};

// A finished connection: what the stash says it ended with.
Answer from_stash(Connection& c) {
  std::string ignored;
  switch (c.absorb(&ignored)) {
    case RecvProblem::kAbort: return Answer::kAbort;
    case RecvProblem::kGoodbye: return Answer::kGoodbye;
    default: return Answer::kGone;
  }
}

// Reads what `w`'s peer sent until its probe, abort or goodbye, or until
// the socket has nothing more for now. Data frames are taken into the
// receives still posted (the call is failing; they held its data anyway) or
// skipped, since a live peer's probe may come behind frames we never asked
// for yet.
void read_for_answer(PeerWatch& w, uint32_t group, std::vector<uint8_t>& scratch) {
  Connection& c = *w.c;
  if (!w.raw) {
    if (c.recv_pending()) {
      RecvProblem problem = RecvProblem::kNone;
      int err = 0;
      if (c.progress_recv(&problem, &err) >= 0) {
        if (c.recv_pending()) return;  // the receive waits for more; poll()
      } else {
        const WireHeader& h = c.received_header();
        switch (problem) {
          case RecvProblem::kMismatch:
            if (h.is_probe(group)) {
              w.answer = Answer::kProbe;
              return;
            }
            if (h.magic != kWireMagic || h.group != group ||
                h.frame != static_cast<uint8_t>(FrameType::kData)) {
              w.answer = Answer::kGarbled;
              return;
            }
            // A frame of another call where this call's data was expected:
            // the peer was past (or behind) this call when it sent it. That
            // is what to report; the stream is not walked further, since
            // the bytes behind such a header may already be in the stash.
            w.answer = Answer::kOtherCall;
            w.other_call = h;
            return;
          case RecvProblem::kAbort: w.answer = Answer::kAbort; return;
          case RecvProblem::kGoodbye: w.answer = Answer::kGoodbye; return;
          default: w.answer = Answer::kGone; return;
        }
      }
    }
    if (c.finished()) {
      w.answer = from_stash(c);
      return;
    }
    w.raw = true;  // from here on the stream is ours, frame by frame
  }
  for (;;) {
    ssize_t r;
    if (w.skip > 0) {
      r = ::recv(c.fd(), scratch.data(), std::min<uint64_t>(w.skip, scratch.size()), MSG_DONTWAIT);
      if (r > 0) w.skip -= static_cast<uint64_t>(r);
    } else {
      r = ::recv(c.fd(), w.head + w.head_got, kHeaderBytes - w.head_got, MSG_DONTWAIT);
      if (r > 0) w.head_got += static_cast<size_t>(r);
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (r <= 0) {
      w.answer = Answer::kGone;  // closed or reset without an abort frame: it died
      return;
    }
    if (w.skip > 0 || w.head_got < kHeaderBytes) continue;
    WireHeader h;
    std::memcpy(&h, w.head, kHeaderBytes);
    w.head_got = 0;
    if (h.is_probe(group)) {
      w.answer = Answer::kProbe;
      return;
    }
    if (h.magic != kWireMagic || h.group != group) {
      w.answer = Answer::kGarbled;
      return;
    }
    switch (static_cast<FrameType>(h.frame)) {
      case FrameType::kData:
      case FrameType::kP2P: w.skip = h.payload_bytes; break;
      case FrameType::kAbort: w.answer = Answer::kAbort; return;
      case FrameType::kGoodbye: w.answer = Answer::kGoodbye; return;
      default: w.answer = Answer::kGarbled; return;
    }
  }
}

std::string rank_list(const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  for (int r : ranks) parts.push_back(std::to_string(r));
  return join(parts, ",");
}

}  // namespace

std::string Transport::probe_peers(const Connection* trigger) {
  probed_ = true;
  const auto grace = probe_grace();
  const auto until = Clock::now() + grace;
  const WireHeader probe = WireHeader::make_probe(
      group_, call_, trigger ? ProbeReason::kAnswer : ProbeReason::kTimedOut);
  const auto* probe_bytes = reinterpret_cast<const char*>(&probe);
  std::vector<PeerWatch> watch;
  for (auto& c : connections_) {
    if (!c) continue;
    PeerWatch w;
    w.c = c.get();
    if (!c->finished()) {
      // A half-written message is finished with zeros (as for an abort
      // notice) so that the peer finds our probe right after it; we send no
      // more data in this call.
      w.out.assign(c->partial_send_remaining(), '\0');
      w.out.append(probe_bytes, kHeaderBytes);
    }
    if (c.get() == trigger) w.answer = Answer::kProbe;
    watch.push_back(std::move(w));
  }
  std::vector<uint8_t> scratch(64 << 10);
  for (;;) {
    std::vector<pollfd> fds;
    bool silent = false;
    for (auto& w : watch) {
      short events = 0;
      // A full receive buffer is a stopped rank, usually; a peer that is
      // gone is found by reading.
      if (send_without_blocking(w.c->fd(), w.out.data(), w.out.size(), &w.sent)) events |= POLLOUT;
      if (w.answer == Answer::kSilent) read_for_answer(w, group_, scratch);
      if (w.answer == Answer::kSilent) {
        silent = true;
        events |= POLLIN;
      }
      if (events) fds.push_back(pollfd{w.c->fd(), events, 0});
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (!silent || left.count() <= 0) break;
    ::poll(fds.data(), fds.size(), static_cast<int>(left.count()) + 1);
  }

  // What is still owed goes ahead of the abort frame (notify_peers()); the
  // posted operations are void now that the streams were read past them.
  owed_.assign(size_, std::string());
  std::vector<int> alive{rank_}, silent;
  std::vector<std::string> silent_names, other;
  for (auto& w : watch) {
    owed_[w.c->peer()] = w.out.substr(w.sent);
    w.c->clear();
    switch (w.answer) {
      case Answer::kProbe:
      case Answer::kAbort: alive.push_back(w.c->peer()); break;
      case Answer::kSilent:
        silent.push_back(w.c->peer());
        silent_names.push_back(str_cat(w.c->peer(), " (", w.c->address(), ")"));
        break;
      case Answer::kGoodbye:
        other.push_back(str_cat(w.c->name(), " had closed its communicator"));
        break;
      case Answer::kGone:
        other.push_back(str_cat(w.c->name(), " closed its connection (exited or crashed)"));
        break;
      case Answer::kGarbled:
        other.push_back(str_cat(w.c->name(), " sent bytes that are no frame of this group"));
        break;
      case Answer::kOtherCall:
        other.push_back(str_cat(w.c->name(), " had sent a message of ",
                                w.other_call.call().describe_with_seq(),
                                " where this rank expected one of its op #", call_.seq));
        break;
    }
  }
  std::sort(alive.begin(), alive.end());
  const std::string why = str_cat(silent.size() == 1 ? "it is" : "they are",
                                  " stopped, hung or unreachable (or outside any collective call)");
  const std::string who =
      str_cat(silent.size() == 1 ? "rank " : "ranks ", join(silent_names, ", "));
  std::string verdict;
  if (!silent.empty()) {
    verdict = alive.size() == 1
                  ? str_cat(who, " did not answer a timeout probe within ", format_duration(grace),
                            ": ", why)
                  : str_cat("ranks ", rank_list(alive), " answered a timeout probe, ", who,
                            " did not within ", format_duration(grace), ": ", why);
  } else if (alive.size() > 1) {
    verdict = str_cat("ranks ", rank_list(alive), " answered a timeout probe");
    if (other.empty())
      verdict += ": no rank is stopped (the call is slow, or the ranks' calls do not line up)";
  }
  if (!other.empty()) verdict += str_cat(verdict.empty() ? "" : "; ", join(other, "; "));
  return verdict;
}

void Transport::fail_aborted() {
  fail(ErrorKind::kBackend, str_cat(context(), ": the communicator was aborted (abort() called)"));
}

void Transport::fail(ErrorKind kind, const std::string& message) {
  // A socket error is often the echo of a peer's failure (it broke, told
  // us, and exited before we read the news): prefer its explanation.
  if (kind == ErrorKind::kNetwork && !broken_.load()) {
    for (auto& c : connections_) {
      WireHeader h;
      if (c && c->at_frame_boundary() && c->peek_header(&h) && h.magic == kWireMagic &&
          h.group == group_ && h.frame == static_cast<uint8_t>(FrameType::kAbort)) {
        fail_from_peer(*c, c->take_abort_frame());
      }
    }
  }
  fail_impl(kind, message, message);
}

void Transport::fail_impl(ErrorKind kind, const std::string& message, const std::string& forward) {
  if (!broken_.exchange(true) || broken_reason_.empty()) {
    broken_reason_ = message;
    COLLIE_LOG(kInfo) << "communicator broken: " << message;
    notify_peers(kind, forward);
  }
  throw_error(kind, message);
}

void Transport::notify_peers(ErrorKind kind, const std::string& text) {
  const std::string body = text.substr(0, kMaxAbortText);
  const WireHeader h =
      WireHeader::control(group_, FrameType::kAbort, static_cast<uint32_t>(body.size()), kind);
  struct Notice {
    Connection* c;
    std::vector<uint8_t> bytes;
    size_t sent = 0;
  };
  std::vector<Notice> notices;
  for (auto& c : connections_) {
    if (!c || c->finished()) continue;
    // A half-written message is finished with zeros so that the peer, which
    // is reading it, finds our header right after it.
    Notice n{c.get(), std::vector<uint8_t>(c->partial_send_remaining(), 0)};
    if (probed_) {  // a probe left these unsent (and cleared the operations)
      const std::string& owed = owed_[c->peer()];
      n.bytes.insert(n.bytes.begin(), owed.begin(), owed.end());
    }
    const auto* hp = reinterpret_cast<const uint8_t*>(&h);
    n.bytes.insert(n.bytes.end(), hp, hp + sizeof h);
    n.bytes.insert(n.bytes.end(), body.begin(), body.end());
    notices.push_back(std::move(n));
    c->clear();
  }
  const auto until = Clock::now() + kNoticeBudget;
  for (;;) {
    std::vector<pollfd> fds;
    for (auto& n : notices) {
      // A peer that is gone has nothing to be told.
      if (send_without_blocking(n.c->fd(), n.bytes.data(), n.bytes.size(), &n.sent))
        fds.push_back(pollfd{n.c->fd(), POLLOUT, 0});
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (fds.empty() || left.count() <= 0) break;
    ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
  }
  for (auto& c : connections_) {
    if (c) ::shutdown(c->fd(), SHUT_WR);
  }
}

}  // namespace collie
