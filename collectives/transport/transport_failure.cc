// Transport's failure path: what a rank does when a peer's frame does not
// match its call, a peer fails or hangs up, or the deadline passes (see
// transport.h and docs/algorithms.md, "the mismatch protocol" and "When a
// peer fails"). This file decides which error a situation is and words it;
// the verdict (broken flag, failed peers, error record, abort frames, the
// timeout probe) is FailureState's (failure.h, failure.cc,
// failure_probe.cc); reading frames on these paths is the Connection's
// (connection_failure.cc: skim(), absorb()), which owns the frame format.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/collectives/transport/transport.h"
#include "collie/collectives/transport/waiting.h"

namespace collie {
namespace {

// How long a rank that saw a frame of a later call waits for a frame of its
// own call from another peer, which would name the real mismatch.
constexpr auto kEvidenceGrace = std::chrono::milliseconds(200);

}  // namespace
void Transport::on_hangup(Connection& c) {
  std::string text;
  switch (c.absorb(&text)) {
    case RecvProblem::kAbort: fail_from_peer(c, text);
    case RecvProblem::kEof:
      failure_.note_failed_peer(c.peer(), /*closed=*/true);
      fail(ErrorKind::kNetwork,
           str_cat(context(), ": the connection to ", c.name(),
                   " closed unexpectedly (the peer process exited, crashed or aborted)"),
           Blame{FailureCause::kPeerClosed, {culprit_of(c)}});
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
      if (linking_ && h.seq == call_.seq) break;  // the peer's next internal call (begin())
      if (h.seq < call_.seq || (h.seq == call_.seq && !(h.call() == call_))) fail_mismatch(c, h);
      break;
    case FrameType::kP2P:
      // A point-to-point message: into the inbox now, whatever this rank is
      // doing, so that a peer sending before it receives never waits on us.
      progress_p2p_reads(c, /*wanted_only=*/false);
      return;
  }
  peeked_seq_[c.peer()] = call_.seq;
}

void Transport::fail_mismatch(const Connection& c, const WireHeader& h) {
  if (h.magic != kWireMagic || h.group != group_) {
    fail(ErrorKind::kBackend,
         str_cat(context(), ": received a message from ", c.name(),
                 " that does not belong to this group (magic ", h.magic, ", group ", h.group,
                 ", expected ", kWireMagic, ", ", group_, ")"),
         Blame{FailureCause::kMismatch, {culprit_of(c)}});
  }
  // A peer that is already past our call is one symptom; another peer's
  // frame of this very call, waiting unread, usually names the real culprit.
  // It may still be on its way (the sender was descheduled between two
  // sends), so look for up to kEvidenceGrace: this is the error path.
  if (h.seq != call_.seq) {
    const auto until = std::min(Clock::now() + kEvidenceGrace, deadline_->when());
    for (;;) {
      std::vector<PollEntry> quiet;
      for (auto& other : connections_) {
        if (!other || !other->connected() || other.get() == &c || !other->at_frame_boundary() ||
            other->finished())
          continue;
        WireHeader o;
        if (!other->peek_header(&o)) {
          quiet.push_back(PollEntry{other.get(), true, false});
        } else if (o.magic == kWireMagic && o.group == group_ &&
                   o.frame == static_cast<uint8_t>(FrameType::kData) && o.seq == call_.seq &&
                   !(o.call() == call_)) {
          fail_mismatch(*other, o);
        }
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (quiet.empty() || left.count() <= 0) break;
      poll_connections(quiet, static_cast<int>(left.count()));
    }
  }
  fail(ErrorKind::kBackend,
       str_cat("collective mismatch: rank ", c.peer(), " called ", h.call().describe_with_seq(),
               ", rank ", world_rank(), " called ", call_.describe_with_seq(),
               " (every rank must call the same collectives in the same order)"),
       Blame{FailureCause::kMismatch, {culprit_of(c)}});
}

void Transport::on_recv_problem(Connection& c, RecvProblem problem, int err) {
  const WireHeader& h = c.received_header();
  switch (problem) {
    case RecvProblem::kMismatch:
      if (h.is_p2p(group_))
        fail(ErrorKind::kBackend, str_cat(context(), ": ", p2p_.inbox().error()));
      if (h.is_probe(group_)) fail_probed(c, h);
      if (h.magic == kWireMagic && h.group == group_ && h.call() == call_) {
        fail(ErrorKind::kBackend,
             str_cat(context(), ": ", c.name(), " sent a ", h.payload_bytes,
                     "-byte message where this rank expected ", c.expected_header().payload_bytes,
                     " bytes: do the ranks' sizes or splits for each other differ, or their "
                     "CommunicatorOptions (segment_bytes, small_message_bytes)?"),
             Blame{FailureCause::kMismatch, {culprit_of(c)}});
      }
      fail_mismatch(c, h);
    case RecvProblem::kAbort: fail_from_peer(c, c.read_abort_text());
    case RecvProblem::kGoodbye:
      fail(ErrorKind::kNetwork,
           str_cat(context(), ": ", c.name(),
                   " closed its communicator while this rank still expected its data (did the "
                   "ranks call different numbers of collectives?)"),
           Blame{FailureCause::kMismatch, {culprit_of(c)}});
    case RecvProblem::kEof:
      failure_.note_failed_peer(c.peer(), /*closed=*/true);
      fail(ErrorKind::kNetwork,
           str_cat(context(), ": the connection to ", c.name(),
                   " closed unexpectedly (the peer process exited, crashed or aborted)"),
           Blame{FailureCause::kPeerClosed, {culprit_of(c)}});
    case RecvProblem::kError:
    case RecvProblem::kNone: break;
  }
  failure_.note_failed_peer(c.peer(), /*closed=*/true);
  fail(ErrorKind::kNetwork,
       str_cat(context(), ": receiving from ", c.name(), " failed: ", std::strerror(err),
               " (the peer process exited, crashed or aborted)"),
       Blame{FailureCause::kPeerClosed, {culprit_of(c)}});
}

void Transport::fail_from_peer(Connection& c, const std::string& text) {
  const auto kind = static_cast<ErrorKind>(c.received_header().error_kind);
  // The peer only relays: it is alive (it sent the notice), so it is no
  // culprit, and the message says it reported, not that it failed (the
  // text may be a third rank's, passed along). Whom this rank's own probe
  // finds silent is a culprit.
  Blame blame{FailureCause::kPeerFailed, {}};
  // A peer's timeout blames whom it waited for, which may itself be waiting
  // on the rank that really hangs (in a ring, rank 1 waits on rank 0, which
  // waits on a stopped rank 2). Our own outstanding operations are the next
  // link of that chain, so the timeout carries them on instead of replacing
  // them: whoever reads either message sees the whole chain.
  if (kind == ErrorKind::kTimeout) {
    const std::vector<std::string> waiting = waiting_for(&c);
    std::string merged = text;
    if (!waiting.empty()) {
      merged += str_cat("; rank ", world_rank(), ", relaying this, was itself still waiting to ",
                        join(waiting, ", "));
    }
    // The abort reached us without its probe being seen first (it was
    // behind a frame we had already looked at, and the hang-up came first):
    // probe now, so that this rank too names the silent ones from its own
    // view rather than only the sender's.
    if (!failure_.probed()) {
      merged += str_cat("; rank ", world_rank(), " probed: ", probe_peers(&c, &blame.culprits));
      if (!blame.culprits.empty()) blame.cause = FailureCause::kTimeoutUnresponsive;
    }
    fail_impl(kind, str_cat(context(), ": ", c.name(), " reported: ", merged), merged, blame);
  }
  fail_impl(kind, str_cat(context(), ": ", c.name(), " reported: ", text), text, blame);
}

std::vector<std::string> Transport::waiting_for(const Connection* except) const {
  std::vector<std::string> waiting;
  for (auto& c : connections_) {
    if (!c || c.get() == except) continue;
    if (!c->connected()) {
      // A peer still to connect to us (a higher rank; lower ranks are
      // connected to, synchronously), with or without messages posted.
      const bool posted = c->recv_pending() || c->send_pending();
      if (!posted && c->peer() < world_rank()) continue;
      std::string refused;
      if (linker_ && !linker_->last_refusal().empty()) {
        refused = str_cat("; last refused: ", linker_->last_refusal());
      }
      waiting.push_back(
          posted ? str_cat("receive from ", c->name(), " (", c->recvs_queued() + c->sends_queued(),
                           " message(s) outstanding; it has not connected yet", refused, ")")
                 : str_cat("accept a connection from ", c->name(), " (it has not connected yet",
                           refused, ")"));
      continue;
    }
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
  if (p2p_.running()) {
    // Only this rank and its peers are in a send/recv: no probe (the other
    // ranks are not reading); the peers owing a message are the culprits.
    for (auto& r : p2p_.inbox().describe_posted()) waiting.push_back(std::move(r));
    if (const P2PRequest* w = p2p_.waiting()) {
      for (const auto& s : w->sends) {
        if (s.out()) continue;
        waiting.push_back(str_cat("send to ", conn(s.peer).name(), " (a ", s.bytes,
                                  "-byte message it has not received: on one host a send of "
                                  "p2p_single_copy_bytes or more waits for the matching recv)"));
      }
    }
    fail(ErrorKind::kTimeout,
         str_cat(context(), " timed out ", deadline_->describe(), "; still waiting to ",
                 join(waiting, ", "),
                 ": the peer has not made the matching call (same tag and size), or it is "
                 "stopped or hung"));
  }
  // The limit as it stood when the deadline passed, not after the probe.
  const std::string head = str_cat(context(), " timed out ", deadline_->describe(),
                                   "; still waiting to ", join(waiting, ", "));
  Blame blame{FailureCause::kTimeout, {}};
  const std::string verdict = probe_peers(nullptr, &blame.culprits);
  if (!blame.culprits.empty()) blame.cause = FailureCause::kTimeoutUnresponsive;
  fail(ErrorKind::kTimeout, str_cat(head, "; ", verdict), std::move(blame));
}

void Transport::fail_probed(Connection& c, const WireHeader& probe) {
  const std::vector<std::string> waiting = waiting_for(nullptr);
  const bool origin = probe.probe == static_cast<uint8_t>(ProbeReason::kTimedOut);
  std::string message = str_cat(context(), ": ", c.name(),
                                origin ? " timed out in " : " passed on a timeout probe for ",
                                probe.call().describe_with_seq());
  if (!waiting.empty())
    message += str_cat("; this rank was still waiting to ", join(waiting, ", "));
  Blame blame{FailureCause::kTimeout, {}};
  message += str_cat("; ", probe_peers(&c, &blame.culprits));
  if (!blame.culprits.empty()) blame.cause = FailureCause::kTimeoutUnresponsive;
  fail_impl(ErrorKind::kTimeout, message, message, blame);
}

void Transport::fail_aborted() {
  fail(ErrorKind::kBackend, str_cat(context(), ": the communicator was aborted (abort() called)"),
       Blame{FailureCause::kAborted, {}});
}

void Transport::fail(ErrorKind kind, const std::string& message) {
  fail(kind, message, blame_of(kind));
}

void Transport::fail(ErrorKind kind, const std::string& message, Blame blame) {
  // A socket error is often the echo of a peer's failure (it broke, told
  // us, and exited before we read the news): prefer its explanation.
  if (kind == ErrorKind::kNetwork && !failure_.broken()) {
    for (auto& c : connections_) {
      WireHeader h;
      if (c && c->connected() && c->at_frame_boundary() && c->peek_header(&h) &&
          h.magic == kWireMagic && h.group == group_ &&
          h.frame == static_cast<uint8_t>(FrameType::kAbort)) {
        fail_from_peer(*c, c->take_abort_frame());
      }
    }
  }
  fail_impl(kind, message, message, blame);
}

void Transport::fail_impl(ErrorKind kind, const std::string& message, const std::string& forward,
                          const Blame& blame) {
  if (failure_.take_first(message)) {
    COLLIE_LOG(kInfo) << "communicator broken: " << message;
    failure_.record(kind, message, blame, p2p_.running() ? p2p_.describe() : call_.describe(),
                    p2p_.running() ? -1 : static_cast<int64_t>(call_.seq));
    failure_.notify_peers(connections_, kind, forward);
  }
  // The caller may free the buffers of sends not read yet once this throws.
  p2p_.abandon_copies();
  throw_error(kind, message);
}

std::string Transport::probe_peers(const Connection* trigger, std::vector<FailureCulprit>* silent) {
  return failure_.probe({connections_, call_, linker_.get(), probe_grace()}, trigger, silent);
}

std::chrono::milliseconds Transport::probe_grace() const {
  // Long enough for a live rank to be scheduled, read the probe and answer
  // on a loaded machine; short next to the timeout the user chose, and never
  // unbounded. Every rank counts its own grace from when it starts probing.
  constexpr auto kMinProbeGrace = std::chrono::milliseconds(20);
  constexpr auto kMaxProbeGrace = std::chrono::milliseconds(1000);
  const auto half = deadline_ ? deadline_->limit() / 2 : kMaxProbeGrace;
  return std::clamp<std::chrono::milliseconds>(half, kMinProbeGrace, kMaxProbeGrace);
}

std::vector<int> Transport::failed_peers(Clock::time_point until) {
  const std::vector<int> closed = failure_.unconfirmed_closed();
  if (!closed.empty()) find_dead_peers(closed, until);
  return failure_.failed_peers();
}

std::vector<int> Transport::find_dead_peers(const std::vector<int>& peers,
                                            Clock::time_point until) {
  if (!linker_) return {};
  std::vector<int> dead = linker_->refusing(peers, until);
  for (int p : dead) failure_.note_failed_peer(p);
  return dead;
}

void Transport::abort() {
  failure_.abort();
  for (auto& c : connections_) {
    if (c) c->shutdown_both();
  }
}

}  // namespace collie
