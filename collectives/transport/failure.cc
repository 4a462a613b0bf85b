// FailureState (failure.h): the verdict's data and the abort frame. The
// timeout probe is in failure_probe.cc.
#include "collie/collectives/transport/failure.h"

#include <algorithm>

#include "collie/collectives/transport/waiting.h"
#include "collie/collectives/transport/wire.h"

namespace collie {
namespace {

// Abort notices are best effort: a peer that does not read gets an EOF
// instead after this long.
constexpr auto kNoticeBudget = std::chrono::milliseconds(200);
constexpr size_t kMaxAbortText = 4096;

}  // namespace

Blame blame_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kTimeout: return {FailureCause::kTimeout, {}};
    case ErrorKind::kNetwork: return {FailureCause::kNetwork, {}};
    case ErrorKind::kBackend: break;
  }
  return {FailureCause::kBackend, {}};
}

FailureCulprit culprit_of(const Connection& c) {
  return {.rank = c.peer(), .global_rank = -1, .address = c.address()};
}

void throw_error(ErrorKind kind, const std::string& message) {
  switch (kind) {
    case ErrorKind::kTimeout: throw TimeoutError(message);
    case ErrorKind::kBackend: throw BackendError(message);
    case ErrorKind::kNetwork: break;
  }
  throw NetworkError(message);
}

void FailureState::record(ErrorKind kind, const std::string& message, const Blame& blame,
                          const std::string& call, int64_t seq) const {
  ErrorRecord r;
  switch (kind) {
    case ErrorKind::kTimeout: r.error_type = "TimeoutError"; break;
    case ErrorKind::kNetwork: r.error_type = "NetworkError"; break;
    case ErrorKind::kBackend: r.error_type = "BackendError"; break;
  }
  r.message = message;
  r.cause = blame.cause;
  r.group_rank = rank_;
  r.group_size = size_;
  r.group = group_name_;
  r.call = call;
  r.seq = seq;
  r.culprits = blame.culprits;
  // The process's error file (TORCHELASTIC_ERROR_FILE), first failure wins.
  collie::record_failure(std::move(r));
}

void FailureState::notify_peers(std::span<const std::unique_ptr<Connection>> connections,
                                ErrorKind kind, const std::string& text) {
  const std::string body = text.substr(0, kMaxAbortText);
  const WireHeader h =
      WireHeader::control(group_, FrameType::kAbort, static_cast<uint32_t>(body.size()), kind);
  struct Notice {
    Connection* c;
    std::vector<uint8_t> bytes;
    size_t sent = 0;
  };
  std::vector<Notice> notices;
  for (auto& c : connections) {
    if (!c || !c->connected() || c->finished()) continue;
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
    std::vector<PollEntry> fds;
    for (auto& n : notices) {
      // A peer that is gone has nothing to be told.
      if (n.c->write_raw(n.bytes.data(), n.bytes.size(), &n.sent))
        fds.push_back(PollEntry{n.c, false, true});
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (fds.empty() || left.count() <= 0) break;
    poll_connections(fds, static_cast<int>(left.count()));
  }
  for (auto& c : connections) {
    if (c) c->shutdown_write();
  }
}

void FailureState::note_failed_peer(int peer, bool closed) {
  std::lock_guard lock(mu_);
  auto& list = closed ? closed_ : failed_;
  auto it = std::lower_bound(list.begin(), list.end(), peer);
  if (it == list.end() || *it != peer) list.insert(it, peer);
}

std::vector<int> FailureState::unconfirmed_closed() const {
  std::lock_guard lock(mu_);
  std::vector<int> closed;
  for (int p : closed_)
    if (!std::binary_search(failed_.begin(), failed_.end(), p)) closed.push_back(p);
  return closed;
}

std::vector<int> FailureState::failed_peers() const {
  std::lock_guard lock(mu_);
  return failed_;
}

}  // namespace collie
