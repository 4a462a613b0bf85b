#include "collie/collectives/transport/transport.h"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"

namespace collie {
namespace {

// A spin-wait hint: lets the sibling hyperthread run and saves power.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

Transport::Transport(int rank, int size, uint32_t group,
                     std::vector<std::unique_ptr<Connection>> connections,
                     std::unique_ptr<PeerLinker> linker, const TransportOptions& options)
    : rank_(rank),
      size_(size),
      group_(group),
      group_name_(options.group_name),
      connections_(std::move(connections)),
      linker_(std::move(linker)),
      spin_(options.spin),
      busy_poll_(options.busy_poll),
      report_after_(options.report_after),
      futex_wait_(options.futex_wait),
      send_base_(size, 0),
      recv_base_(size, 0),
      peeked_seq_(size, 0),
      inbox_(size),
      p2p_sent_(size, 0),
      p2p_until_(size, 0),
      p2p_blocked_(size, UINT64_MAX) {
  for (auto& c : connections_) {
    if (!c) continue;
    c->set_p2p_sink(&inbox_);
    c->set_futex_wait(futex_wait_);
  }
}

Transport::~Transport() {
  if (broken_.load()) return;
  // An orderly goodbye, so that a peer still finishing its last collective
  // does not take our closing socket for a crash.
  for (auto& c : connections_) {
    if (c) c->say_goodbye(group_);
  }
}

Connection& Transport::conn(int peer) const {
  COLLIE_CHECK(peer >= 0 && peer < size_ && peer != rank_ && connections_[peer], "peer ", peer,
               " of rank ", rank_, " in a group of ", size_);
  return *connections_[peer];
}

Connection& Transport::link_slow(int peer) {
  COLLIE_CHECK(peer >= 0 && peer < size_ && peer != rank_, "peer ", peer, " of rank ", rank_,
               " in a group of ", size_);
  auto& c = connections_[peer];
  if (c && c->connected()) return *c;
  COLLIE_CHECK(linker_ != nullptr, "no connection to peer ", peer);
  if (!c) {
    c = std::make_unique<Connection>(nullptr, peer, linker_->address_of(peer));
    c->set_p2p_sink(&inbox_);
    c->set_futex_wait(futex_wait_);
    if (peer > rank_) ++awaiting_;
  }
  if (peer < rank_) {
    // The connecting side. A failure here breaks the group like any other.
    std::string address;
    try {
      auto channel = linker_->connect(peer, *deadline_, &address);
      c->attach(std::move(channel), address);
    } catch (const TimeoutError& e) {
      note_failed_peer(peer);
      fail(ErrorKind::kTimeout, str_cat(context(), ": ", e.what()),
           Blame{FailureCause::kTimeout, {culprit(*c)}});
    } catch (const Error& e) {
      note_failed_peer(peer);
      fail(ErrorKind::kNetwork, str_cat(context(), ": ", e.what()),
           Blame{FailureCause::kNetwork, {culprit(*c)}});
    }
  }
  return *c;
}

void Transport::accept_arrivals() {
  std::vector<PeerLinker::Arrival> arrivals;
  try {
    arrivals = linker_->accept_ready(*deadline_);
  } catch (const TimeoutError& e) {
    fail(ErrorKind::kTimeout, str_cat(context(), ": ", e.what()));
  } catch (const Error& e) {
    fail(ErrorKind::kNetwork, str_cat(context(), ": ", e.what()));
  }
  for (auto& a : arrivals) {
    auto& c = connections_[a.peer];
    if (!c) {
      c = std::make_unique<Connection>(std::move(a.channel), a.peer, a.address);
      c->set_p2p_sink(&inbox_);
      c->set_futex_wait(futex_wait_);
    } else {
      c->attach(std::move(a.channel), a.address);
      --awaiting_;
    }
  }
}

ChannelKind Transport::channel_kind(int peer) {
  Connection& c = link(peer);
  // The accepting side waits for the peer to connect; nothing is posted on
  // the connection, so progress() would return at once: wait here, under
  // the same deadline, abort and slow-wait reports.
  arm_report();
  while (!c.connected()) {
    if (aborted_.load()) fail_aborted();
    progress_all();
    if (c.connected()) break;
    const auto now = Clock::now();
    if (now >= deadline_->when()) fail_timeout();
    if (now >= next_report_) report_slow_wait();
    wait_for_io();
  }
  return c.kind();
}

bool Transport::all_peers_readable() const {
  for (int p = 0; p < size(); ++p) {
    if (p != rank() && peer_pid(p) <= 0) return false;
  }
  return true;
}

pid_t Transport::peer_pid(int peer) const {
  const auto& c = connections_[world(peer)];
  return c && c->connected() ? c->peer_pid() : 0;
}

int Transport::connected_peers(ChannelKind kind) const {
  int n = 0;
  for (auto& c : connections_) n += c && c->connected() && c->kind() == kind;
  return n;
}

void Transport::check_usable(std::string_view what) const {
  if (!broken_.load()) return;
  throw BackendError(
      str_cat(what, " on rank ", rank_, ": the communicator is broken by an earlier error: ",
              broken_reason_.empty() ? std::string("abort() was called") : broken_reason_));
}

void Transport::begin(const CallInfo& call, const Deadline& deadline, bool linking) {
  if (broken_.load()) check_usable(call.describe_with_seq());  // formatted only to throw
  call_ = call;
  linking_ = linking;
  in_p2p_ = false;
  p2p_ops_ = {};
  deadline_ = &deadline;
  next_report_ = {};  // set by the first timed wait (arm_report)
  COLLIE_CHECK(members_.empty(), "a call begun inside a sub-group");
  rebase();
}

void Transport::rebase(bool check) {
  for (int p = 0; p < size_; ++p) {
    if (!connections_[p]) continue;
    const Connection& c = *connections_[p];
    COLLIE_CHECK(!check || (!call_sends_pending(c) && !c.recv_pending()),
                 "operations left over from the previous call or step");
    // Point-to-point sends still queued go out first: not this call's.
    send_base_[p] = c.sends_completed() + p2p_sends_queued(c);
    recv_base_[p] = connections_[p]->recvs_completed();
  }
}

Transport::SubgroupScope::SubgroupScope(Transport& t, std::span<const int> members)
    : t_(t), outer_members_(t.members_), outer_rank_(t.sub_rank_) {
  const auto me = std::find(members.begin(), members.end(), t.rank_);
  COLLIE_CHECK(me != members.end(), "rank ", t.rank_, " is not in its sub-group");
  t.rebase();
  t.members_.assign(members.begin(), members.end());
  t.sub_rank_ = static_cast<int>(me - members.begin());
}

Transport::SubgroupScope::~SubgroupScope() {
  t_.members_ = std::move(outer_members_);
  t_.sub_rank_ = outer_rank_;
  // No check here (a step that threw may leave operations posted): the next
  // step or call checks.
  t_.rebase(false);
}

void Transport::send(int peer, const void* data, size_t bytes) {
  COLLIE_CHECK_LE(bytes, size_t{UINT32_MAX}, "one message");
  Connection& c = link(world(peer));
  const bool first = !c.send_pending();
  c.post_send(WireHeader::data(group_, call_, static_cast<uint32_t>(bytes)), data);
  // Nothing ahead of it: it starts now, not at the next progress(). A small
  // message is then on its way while the caller posts its receives and
  // starts to wait, instead of after that: the bookkeeping overlaps the
  // peer's wait instead of adding to it.
  if (first) push_sends(c);
}

bool Transport::push_sends(Connection& c) {
  const uint64_t before = c.sends_completed();
  int err = 0;
  const long r = c.progress_send(&err);
  if (r < 0) {
    // abort() shuts the sockets: the write it broke reports the abort, not
    // a broken pipe (a send posted after abort() starts here, before any
    // progress() could look).
    if (aborted_.load()) fail_aborted();
    // A write that fails (EPIPE, ECONNRESET) says the same as a read that
    // finds the connection closed: the peer is gone. Which of the two a
    // survivor sees first is a race, so both blame it alike.
    fail(ErrorKind::kNetwork,
         str_cat(context(), ": sending to ", c.name(), " failed: ", std::strerror(err),
                 " (the peer process exited, crashed or aborted)"),
         Blame{FailureCause::kPeerClosed, {culprit(c)}});
  }
  completed_ += c.sends_completed() - before;
  return r > 0;
}

void Transport::exchange(int peer, const void* out, void* in, size_t bytes) {
  Connection& c = link(world(peer));
  if (bytes > kExpressBytes || c.kind() != ChannelKind::kShm || !c.idle() || broken_.load()) {
    send(peer, out, bytes);
    recv(peer, in, bytes);
    wait_all();
    return;
  }
  count(express_tried_);
  const WireHeader header = WireHeader::data(group_, call_, static_cast<uint32_t>(bytes));
  const bool sent = c.send_now(header, out);
  if (sent) ++completed_;
  // The peer's frame: looked for while nothing of ours is left to write,
  // busy-polling is allowed (a core each), and the spin lasts.
  const int polls = sent && busy_polling() ? kExpressPolls : (sent ? 1 : 0);
  for (int i = 0; i < polls; ++i) {
    if (aborted_.load()) fail_aborted();
    const int r = c.take_now(header, in);
    if (r > 0) {
      ++completed_;
      count(express_taken_);
      return;
    }
    if (r < 0) break;
    cpu_relax();
  }
  count(express_handed_);
  c.post_recv(header, in);
  wait_all();
}

void Transport::recv(int peer, void* data, size_t bytes) {
  COLLIE_CHECK_LE(bytes, size_t{UINT32_MAX}, "one message");
  link(world(peer)).post_recv(WireHeader::data(group_, call_, static_cast<uint32_t>(bytes)), data);
}

void Transport::recv_reduce(int peer, void* out, const void* in, size_t count, DataType dtype,
                            ReduceOp op) {
  const size_t bytes = count * element_size(dtype);
  COLLIE_CHECK_LE(bytes, size_t{UINT32_MAX}, "one message");
  link(world(peer))
      .post_recv_reduce(WireHeader::data(group_, call_, static_cast<uint32_t>(bytes)), out, in,
                        dtype, op);
}

uint64_t Transport::sends_done(int peer) const {
  peer = world(peer);
  if (!connections_[peer]) return 0;
  return conn(peer).sends_completed() - send_base_[peer];
}
uint64_t Transport::recvs_done(int peer) const {
  peer = world(peer);
  if (!connections_[peer]) return 0;
  return conn(peer).recvs_completed() - recv_base_[peer];
}

std::string Transport::context() const {
  if (in_p2p_) return str_cat(describe_p2p(), " on rank ", rank_);
  return str_cat(call_.describe_with_seq(), " on rank ", rank_);
}

bool Transport::pending() const {
  if (waiting_ != nullptr) return !p2p_done(*waiting_);
  for (auto& c : connections_)
    if (c && (c->recv_pending() || (c->send_pending() && call_sends_pending(*c)))) return true;
  return false;
}

bool Transport::progress_all() {
  bool moved = false;
  if (awaiting_ > 0) accept_arrivals();
  for (auto& c : connections_) {
    if (!c || !c->connected()) continue;
    if (c->send_pending()) moved |= push_sends(*c);
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
  // First a few polls without reading the clock, when busy-polling is on
  // and not paused: a read costs as much as polling every connection once
  // (25 ns on the 2-core VMs), and a small message that is already there,
  // or arrives within a microsecond, is then taken with none when it ends
  // the call. Only empty polls repeat here: once data moves, the loop below
  // checks the deadline after every step.
  if (busy_polling()) {
    for (int i = 0; i < kClocklessPolls; ++i) {
      if (aborted_.load()) fail_aborted();
      const bool moved = progress_all();
      if (!pending()) return;
      if (completed_ != start) {
        // A step of a call that goes on: its deadline starts now at the
        // latest, and is checked as after every step below (a call that
        // is slow, not stuck, still ends at its deadline).
        spin_succeeded();
        arm_report();
        if (Clock::now() >= deadline_->when()) fail_timeout();
        return;
      }
      if (moved) break;
      cpu_relax();
    }
  }
  arm_report();
  const auto entered = Clock::now();
  const auto spin = spin_for_this_wait(entered);
  spin_quiet_ = spin_.count() > 0 && spin.count() == 0;
  auto spin_until = entered + spin;
  const auto busy_poll = std::min(busy_poll_, spin);
  auto poll_until = entered + busy_poll;
  for (;;) {
    if (aborted_.load()) fail_aborted();
    const bool moved = progress_all();
    if (!pending()) return;
    // Checked even while data moves: a call that is slow, not stuck, still
    // ends at its deadline.
    const auto now = Clock::now();
    if (now >= deadline_->when()) fail_timeout();
    if (now >= next_report_) report_slow_wait();
    if (completed_ != start) {
      if (spin.count() > 0) spin_succeeded();
      return;
    }
    if (moved) {
      spin_until = now + spin;
      poll_until = now + busy_poll;
    } else if (now < poll_until) {
      cpu_relax();
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
      poll_until = Clock::now() + busy_poll;
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
  spin_quiet_ = true;
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
  std::vector<PollEntry> entries;
  entries.reserve(connections_.size());
  for (auto& c : connections_) {
    if (!c || !c->connected()) continue;
    // Data on a connection where nothing is posted is looked at once per
    // call: a frame of a different call with our sequence number (or an
    // older one) is a mismatch we can report before anyone hangs. Idle
    // connections are watched for a hang-up either way (arm() always asks
    // for it): that is how a failure anywhere in the group reaches a rank
    // waiting on someone else. Connections a p2p receive may come from are
    // read too.
    const bool read = c->recv_pending() || wants_p2p(*c) ||
                      (!c->finished() && peeked_seq_[c->peer()] != call_.seq);
    if (!read && !c->send_pending() && c->finished()) continue;
    entries.push_back(PollEntry{c.get(), read, c->send_pending()});
  }
  // Listeners too, always: a peer connecting to us (its first use of this
  // connection) waits for our half of the handshake.
  std::vector<int> listen_fds;
  if (linker_) linker_->poll_fds(&listen_fds);
  const auto wake = std::min(deadline_->when(), next_report_);
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wake - Clock::now());
  const int timeout_ms = static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, 60'000));
  std::vector<pollfd> lf;
  for (int fd : listen_fds) lf.push_back(pollfd{fd, POLLIN, 0});
  const int r = poll_connections(entries, timeout_ms, lf);
  bool arrived = false;
  for (auto& p : lf) arrived |= p.revents != 0;
  if (arrived) accept_arrivals();
  if (r < 0) return;  // EINTR: the caller checks the deadline
  // A shared-memory channel may be ready without poll() reporting it.
  const auto looked_at = [&](const PollEntry& e) {
    const Connection& c = *e.c;
    // progress_all() reads these next: mid-frame, or wanted for p2p.
    if (c.recv_pending() || c.finished() || !c.connected() || wants_p2p(c)) return false;
    return (e.ready & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) != 0;
  };
  if (std::none_of(entries.begin(), entries.end(), looked_at)) return;
  // What arrived for this call first: a peer that finished this call with
  // us, went on and failed in the next one (its abort and hang-up arrive
  // while we still wait for a third rank's data that is there too) must not
  // fail a call that can complete. The next call finds the failure.
  progress_all();
  if (!pending()) return;
  for (auto& e : entries) {
    if (!looked_at(e)) continue;
    Connection& c = *e.c;
    if (e.ready & POLLIN) on_unexpected_input(c);
    if (e.ready & (POLLRDHUP | POLLHUP | POLLERR)) on_hangup(c);
  }
}

void Transport::arm_report() {
  // Starts the deadline's clock if nothing did (Deadline::from_first_use).
  if (next_report_ == Clock::time_point{}) next_report_ = deadline_->start() + report_after_;
}

void Transport::report_slow_wait() {
  // Like the store client's slow-wait lines: first after report_after, then
  // each time the wait doubles, at most every 5 minutes apart.
  const auto now = Clock::now();
  const auto waited = now - deadline_->start();
  const std::vector<std::string> waiting = waiting_for(nullptr);
  COLLIE_LOG(kWarn) << context() << ": still waiting to "
                    << (waiting.empty() ? std::string("finish") : join(waiting, ", ")) << " after "
                    << format_duration(waited) << " (deadline in "
                    << format_duration(deadline_->when() - now) << ", limit "
                    << format_duration(deadline_->limit()) << ")";
  const auto step = std::min<Clock::duration>(std::max<Clock::duration>(waited, report_after_),
                                              std::chrono::minutes(5));
  next_report_ = now + step;
}

void Transport::note_failed_peer(int peer, bool closed) {
  std::lock_guard lock(failed_mu_);
  auto& list = closed ? closed_peers_ : failed_peers_;
  auto it = std::lower_bound(list.begin(), list.end(), peer);
  if (it == list.end() || *it != peer) list.insert(it, peer);
}

std::vector<int> Transport::failed_peers(Clock::time_point until) {
  std::vector<int> closed;
  {
    std::lock_guard lock(failed_mu_);
    for (int p : closed_peers_)
      if (!std::binary_search(failed_peers_.begin(), failed_peers_.end(), p)) closed.push_back(p);
  }
  if (!closed.empty()) find_dead_peers(closed, until);
  std::lock_guard lock(failed_mu_);
  return failed_peers_;
}

std::vector<int> Transport::find_dead_peers(const std::vector<int>& peers,
                                            Clock::time_point until) {
  if (!linker_) return {};
  std::vector<int> dead = linker_->refusing(peers, until);
  for (int p : dead) note_failed_peer(p);
  return dead;
}

void Transport::abort() {
  aborted_.store(true);
  broken_.store(true);
  for (auto& c : connections_) {
    if (c) c->shutdown_both();
  }
}

}  // namespace collie
