#include "collectives/transport.h"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/base/check.h"
#include "runtime/base/error.h"
#include "runtime/base/logging.h"
#include "runtime/base/str_cat.h"

namespace collie {
namespace {

// Abort notices are best effort: a peer that does not read gets an EOF
// instead after this long.
constexpr auto kNoticeBudget = std::chrono::milliseconds(200);
constexpr size_t kMaxAbortText = 4096;
// How long a rank that saw a frame of a later call waits for a frame of its
// own call from another peer, which would name the real mismatch.
constexpr auto kEvidenceGrace = std::chrono::milliseconds(200);

[[noreturn]] void throw_error(ErrorKind kind, const std::string& message) {
  switch (kind) {
    case ErrorKind::kTimeout: throw TimeoutError(message);
    case ErrorKind::kBackend: throw BackendError(message);
    case ErrorKind::kNetwork: break;
  }
  throw NetworkError(message);
}

}  // namespace

Transport::Transport(int rank, int size, uint32_t group,
                     std::vector<std::unique_ptr<Connection>> connections,
                     std::chrono::microseconds spin)
    : rank_(rank),
      size_(size),
      group_(group),
      connections_(std::move(connections)),
      spin_(spin),
      send_base_(size, 0),
      recv_base_(size, 0),
      peeked_seq_(size, 0) {}

Transport::~Transport() {
  if (broken_.load()) return;
  // An orderly goodbye, so that a peer still finishing its last collective
  // does not take our closing socket for a crash.
  const WireHeader bye = WireHeader::control(group_, FrameType::kGoodbye, 0);
  for (auto& c : connections_) {
    if (!c || c->finished()) continue;
    ::send(c->fd(), &bye, sizeof bye, MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(c->fd(), SHUT_WR);
  }
}

Connection& Transport::conn(int peer) const {
  COLLIE_CHECK(peer >= 0 && peer < size_ && peer != rank_ && connections_[peer], "peer ", peer,
               " of rank ", rank_, " in a group of ", size_);
  return *connections_[peer];
}

void Transport::check_usable(std::string_view what) const {
  if (!broken_.load()) return;
  throw BackendError(str_cat(what, " on rank ", rank_,
                             ": the communicator is broken by an earlier error: ",
                             broken_reason_.empty() ? std::string("abort() was called")
                                                    : broken_reason_));
}

void Transport::begin(const CallInfo& call, const Deadline& deadline) {
  check_usable(call.describe_with_seq());
  call_ = call;
  deadline_ = &deadline;
  for (int p = 0; p < size_; ++p) {
    if (!connections_[p]) continue;
    COLLIE_CHECK(!connections_[p]->send_pending() && !connections_[p]->recv_pending(),
                 "operations left over from the previous call");
    send_base_[p] = connections_[p]->sends_completed();
    recv_base_[p] = connections_[p]->recvs_completed();
  }
}

void Transport::send(int peer, const void* data, size_t bytes) {
  COLLIE_CHECK_LE(bytes, size_t{UINT32_MAX}, "one message");
  conn(peer).post_send(WireHeader::data(group_, call_, static_cast<uint32_t>(bytes)), data);
}

void Transport::recv(int peer, void* data, size_t bytes) {
  COLLIE_CHECK_LE(bytes, size_t{UINT32_MAX}, "one message");
  conn(peer).post_recv(WireHeader::data(group_, call_, static_cast<uint32_t>(bytes)), data);
}

uint64_t Transport::sends_done(int peer) const { return conn(peer).sends_completed() - send_base_[peer]; }
uint64_t Transport::recvs_done(int peer) const { return conn(peer).recvs_completed() - recv_base_[peer]; }

std::string Transport::context() const { return str_cat(call_.describe_with_seq(), " on rank ", rank_); }

bool Transport::progress_all() {
  bool moved = false;
  for (auto& c : connections_) {
    if (!c) continue;
    if (c->send_pending()) {
      const uint64_t before = c->sends_completed();
      int err = 0;
      const long r = c->progress_send(&err);
      if (r < 0) {
        fail(ErrorKind::kNetwork, str_cat(context(), ": sending to ", c->name(),
                                          " failed: ", std::strerror(err),
                                          " (the peer process exited, crashed or aborted)"));
      }
      moved |= r > 0;
      completed_ += c->sends_completed() - before;
    }
    if (c->recv_pending()) {
      const uint64_t before = c->recvs_completed();
      int err = 0;
      RecvProblem problem = RecvProblem::kNone;
      const long r = c->progress_recv(&problem, &err);
      if (r < 0) on_recv_problem(*c, problem, err);
      moved |= r > 0;
      completed_ += c->recvs_completed() - before;
    }
  }
  return moved;
}

void Transport::progress() {
  const uint64_t start = completed_;
  auto spin_until = Clock::now() + spin_;
  for (;;) {
    if (aborted_.load()) fail_aborted();
    const bool moved = progress_all();
    bool pending = false;
    for (auto& c : connections_) pending |= c && (c->send_pending() || c->recv_pending());
    if (!pending) return;
    // Checked even while data moves: a call that is slow, not stuck, still
    // ends at its deadline.
    const auto now = Clock::now();
    if (now >= deadline_->when()) fail_timeout();
    if (completed_ != start) return;
    if (moved) {
      spin_until = now + spin_;
    } else if (now < spin_until) {
      // Spinning, but let another rank on this core run: on an
      // oversubscribed machine it is the one we are waiting for.
      sched_yield();
    } else {
      wait_for_io();
      spin_until = Clock::now() + spin_;
    }
  }
}

void Transport::wait_all() {
  for (;;) {
    bool pending = false;
    for (auto& c : connections_) pending |= c && (c->send_pending() || c->recv_pending());
    if (!pending) return;
    progress();
  }
}

void Transport::wait_for_io() {
  pollfd fds[64];
  Connection* owners[64];
  std::vector<pollfd> big_fds;
  std::vector<Connection*> big_owners;
  pollfd* pf = fds;
  Connection** po = owners;
  if (size_ > 64) {
    big_fds.resize(size_);
    big_owners.resize(size_);
    pf = big_fds.data();
    po = big_owners.data();
  }
  int n = 0;
  for (auto& c : connections_) {
    if (!c) continue;
    short events = 0;
    if (c->send_pending()) events |= POLLOUT;
    // Data on a connection where nothing is posted is looked at once per
    // call: a frame of a different call with our sequence number (or an
    // older one) is a mismatch we can report before anyone hangs.
    if (c->recv_pending() || (!c->finished() && peeked_seq_[c->peer()] != call_.seq)) {
      events |= POLLIN;
    }
    // Idle connections are watched for a hang-up: that is how a failure
    // anywhere in the group reaches a rank waiting on someone else.
    if (!c->finished()) events |= POLLRDHUP;
    if (events == 0) continue;
    pf[n] = pollfd{c->fd(), events, 0};
    po[n] = c.get();
    ++n;
  }
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_->when() - Clock::now());
  const int timeout_ms = static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, 60'000));
  const int r = ::poll(pf, n, timeout_ms);
  if (r <= 0) return;  // timeout or EINTR: the caller checks the deadline
  for (int i = 0; i < n; ++i) {
    if (po[i]->recv_pending() || po[i]->finished()) continue;
    if (pf[i].revents & POLLIN) on_unexpected_input(*po[i]);
    if (pf[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) on_hangup(*po[i]);
  }
}

void Transport::on_hangup(Connection& c) {
  std::string text;
  switch (c.absorb(&text)) {
    case RecvProblem::kAbort:
      fail_from_peer(c, text);
    case RecvProblem::kEof:
      fail(ErrorKind::kNetwork, str_cat(context(), ": the connection to ", c.name(),
                                        " closed unexpectedly (the peer process exited, "
                                        "crashed or aborted)"));
    default:
      break;  // a goodbye, or the rest has not arrived yet
  }
}

void Transport::on_unexpected_input(Connection& c) {
  WireHeader h;
  if (!c.peek_header(&h)) return;  // the rest of the header is on its way
  if (h.magic != kWireMagic || h.group != group_) fail_mismatch(c, h);
  switch (static_cast<FrameType>(h.frame)) {
    case FrameType::kAbort:
      fail_from_peer(c, c.take_abort_frame());
    case FrameType::kGoodbye:
      break;
    case FrameType::kData:
      if (h.seq < call_.seq || (h.seq == call_.seq && !(h.call() == call_))) fail_mismatch(c, h);
      break;
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
        if (!other || other.get() == &c || !other->at_frame_boundary() || other->finished()) continue;
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
      if (h.magic == kWireMagic && h.group == group_ && h.call() == call_) {
        fail(ErrorKind::kBackend,
             str_cat(context(), ": ", c.name(), " sent a ", h.payload_bytes,
                     "-byte message where a different size was expected: are the "
                     "CommunicatorOptions (segment_bytes, small_message_bytes) the same on "
                     "every rank?"));
      }
      fail_mismatch(c, h);
    case RecvProblem::kAbort:
      fail_from_peer(c, c.read_abort_text());
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
    case RecvProblem::kNone:
      break;
  }
  fail(ErrorKind::kNetwork,
       str_cat(context(), ": receiving from ", c.name(), " failed: ", std::strerror(err),
               " (the peer process exited, crashed or aborted)"));
}

void Transport::fail_from_peer(Connection& c, const std::string& text) {
  const auto kind = static_cast<ErrorKind>(c.received_header().error_kind);
  fail_impl(kind, str_cat(context(), ": ", c.name(), " failed: ", text), text);
}

void Transport::fail_timeout() {
  std::vector<std::string> waiting;
  for (auto& c : connections_) {
    if (!c) continue;
    if (c->recv_pending()) {
      waiting.push_back(str_cat("receive from ", c->name(), " (", c->recvs_queued(),
                                " message(s) outstanding)"));
    }
    if (c->send_pending()) {
      waiting.push_back(str_cat("send to ", c->name(), " (", c->sends_queued(),
                                " message(s) outstanding)"));
    }
  }
  fail(ErrorKind::kTimeout, str_cat(context(), " timed out ", deadline_->describe(),
                                    "; still waiting to ", join(waiting, ", ")));
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
      while (n.sent < n.bytes.size()) {
        const ssize_t r = ::send(n.c->fd(), n.bytes.data() + n.sent, n.bytes.size() - n.sent,
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r > 0) {
          n.sent += static_cast<size_t>(r);
        } else if (r < 0 && errno == EINTR) {
          continue;
        } else {
          if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            fds.push_back(pollfd{n.c->fd(), POLLOUT, 0});
          } else {
            n.sent = n.bytes.size();  // the peer is gone; nothing to tell
          }
          break;
        }
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (fds.empty() || left.count() <= 0) break;
    ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
  }
  for (auto& c : connections_) {
    if (c) ::shutdown(c->fd(), SHUT_WR);
  }
}

void Transport::abort() {
  aborted_.store(true);
  broken_.store(true);
  for (auto& c : connections_) {
    if (c) ::shutdown(c->fd(), SHUT_RDWR);
  }
}

}  // namespace collie
