// Transport's posting and progress (transport.h): construction and lazy
// connections, begin() and the sub-group scopes (the numbering is
// PeerNumbering's, peer_numbering.h), the posted and express sends and
// receives, and the progress loop with its spin (the policy is SpinPolicy's,
// waiting.h). This is the hot path: everything here calls concrete types
// (Connection, SpinPolicy, FailureState's flags, the inline accessors of
// P2PState and PeerNumbering), and progress() sits next to progress_all()
// so that the compiler can inline it.
// Invariants: the completion counters count from begin() (or the open
// sub-group scope), and point-to-point sends queued ahead of a call's are
// not the call's (rebase()); the sleep once the spin is over is
// wait_for_io() (transport_wait.cc), every error goes through fail()
// (transport_failure.cc).
#include "collie/collectives/transport/transport.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"

namespace collie {

Transport::Transport(int rank, int size, uint32_t group,
                     std::vector<std::unique_ptr<Connection>> connections,
                     std::unique_ptr<PeerLinker> linker, const TransportOptions& options)
    : numbering_(rank, size),
      group_(group),
      connections_(std::move(connections)),
      linker_(std::move(linker)),
      report_after_(options.report_after),
      futex_wait_(options.futex_wait),
      spin_(options.spin, options.busy_poll, options.home_cpu),
      send_base_(size, 0),
      recv_base_(size, 0),
      peeked_seq_(size, 0),
      failure_(rank, size, group, options.group_name),
      single_copy_bytes_(options.p2p_single_copy_bytes),
      p2p_(size) {
  p2p_.inbox().set_copy_peers(&copy_peers_);
  for (auto& c : connections_) {
    if (!c) continue;
    c->set_p2p_sink(&p2p_.inbox());
    c->set_futex_wait(futex_wait_);
  }
}

Transport::~Transport() {
  if (failure_.broken()) return;
  // An orderly goodbye, so that a peer still finishing its last collective
  // does not take our closing socket for a crash.
  for (auto& c : connections_) {
    if (c) c->say_goodbye(group_);
  }
}

Connection& Transport::conn(int peer) const {
  COLLIE_CHECK(peer >= 0 && peer < world_size() && peer != world_rank() && connections_[peer],
               "peer ", peer, " of rank ", world_rank(), " in a group of ", world_size());
  return *connections_[peer];
}

Connection& Transport::link_slow(int peer) {
  COLLIE_CHECK(peer >= 0 && peer < world_size() && peer != world_rank(), "peer ", peer, " of rank ",
               world_rank(), " in a group of ", world_size());
  auto& c = connections_[peer];
  if (c && c->connected()) return *c;
  COLLIE_CHECK(linker_ != nullptr, "no connection to peer ", peer);
  if (!c) {
    c = std::make_unique<Connection>(nullptr, peer, linker_->address_of(peer));
    c->set_p2p_sink(&p2p_.inbox());
    c->set_futex_wait(futex_wait_);
    if (peer > world_rank()) ++awaiting_;
  }
  if (peer < world_rank()) {
    // The connecting side. A failure here breaks the group like any other.
    std::string address;
    try {
      auto channel = linker_->connect(peer, *deadline_, &address);
      c->attach(std::move(channel), address);
    } catch (const TimeoutError& e) {
      failure_.note_failed_peer(peer);
      fail(ErrorKind::kTimeout, str_cat(context(), ": ", e.what()),
           Blame{FailureCause::kTimeout, {culprit_of(*c)}});
    } catch (const Error& e) {
      failure_.note_failed_peer(peer);
      fail(ErrorKind::kNetwork, str_cat(context(), ": ", e.what()),
           Blame{FailureCause::kNetwork, {culprit_of(*c)}});
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
      c->set_p2p_sink(&p2p_.inbox());
      c->set_futex_wait(futex_wait_);
    } else {
      c->attach(std::move(a.channel), a.address);
      --awaiting_;
    }
  }
}

bool Transport::all_peers_readable() const {
  for (int p = 0; p < size(); ++p) {
    if (p != rank() && peer_pid(p) <= 0) return false;
  }
  return true;
}

pid_t Transport::CopyPeers::copy_pid(int peer) const {
  const auto& c = t_->connections_[peer];
  return c && c->connected() ? c->peer_pid() : 0;
}

void Transport::CopyPeers::wake(int peer) {
  if (const auto& c = t_->connections_[peer]) c->wake_peer();
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
  if (!failure_.broken()) return;
  const std::string& reason = failure_.reason();
  throw BackendError(str_cat(what, " on rank ", world_rank(),
                             ": the communicator is broken by an earlier error: ",
                             reason.empty() ? std::string("abort() was called") : reason));
}

void Transport::begin(const CallInfo& call, const Deadline& deadline, bool linking) {
  if (failure_.broken()) check_usable(call.describe_with_seq());  // formatted only to throw
  call_ = call;
  linking_ = linking;
  p2p_.leave();
  deadline_ = &deadline;
  next_report_ = {};  // set by the first timed wait (arm_report)
  COLLIE_CHECK(!numbering_.in_subgroup(), "a call begun inside a sub-group");
  rebase();
}

void Transport::rebase(bool check) {
  for (int p = 0; p < world_size(); ++p) {
    if (!connections_[p]) continue;
    const Connection& c = *connections_[p];
    COLLIE_CHECK(!check || (!p2p_.call_sends_pending(c) && !c.recv_pending()),
                 "operations left over from the previous call or step");
    // Point-to-point sends still queued go out first: not this call's.
    send_base_[p] = c.sends_completed() + p2p_.sends_queued(c);
    recv_base_[p] = connections_[p]->recvs_completed();
  }
}

Transport::SubgroupScope::SubgroupScope(Transport& t, std::span<const int> members)
    : t_(t), outer_(t.numbering_.save()) {
  const int self = t.numbering_.find_self(members);
  t.rebase();
  t.numbering_.enter(members, self);
}

Transport::SubgroupScope::~SubgroupScope() {
  t_.numbering_.restore(std::move(outer_));
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
    if (failure_.aborted()) fail_aborted();
    // A write that fails (EPIPE, ECONNRESET) says the same as a read that
    // finds the connection closed: the peer is gone. Which of the two a
    // survivor sees first is a race, so both blame it alike.
    fail(ErrorKind::kNetwork,
         str_cat(context(), ": sending to ", c.name(), " failed: ", std::strerror(err),
                 " (the peer process exited, crashed or aborted)"),
         Blame{FailureCause::kPeerClosed, {culprit_of(c)}});
  }
  completed_ += c.sends_completed() - before;
  return r > 0;
}

