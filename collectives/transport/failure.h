// FailureState: the one owner of a transport's failure verdict. Whatever
// breaks a Transport (a peer's abort frame, a hang-up, a mismatch, a
// timeout, abort()) ends here, and this is where the verdict lives:
//
//   - whether the transport is broken or aborted (the flags the hot path
//     reads, one atomic load each, inline), and the first failure's
//     message, which every later call is refused with;
//   - the failed peers as data, not text: the ranks that failed_peers()
//     hands to shrink's agreement, and the culprits of the error record
//     (base/error_record.h) that the launcher and the flight recorder read;
//   - the wire side of failing: the abort frame sent to every peer
//     (notify_peers()), and the timeout probe that finds the silent ranks
//     (probe(), failure_probe.cc), with the bytes a probe left owed.
//
// Which error a situation is, and its message, stays with the Transport
// (transport_failure.cc), which knows the call; it hands the verdict here.
// Invariants: the first failure wins (take_first() is true once, or once
// more after an abort() that gave no reason), so the record and the abort
// frame go out once; a peer listed as failed stays listed; broken(),
// aborted(), abort() and the failed-peer lists are thread-safe, the rest is
// for the transport's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/base/error.h"
#include "collie/base/error_record.h"
#include "collie/collectives/transport/connection.h"
#include "collie/collectives/transport/peer_linker.h"

namespace collie {

// A failure as data (base/error_record.h): its cause and the peers it
// blames (ranks of the transport, with their addresses).
struct Blame {
  FailureCause cause = FailureCause::kBackend;
  std::vector<FailureCulprit> culprits;
};
// No culprit, the cause the kind implies.
Blame blame_of(ErrorKind kind);
// The peer of `c` as a culprit.
FailureCulprit culprit_of(const Connection& c);
// Throws the collie error of `kind` (TimeoutError, NetworkError,
// BackendError).
[[noreturn]] void throw_error(ErrorKind kind, const std::string& message);

class FailureState {
 public:
  // This rank of the transport's `size`, its wire group and the group's
  // name in the error record ("socket/0").
  FailureState(int rank, int size, uint32_t group, std::string group_name)
      : rank_(rank), size_(size), group_(group), group_name_(std::move(group_name)) {}

  bool broken() const { return broken_.load(); }
  bool aborted() const { return aborted_.load(); }
  // abort(): broken, with no reason (thread-safe; the Transport shuts the
  // sockets).
  void abort() {
    aborted_.store(true);
    broken_.store(true);
  }
  // Breaks the transport with `message`. True for the failure that the
  // record and the peers' abort frame must tell (the first, or the first
  // after an abort() that gave none).
  bool take_first(const std::string& message) {
    if (broken_.exchange(true) && !reason_.empty()) return false;
    reason_ = message;
    return true;
  }
  // The first failure's message ("" after abort() alone).
  const std::string& reason() const { return reason_; }

  // The process's error record of the failure (first failure wins, also
  // across transports): `call` and `seq` describe the call that failed
  // (seq -1: none).
  void record(ErrorKind kind, const std::string& message, const Blame& blame,
              const std::string& call, int64_t seq) const;
  // Sends an abort frame carrying `text` and `kind` to every peer still
  // connected (finishing a half-written message first, and after a probe
  // the bytes it left owed, so that the peer finds the frame), within a
  // short budget, then shuts every connection for writing. The posted
  // operations are dropped.
  void notify_peers(std::span<const std::unique_ptr<Connection>> connections, ErrorKind kind,
                    const std::string& text);

  // The failed peers as data. `closed`: the connection closed without an
  // abort frame or goodbye, which only a refused connect confirms
  // (confirm_closed()), since a live peer that aborted closes the same way.
  void note_failed_peer(int peer, bool closed = false);
  // The closed peers not confirmed yet, and the confirmed list (world
  // ranks, ascending). Thread-safe.
  std::vector<int> unconfirmed_closed() const;
  std::vector<int> failed_peers() const;

  // The timeout probe (failure_probe.cc): sends a probe frame to every
  // connected peer and reads every connection for theirs until `grace` is
  // over or all answered; the peers without a connection answer through
  // the linker's roll call. `trigger` is the peer whose probe started ours
  // (null: our deadline passed). Returns the verdict for the message (who
  // answered, who stayed silent); the silent ones go into *silent and the
  // failed peers. Afterwards the streams are read past the posted
  // operations, which are dropped; what was left to send is owed.
  struct ProbeScope {
    std::span<const std::unique_ptr<Connection>> connections;
    const CallInfo& call;
    PeerLinker* linker;  // may be null
    std::chrono::milliseconds grace;
  };
  std::string probe(const ProbeScope& scope, const Connection* trigger,
                    std::vector<FailureCulprit>* silent);
  bool probed() const { return probed_; }

 private:
  const int rank_;
  const int size_;
  const uint32_t group_;
  const std::string group_name_;
  std::atomic<bool> broken_{false};
  std::atomic<bool> aborted_{false};
  std::string reason_;
  // Written on the failure path, read by another thread (failed_peers()).
  mutable std::mutex mu_;
  std::vector<int> failed_, closed_;
  // After a probe: the bytes still owed to each peer (padding, the rest of
  // our probe), which notify_peers() sends ahead of the abort frame.
  bool probed_ = false;
  std::vector<std::string> owed_;
};

}  // namespace collie
