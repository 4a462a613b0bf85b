// Authenticating the data connections between ranks with the job secret
// (rendezvous/env/job_secret.h, docs/security.md "Data connections").
//
// Right after TCP connect, before the hello and any collective data, the
// connecting rank (higher) and the accepting rank (lower) run a mutual
// challenge-response:
//
//   connector -> acceptor  AUTH1: magic "CLA1", version, group, size,
//                          connector rank, acceptor rank, nonce Nc   (56 bytes)
//   acceptor  -> connector AUTH2: nonce Na, HMAC(K, "collie data acceptor" | AUTH1 | Na)
//   connector -> acceptor  AUTH3: HMAC(K, "collie data connector" | AUTH1 | Na)
//
// The accepting side multiplexes every not-yet-authenticated connection with
// poll(), so a stranger that sends garbage, the wrong proof, or nothing at
// all is logged at WARN with its address and closed, while the real peers
// keep being accepted.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/rendezvous/env/job_secret.h"

namespace collie {

inline constexpr uint32_t kPeerAuthMagic = 0x434c4131;  // "CLA1"
inline constexpr uint32_t kPeerAuthVersion = 1;

// Where this rank stands in its group, for the transcript.
struct PeerIdentity {
  uint32_t group = 0;  // group_hash of the store prefix
  int size = 0;
  int rank = 0;
  std::string address;  // our listening host:port, for messages
};

// The connector's half, on a freshly connected blocking-or-not socket.
// Throws NetworkError naming `who` (rank and address) when the acceptor's
// proof is wrong (a different secret: another job's listener, or a
// misconfigured rank) or it hangs up, TimeoutError at the deadline.
// No-op without a secret.
void authenticate_to_peer(int fd, const JobSecret& secret, const PeerIdentity& self, int peer,
                          const Deadline& deadline, const std::string& who);

// The acceptor's reading of one connecting peer's bytes, without the
// socket: PeerGate feeds it what recv() returned; the fuzzer
// (test/fuzz/peer_auth_fuzz.cc) feeds it anything. It takes exactly the
// handshake's bytes (AUTH1, then AUTH3) and no more: whatever follows is
// the caller's (the hello).
class PeerAuthAcceptor {
 public:
  struct Step {
    enum class Status { kNeedMore, kReply, kDone, kRefuse };
    Status status = Status::kNeedMore;
    size_t consumed = 0;         // input bytes taken, at most wanted()
    std::vector<uint8_t> reply;  // kReply: AUTH2, to send to the peer
    std::string error;           // kRefuse: why, for the WARN line
  };

  // `secret` must be set; both must outlive the acceptor.
  PeerAuthAcceptor(const JobSecret& secret, const PeerIdentity& self)
      : secret_(secret), self_(self) {}
  // Bytes still missing from the message being read (0 once decided).
  size_t wanted() const;
  // Bytes of the message being read so far, and which message it is, for
  // a refusal that says how far the peer got.
  size_t have() const { return have_; }
  bool answered() const { return answered_; }
  // The rank the peer authenticated as (after kDone).
  int rank() const { return rank_; }
  Step feed(std::span<const uint8_t> in);

 private:
  static constexpr size_t kAuth1 = 56, kAuth3 = 32;
  const JobSecret& secret_;
  const PeerIdentity& self_;
  uint8_t auth1_[kAuth1] = {};
  uint8_t auth3_[kAuth3] = {};
  size_t have_ = 0;        // bytes of the current message received
  bool answered_ = false;  // AUTH2 produced; now reading AUTH3
  bool decided_ = false;   // done or refused: takes nothing more
  int rank_ = -1;
  Nonce na_{};
};

// The acceptor's half: hands out connections from a listener that completed
// the handshake (with a secret) and then said a hello that fits this rank.
// Every connection still on its way is held in a poll() set, never read
// with a blocking call, so a stranger (a port scan, an HTTP request, an
// idle connection, garbage, a flood of them) delays nobody and fails
// nothing: it is refused and logged (the first 8 each, then at most one
// WARN a second per gate with the count of the others), and the job goes
// on. At most 64 are held at once: when a new one arrives at a full pool,
// every held connection first reads what it has sent (one whose hello is
// in is admitted), then the oldest that has sent nothing is closed (the
// oldest of all when each sent something); each has 10 s from its arrival
// to finish. A real peer says its hello right after connecting, so neither
// limit ever closes one. One gate per listener: strangers at the TCP port
// and at the Unix socket do not share a pool.
class PeerGate {
 public:
  // What follows the handshake: a header of `header_bytes`, which `check`
  // validates (given the rank the connection authenticated as, -1 without
  // a secret), returning how many more bytes follow it, or nullopt with
  // *why set to refuse the connection.
  struct Hello {
    size_t header_bytes = 0;
    std::function<std::optional<size_t>(std::span<const uint8_t> header, int authenticated_rank,
                                        std::string* why)>
        check;
  };
  struct Admitted {
    int fd = -1;                 // non-blocking, owned by the caller
    int rank = -1;               // the rank it authenticated as; -1 without a secret
    std::string remote;          // its source host:port
    std::vector<uint8_t> hello;  // the header and what followed it
  };
  // Limits (see above); tests shorten them.
  struct Limits {
    size_t max_pending = 64;
    std::chrono::milliseconds handshake{10'000};
  };

  PeerGate(int listener_fd, const JobSecret& secret, PeerIdentity self, Hello hello, Limits limits);
  PeerGate(int listener_fd, const JobSecret& secret, PeerIdentity self, Hello hello)
      : PeerGate(listener_fd, secret, std::move(self), std::move(hello), Limits{}) {}
  ~PeerGate();  // closes connections still pending (strangers)
  PeerGate(const PeerGate&) = delete;
  PeerGate& operator=(const PeerGate&) = delete;

  // The next connection that completed the handshake and its hello; nullopt
  // when the deadline passes first. Throws NetworkError only when accept()
  // itself fails.
  std::optional<Admitted> accept(const Deadline& deadline);

  // The connections still on their way, for a caller that polls the
  // listener itself: their input is what advances them.
  void pending_fds(std::vector<int>* fds) const;

  // Connections refused so far (for tests and logs).
  int refused() const { return refused_; }
  // "<address>: <why>" of the latest refusal, "" if none: a timeout waiting
  // for a rank quotes it, since a misconfigured rank looks like a stranger.
  const std::string& last_refusal() const { return last_refusal_; }

 private:
  struct Pending;
  void accept_new();
  // Reads what every held connection has sent; those done go to ready_.
  void drain();
  // Reads what `p` has sent; true when it completed the handshake and hello.
  bool advance(Pending& p);
  bool read_hello(Pending& p);
  void refuse(Pending& p, const std::string& why);
  void expire();

  int listener_;
  const JobSecret& secret_;
  PeerIdentity self_;
  Hello hello_;
  Limits limits_;
  std::vector<std::unique_ptr<Pending>> pending_;  // oldest first
  std::deque<Admitted> ready_;                     // admitted by drain(), handed out first
  int refused_ = 0;
  int unlogged_ = 0;  // refusals since the last WARN
  Clock::time_point last_warn_{};
  std::string last_refusal_;
};

}  // namespace collie