bool Transport::express(const Connection& c, size_t bytes) const {
  return bytes <= kExpressBytes && c.kind() == ChannelKind::kShm && c.idle() && !failure_.broken();
}

void Transport::exchange(int peer, const void* out, void* in, size_t bytes) {
  Connection& c = link(world(peer));
  if (!express(c, bytes)) {
    send(peer, out, bytes);
    recv(peer, in, bytes);
    wait_all();
    return;
  }
  const WireHeader header = WireHeader::data(group_, call_, static_cast<uint32_t>(bytes));
  const bool sent = c.send_now(header, out);
  if (sent) ++completed_;
  // The peer's frame: looked for while nothing of ours is left to write.
  take_express(c, header, in, sent);
}

void Transport::send_one(int peer, const void* data, size_t bytes) {
  Connection& c = link(world(peer));
  if (!express(c, bytes)) {
    send(peer, data, bytes);
    wait_all();
    return;
  }
  if (c.send_now(WireHeader::data(group_, call_, static_cast<uint32_t>(bytes)), data)) {
    ++completed_;
    return;
  }
  wait_all();  // posted with what went: progress() finishes it
}

void Transport::recv_one(int peer, void* data, size_t bytes) {
  Connection& c = link(world(peer));
  if (!express(c, bytes)) {
    recv(peer, data, bytes);
    wait_all();
    return;
  }
  take_express(c, WireHeader::data(group_, call_, static_cast<uint32_t>(bytes)), data, true);
}

