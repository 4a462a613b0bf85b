// The timeout probe (FailureState::probe(), failure.h), which the
// Transport starts on a timeout (transport_failure.cc).
//
// A stopped rank (SIGSTOP, a debugger, a hung GPU
// driver) keeps its sockets open, so nothing tells the others it is gone,
// and in a ring only its right neighbour waits on it directly: every other
// rank waits on a live neighbour that is itself stuck. What a rank waits on
// therefore does not name the culprit. What does: the stopped rank is the
// one that cannot answer. So a rank whose deadline passes sends a probe
// frame to every peer before it fails, and reads every connection for a
// short grace (Transport::probe_grace(): half the call's limit, at most 1 s). A live
// rank is inside progress() (it is stuck in the same collective), reads the
// probe as an unexpected frame where it expected data, and does the same:
// sends its own probe to every peer (its answer) and reads for theirs. The
// probes spread through the whole group within a poll each; when every
// peer has answered, or the grace is over, each rank fails with a
// TimeoutError naming the call, its sequence number and the ranks that never
// answered, with their addresses. All of this is on the error path: the
// data path only gained a case in a switch it already had.
#include <algorithm>
#include <cstring>

#include "collie/base/str_cat.h"
#include "collie/collectives/transport/failure.h"
#include "collie/collectives/transport/waiting.h"

namespace collie {

namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  for (int r : ranks) parts.push_back(std::to_string(r));
  return join(parts, ",");
}

}  // namespace

std::string FailureState::probe(const ProbeScope& scope, const Connection* trigger,
                                std::vector<FailureCulprit>* silent_out) {
  probed_ = true;
  const CallInfo& call = scope.call;
  PeerLinker* const linker = scope.linker;
  const auto grace = scope.grace;
  const auto until = Clock::now() + grace;
  const WireHeader probe_frame =
      WireHeader::make_probe(group_, call, trigger ? ProbeReason::kAnswer : ProbeReason::kTimedOut);
  const auto* probe_bytes = reinterpret_cast<const char*>(&probe_frame);
  // Check in at once for the peers that hear of the probe only through the
  // store (lazy connections: see below).
  if (linker) linker->roll_call(call.seq, until, false);
  struct PeerWatch {
    Connection* c = nullptr;
    std::string out;  // still to send: the rest of a half-sent message, then our probe
    size_t sent = 0;
    Connection::Skimmed answer = Connection::Skimmed::kNothingYet;
  };
  std::vector<PeerWatch> watch;
  for (auto& c : scope.connections) {
    if (!c) continue;
    PeerWatch w;
    w.c = c.get();
    if (c->connected() && !c->finished()) {
      // A half-written message is finished with zeros (as for an abort
      // notice) so that the peer finds our probe right after it; we send no
      // more data in this call.
      w.out.assign(c->partial_send_remaining(), '\0');
      w.out.append(probe_bytes, kHeaderBytes);
    }
    if (c.get() == trigger) w.answer = Connection::Skimmed::kProbe;
    watch.push_back(std::move(w));
  }
  for (;;) {
    std::vector<PollEntry> fds;
    bool silent = false;
    for (auto& w : watch) {
      if (!w.c->connected()) {  // it never connected: it cannot answer
        silent = true;
        continue;
      }
      // A full channel is a stopped rank, usually; a peer that is gone is
      // found by reading.
      const bool write = w.c->write_raw(w.out.data(), w.out.size(), &w.sent);
      if (w.answer == Connection::Skimmed::kNothingYet) w.answer = w.c->skim(group_);
      const bool read = w.answer == Connection::Skimmed::kNothingYet;
      silent |= read;
      if (read || write) fds.push_back(PollEntry{w.c, read, write});
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (!silent || left.count() <= 0) break;
    poll_connections(fds, static_cast<int>(std::min<int64_t>(left.count() + 1, 50)));
  }

  // What is still owed goes ahead of the abort frame (notify_peers()); the
  // posted operations are void now that the streams were read past them.
  owed_.assign(size_, std::string());
  std::vector<int> alive{rank_}, silent;
  std::vector<std::string> silent_names, other;
  std::vector<bool> heard(size_, false);
  heard[rank_] = true;
  for (auto& w : watch) {
    owed_[w.c->peer()] = w.out.substr(w.sent);
    w.c->clear();
    if (!w.c->connected()) continue;
    heard[w.c->peer()] = true;
    switch (w.answer) {
      case Connection::Skimmed::kProbe:
      case Connection::Skimmed::kAbort: alive.push_back(w.c->peer()); break;
      case Connection::Skimmed::kNothingYet:
        note_failed_peer(w.c->peer());
        silent.push_back(w.c->peer());
        silent_names.push_back(str_cat(w.c->peer(), " (", w.c->address(), ")"));
        silent_out->push_back(culprit_of(*w.c));
        break;
      case Connection::Skimmed::kGoodbye:
        other.push_back(str_cat(w.c->name(), " had closed its communicator"));
        break;
      case Connection::Skimmed::kGone:
        note_failed_peer(w.c->peer(), /*closed=*/true);
        other.push_back(str_cat(w.c->name(), " closed its connection (exited or crashed)"));
        break;
      case Connection::Skimmed::kGarbled:
        other.push_back(str_cat(w.c->name(), " sent bytes that are no frame of this group"));
        break;
      case Connection::Skimmed::kOtherCall:
        other.push_back(str_cat(w.c->name(), " had sent a message of ",
                                w.c->other_call().call().describe_with_seq(),
                                " where this rank expected one of its op #", call.seq));
        break;
    }
  }
  // Lazy connections: the peers this rank has no connection to answer
  // through the store instead (every probing rank checks in there).
  if (linker) {
    std::vector<int> unheard;
    for (int p = 0; p < size_; ++p) {
      if (!heard[p]) unheard.push_back(p);
    }
    const auto missing = linker->roll_call(call.seq, until, !unheard.empty());
    for (int p : unheard) {
      auto it = missing.find(p);
      if (it == missing.end()) {
        alive.push_back(p);
      } else {
        note_failed_peer(p);
        silent.push_back(p);
        silent_names.push_back(str_cat(p, " (", it->second, ")"));
        silent_out->push_back({.rank = p, .global_rank = -1, .address = it->second});
      }
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

}  // namespace collie
