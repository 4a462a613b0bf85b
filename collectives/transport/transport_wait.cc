// Transport's sleeping wait (transport.h, waiting.h): what progress() does
// once its spin is over, wait_for_io(), which sleeps in one poll() (or
// futex wait) over every connection that may move and the linker's
// listeners, and looks at what woke it; the slow-wait reports; and
// channel_kind()'s wait for a peer to connect. The spin itself, and the
// progress loop that decides when to sleep, are in transport.cc.
// Invariant: a connection with nothing posted has its next header looked
// at (peeked, never consumed; a p2p frame goes to the inbox) at most once
// per call (peeked_seq_), so waiting never takes a later call's frame; what
// it finds there is judged by the failure paths (transport_failure.cc).
#include <poll.h>

#include <algorithm>
#include <vector>

#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/collectives/transport/transport.h"

namespace collie {

ChannelKind Transport::channel_kind(int peer) {
  Connection& c = link(peer);
  // The accepting side waits for the peer to connect; nothing is posted on
  // the connection, so progress() would return at once: wait here, under
  // the same deadline, abort and slow-wait reports.
  arm_report();
  while (!c.connected()) {
    if (failure_.aborted()) fail_aborted();
    progress_all();
    if (c.connected()) break;
    const auto now = Clock::now();
    if (now >= deadline_->when()) fail_timeout();
    if (now >= next_report_) report_slow_wait();
    wait_for_io();
  }
  return c.kind();
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
    const bool read = c->recv_pending() || p2p_.wants(*c, call_.seq) ||
                      (!c->finished() && peeked_seq_[c->peer()] != call_.seq);
    if (!read && !c->send_pending() && c->finished()) continue;
    entries.push_back(PollEntry{c.get(), read, c->send_pending()});
  }
  // Listeners too, always: a peer connecting to us (its first use of this
  // connection) waits for our half of the handshake.
  std::vector<int> listen_fds;
  if (linker_) linker_->poll_fds(&listen_fds);
  // The single-copy sends of the batch being waited for complete when
  // their receivers set these words. A receiver wakes this rank only if it
  // armed reads on that connection (an entry that wants reads); one that
  // does not (its next frame was looked at this call, or its peer is gone)
  // cuts the wait to 1 ms slices instead.
  std::vector<DoneWord> done;
  bool unarmed = false;
  if (const P2PRequest* w = p2p_.waiting()) {
    for (const auto& s : w->sends) {
      if (s.out()) continue;
      done.push_back(DoneWord{s.done, s.done_value});
      const Connection* c = &conn(s.peer);
      unarmed |= std::none_of(entries.begin(), entries.end(),
                              [&](const PollEntry& e) { return e.c == c && e.want_read; });
    }
  }
  const auto wake = std::min(deadline_->when(), next_report_);
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wake - Clock::now());
  const int timeout_ms =
      static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, unarmed ? 1 : 60'000));
  std::vector<pollfd> lf;
  for (int fd : listen_fds) lf.push_back(pollfd{fd, POLLIN, 0});
  const int r = poll_connections(entries, timeout_ms, lf, done);
  bool arrived = false;
  for (auto& p : lf) arrived |= p.revents != 0;
  if (arrived) accept_arrivals();
  if (r < 0) return;  // EINTR: the caller checks the deadline
  // A shared-memory channel may be ready without poll() reporting it.
  const auto looked_at = [&](const PollEntry& e) {
    const Connection& c = *e.c;
    // progress_all() reads these next: mid-frame, or wanted for p2p.
    if (c.recv_pending() || c.finished() || !c.connected() || p2p_.wants(c, call_.seq))
      return false;
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

}  // namespace collie