void Transport::take_express(Connection& c, const WireHeader& header, void* in, bool spin) {
  count(express_tried_);
  // Busy-polling is allowed (a core each) and the spin lasts: looked for
  // in a short spin; otherwise (or when our own send is still queued) the
  // receive is posted at once.
  const int polls = spin && spin_.busy_polling() ? kExpressPolls : (spin ? 1 : 0);
  for (int i = 0; i < polls; ++i) {
    if (failure_.aborted()) fail_aborted();
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
  if (p2p_.running()) return str_cat(p2p_.describe(), " on rank ", world_rank());
  return str_cat(call_.describe_with_seq(), " on rank ", world_rank());
}

bool Transport::pending() const {
  if (const P2PRequest* waiting = p2p_.waiting()) return !p2p_done(*waiting);
  for (auto& c : connections_)
    if (c && (c->recv_pending() || (c->send_pending() && p2p_.call_sends_pending(*c)))) return true;
  return false;
}

bool Transport::progress_all() {
  bool moved = false;
  if (awaiting_ > 0) accept_arrivals();
  for (auto& c : connections_) {
    if (!c || !c->connected()) continue;
    if (c->send_pending()) moved |= push_sends(*c);
    const uint64_t p2p_before = p2p_.inbox().completed();
    if (c->recv_pending()) {
      const uint64_t before = c->recvs_completed();
      int err = 0;
      RecvProblem problem = RecvProblem::kNone;
      const long r = c->progress_recv(&problem, &err);
      if (r < 0) on_recv_problem(*c, problem, err);
      moved |= r > 0;
      completed_ += c->recvs_completed() - before;
    } else if (p2p_.wants(*c, call_.seq)) {
      moved |= progress_p2p_reads(*c, /*wanted_only=*/true);
    }
    completed_ += p2p_.inbox().completed() - p2p_before;
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
  if (spin_.busy_polling()) {
    for (int i = 0; i < SpinPolicy::kClocklessPolls; ++i) {
      if (failure_.aborted()) fail_aborted();
      const bool moved = progress_all();
      if (!pending()) {
        spin_.note_wait(false);
        return;
      }
      if (completed_ != start) {
        // A step of a call that goes on: its deadline starts now at the
        // latest, and is checked as after every step below (a call that
        // is slow, not stuck, still ends at its deadline).
        spin_.succeeded();
        spin_.note_wait(false);
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
  const auto spin = spin_.begin_wait(entered);
  auto spin_until = entered + spin;
  const auto busy_poll = spin_.busy_poll_for(spin);
  auto poll_until = entered + busy_poll;
  // A yield during which another task ran on this CPU (the peer, when the
  // data is there right after it).
  bool yielded_here = false;
  for (;;) {
    if (failure_.aborted()) fail_aborted();
    const bool moved = progress_all();
    if (!pending()) {
      spin_.note_wait(yielded_here);
      return;
    }
    // Checked even while data moves: a call that is slow, not stuck, still
    // ends at its deadline.
    const auto now = Clock::now();
    if (now >= deadline_->when()) fail_timeout();
    if (now >= next_report_) report_slow_wait();
    if (completed_ != start) {
      if (spin.count() > 0) spin_.succeeded();
      spin_.note_wait(yielded_here);
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
      const auto yielded = Clock::now() - now;
      if (yielded > SpinPolicy::kLongYield) {
        spin_.failed();
        spin_until = now;
      } else {
        yielded_here = yielded > SpinPolicy::kSharedYield;
      }
    } else {
      // A spin that simply ran out (the peer is late: it computes, or waits
      // for someone else) is not held against spinning; only a yield that
      // came back late is (above).
      wait_for_io();
      yielded_here = false;
      spin_until = Clock::now() + spin;
      poll_until = Clock::now() + busy_poll;
    }
  }
}

void Transport::wait_all() {
  while (pending()) progress();
}

}  // namespace collie
