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
      peeked_seq_(size, 0),
      inbox_(size),
      p2p_sent_(size, 0),
      p2p_blocked_(size, UINT64_MAX) {
  for (auto& c : connections_)
    if (c) c->set_p2p_sink(&inbox_);
}

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
  throw BackendError(
      str_cat(what, " on rank ", rank_, ": the communicator is broken by an earlier error: ",
              broken_reason_.empty() ? std::string("abort() was called") : broken_reason_));
}

void Transport::begin(const CallInfo& call, const Deadline& deadline) {
  check_usable(call.describe_with_seq());
  call_ = call;
  p2p_context_.clear();
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

uint64_t Transport::sends_done(int peer) const {
  return conn(peer).sends_completed() - send_base_[peer];
}
uint64_t Transport::recvs_done(int peer) const {
  return conn(peer).recvs_completed() - recv_base_[peer];
}

std::string Transport::context() const {
  if (!p2p_context_.empty()) return str_cat(p2p_context_, " on rank ", rank_);
  return str_cat(call_.describe_with_seq(), " on rank ", rank_);
}

bool Transport::pending() const {
  if (inbox_.has_pending()) return true;
  for (auto& c : connections_)
    if (c && (c->send_pending() || c->recv_pending())) return true;
  return false;
}

bool Transport::progress_all() {
  bool moved = false;
  for (auto& c : connections_) {
    if (!c) continue;
    if (c->send_pending()) {
      const uint64_t before = c->sends_completed();
      int err = 0;
      const long r = c->progress_send(&err);
      if (r < 0) {
        fail(ErrorKind::kNetwork,
             str_cat(context(), ": sending to ", c->name(), " failed: ", std::strerror(err),
                     " (the peer process exited, crashed or aborted)"));
      }
      moved |= r > 0;
      completed_ += c->sends_completed() - before;
    }
    const uint64_t p2p_before = inbox_.completed();
    if (c->recv_pending()) {
      const uint64_t before = c->recvs_completed();
      int err = 0;
      RecvProblem problem = RecvProblem::kNone;
      const long r = c->progress_recv(&problem, &err);
      if (r < 0) on_recv_problem(*c, problem, err);
      moved |= r > 0;
      completed_ += c->recvs_completed() - before;
    } else if (wants_p2p(*c)) {
      moved |= progress_p2p_reads(*c);
    }
    completed_ += inbox_.completed() - p2p_before;
  }
  return moved;
}

void Transport::progress() {
  const uint64_t start = completed_;
  const auto entered = Clock::now();
  const auto spin = spin_for_this_wait(entered);
  auto spin_until = entered + spin;
  for (;;) {
    if (aborted_.load()) fail_aborted();
    const bool moved = progress_all();
    if (!pending()) return;
    // Checked even while data moves: a call that is slow, not stuck, still
    // ends at its deadline.
    const auto now = Clock::now();
    if (now >= deadline_->when()) fail_timeout();
    if (completed_ != start) {
      if (spin.count() > 0) spin_succeeded();
      return;
    }
    if (moved) {
      spin_until = now + spin;
    } else if (now < spin_until) {
      // Spinning, but let another rank on this core run: on an
      // oversubscribed machine it is the one we are waiting for. A yield
      // that comes back late gave the core to something that runs whole
      // time slices (another program): spinning is hurting, stop it.
      sched_yield();
      if (Clock::now() - now > kLongYield) {
        spin_failed();
        spin_until = now;
      }
    } else {
      // A spin that simply ran out (the peer is late: it computes, or waits
      // for someone else) is not held against spinning; only a yield that
      // came back late is (above).
      wait_for_io();
      spin_until = Clock::now() + spin;
    }
  }
}

// Adaptive spinning. A spin pays when the peer is running and answers
// within microseconds. When the core is shared with another program, the
// spinner's sched_yield() hands that program a whole time slice while the
// spinner's peer may be waiting behind yet another program on the other
// core: on a busy 2-core machine a fixed spin turned 25 us calls into 1-3 ms
// ones (docs/algorithms.md, "Spinning"). So a yield that returns later than
// kLongYield stops spinning for a while: 2 ms after the first such yield,
// twice as long after each further one, up to 1 s; a run of kSpinStreak
// waits completed while spinning halves the pause again. A spin that merely
// runs out (the peer is late) changes nothing: it wastes at most `spin` of
// CPU and never a time slice. Pauses are timed, not counted in waits, so a
// hiccup at start-up (ranks still arriving) costs milliseconds of not
// spinning, not the next thousand calls; a loaded machine risks one late
// yield a second.
std::chrono::microseconds Transport::spin_for_this_wait(Clock::time_point now) const {
  if (spin_.count() == 0 || now < spin_quiet_until_) return std::chrono::microseconds(0);
  return spin_;
}

void Transport::spin_failed() {
  spin_streak_ = 0;
  spin_quiet_until_ = Clock::now() + spin_penalty_;
  spin_penalty_ = std::min(spin_penalty_ * 2, kMaxSpinPenalty);
}

void Transport::spin_succeeded() {
  if (++spin_streak_ < kSpinStreak) return;
  spin_streak_ = 0;
  spin_penalty_ = std::max(spin_penalty_ / 2, kMinSpinPenalty);
}

void Transport::wait_all() {
  while (pending()) progress();
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
    if (c->recv_pending() || wants_p2p(*c) ||
        (!c->finished() && peeked_seq_[c->peer()] != call_.seq)) {
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
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline_->when() - Clock::now());
  const int timeout_ms = static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, 60'000));
  const int r = ::poll(pf, n, timeout_ms);
  if (r <= 0) return;  // timeout or EINTR: the caller checks the deadline
  for (int i = 0; i < n; ++i) {
    // progress_all() reads these next: mid-frame, or wanted for p2p.
    if (po[i]->recv_pending() || po[i]->finished() || wants_p2p(*po[i])) continue;
    if (pf[i].revents & POLLIN) on_unexpected_input(*po[i]);
    if (pf[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) on_hangup(*po[i]);
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
