// libFuzzer target for the data connections' authentication
// (collectives/transport/peer_auth.h): what an accepting rank makes of the bytes a
// connecting peer sends (PeerAuthAcceptor, the parser PeerGate feeds from
// recv()), and what a connecting rank makes of the acceptor's answer
// (authenticate_to_peer, over a real socketpair).
//
// Input layout: byte 0 is a mode: bit 0 picks the side (0: acceptor, 1:
// connector); bit 1 (acceptor): answer the acceptor's challenge with the
// right proof, computed here with the secret, so that mutations reach what
// follows a successful handshake; bit 2 (acceptor): repair AUTH1's magic,
// version, group, size and target rank so that mutations reach the proof.
// Byte 1 is how many bytes arrive per recv() (0: all at once). The rest is
// what the peer sends. Promises checked:
//   - the acceptor takes exactly the handshake's bytes: never more than it
//     wants, everything it is given while it wants more;
//   - it answers (AUTH2) only an introduction that fits this rank, and its
//     answer is 64 bytes whose proof verifies with the secret;
//   - it admits a peer only after exactly the right proof, as the rank the
//     introduction named; a refusal says why and is final;
//   - cutting the stream into different recv()s never changes the outcome
//     (only how many bytes a refused peer got in);
//   - the connector never accepts an answer that does not prove the secret
//     (all a stranger can send) and fails with NetworkError, not a hang.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collie/base/error.h"
#include "collie/collectives/transport/peer_auth.h"
#include "collie/collectives/transport/wire.h"
#include "collie/test/fuzz/fuzz_check.h"

namespace {

using collie::PeerAuthAcceptor;
using collie::fuzz::check;
using collie::fuzz::put_u32;
using collie::fuzz::u32;
using Status = PeerAuthAcceptor::Step::Status;

constexpr const char* kTarget = "peer_auth_fuzz";
constexpr size_t kMaxStream = 16 << 10;

const collie::JobSecret& secret() {
  static const collie::JobSecret s = collie::JobSecret::from_hex(
      "00112233445566778899aabbccddeeff0123456789abcdeffedcba9876543210");
  return s;
}

const collie::PeerIdentity& self() {
  static const collie::PeerIdentity id{collie::group_hash("fuzz/peer_auth"), 4, 1, "fuzz:1"};
  return id;
}

std::vector<uint8_t> join(const std::vector<uint8_t>& a, const uint8_t* b, size_t n) {
  std::vector<uint8_t> t = a;
  t.insert(t.end(), b, b + n);
  return t;
}

struct Outcome {
  std::vector<Status> statuses;  // every status but kNeedMore, in order
  size_t consumed = 0;
  int rank = -1;
};

// Feeds `stream` to a fresh acceptor `chunk` bytes per recv(), as PeerGate
// does (it never asks recv() for more than wanted()).
Outcome run_acceptor(std::vector<uint8_t> stream, size_t chunk, bool honest) {
  PeerAuthAcceptor acc(secret(), self());
  Outcome out;
  std::vector<uint8_t> auth1, auth3, reply;
  size_t pos = 0;
  for (;;) {
    const size_t want = acc.wanted();
    if (want == 0 || pos >= stream.size()) break;
    const size_t n = std::min({want, chunk, stream.size() - pos});
    const bool reading_proof = acc.answered();
    const PeerAuthAcceptor::Step step = acc.feed({stream.data() + pos, n});
    check(step.consumed <= n, kTarget, "took more than it was given");
    if (step.status == Status::kNeedMore) {
      check(step.consumed == n && acc.wanted() > 0, kTarget, "wants more but left input unread");
    }
    (reading_proof ? auth3 : auth1)
        .insert((reading_proof ? auth3 : auth1).end(), stream.begin() + pos,
                stream.begin() + pos + step.consumed);
    pos += step.consumed;
    out.consumed += step.consumed;
    if (step.status == Status::kNeedMore) continue;
    out.statuses.push_back(step.status);
    switch (step.status) {
      case Status::kRefuse:
        check(!step.error.empty() && step.reply.empty(), kTarget, "a refusal without a reason");
        check(acc.wanted() == 0, kTarget, "a refused peer can still send");
        check(
            acc.feed({stream.data(), std::min<size_t>(stream.size(), 1)}).status == Status::kRefuse,
            kTarget, "a refusal is not final");
        return out;
      case Status::kReply: {
        check(auth1.size() == 56 && step.reply.size() == 64, kTarget, "AUTH2 of the wrong size");
        const uint8_t* a = auth1.data();
        const int rank = static_cast<int>(u32(a + 16));
        check(u32(a) == collie::kPeerAuthMagic && u32(a + 4) == collie::kPeerAuthVersion &&
                  u32(a + 8) == self().group && static_cast<int>(u32(a + 12)) == self().size &&
                  static_cast<int>(u32(a + 20)) == self().rank && rank > self().rank &&
                  rank < self().size,
              kTarget, "answered an introduction that does not fit this rank");
        check(secret().verify("collie data acceptor v1", join(auth1, step.reply.data(), 32),
                              {step.reply.data() + 32, 32}),
              kTarget, "AUTH2's proof does not verify");
        reply = step.reply;
        if (honest) {
          const collie::Sha256Digest proof =
              secret().prove("collie data connector v1", join(auth1, reply.data(), 32));
          stream.insert(stream.begin() + static_cast<std::ptrdiff_t>(pos), proof.begin(),
                        proof.end());
        }
        break;
      }
      case Status::kDone: {
        check(auth3.size() == 32 && reply.size() == 64, kTarget,
              "admitted before the whole handshake");
        const collie::Sha256Digest want_proof =
            secret().prove("collie data connector v1", join(auth1, reply.data(), 32));
        check(std::equal(auth3.begin(), auth3.end(), want_proof.begin()), kTarget,
              "admitted a peer whose proof is wrong");
        check(acc.rank() == static_cast<int>(u32(auth1.data() + 16)), kTarget,
              "admitted as the wrong rank");
        check(acc.wanted() == 0 && acc.feed({stream.data(), 1}).consumed == 0, kTarget,
              "took bytes after the handshake (the hello is the caller's)");
        out.rank = acc.rank();
        return out;
      }
      case Status::kNeedMore: break;
    }
  }
  return out;
}

void run_connector(const uint8_t* stream, size_t size) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    collie::fuzz::broken(kTarget, "socketpair");
  for (size_t done = 0; done < size;) {
    const ssize_t n = ::write(fds[1], stream + done, size - done);
    if (n <= 0) collie::fuzz::broken(kTarget, "write to the socketpair");
    done += static_cast<size_t>(n);
  }
  ::shutdown(fds[1], SHUT_WR);  // the "acceptor" says nothing more; AUTH1 still fits its buffer
  bool refused = false;
  try {
    collie::authenticate_to_peer(fds[0], secret(), {self().group, self().size, 2, "fuzz:2"}, 1,
                                 collie::Deadline(std::chrono::seconds(5)), "rank 1 (fuzz)");
  } catch (const collie::NetworkError&) {
    refused = true;
  }
  ::close(fds[0]);
  ::close(fds[1]);
  check(refused, kTarget, "the connector accepted an answer that cannot prove the secret");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t mode = data[0];
  const size_t chunk = data[1] == 0 ? kMaxStream : data[1];
  std::vector<uint8_t> stream(data + 2, data + 2 + std::min(size - 2, kMaxStream));
  if (mode & 1) {
    run_connector(stream.data(), stream.size());
    return 0;
  }
  if ((mode & 4) && stream.size() >= 24) {
    put_u32(stream.data(), collie::kPeerAuthMagic);
    put_u32(stream.data() + 4, collie::kPeerAuthVersion);
    put_u32(stream.data() + 8, self().group);
    put_u32(stream.data() + 12, static_cast<uint32_t>(self().size));
    put_u32(stream.data() + 20, static_cast<uint32_t>(self().rank));
  }
  const bool honest = mode & 2;
  const Outcome cut = run_acceptor(stream, chunk, honest);
  const Outcome whole = run_acceptor(stream, kMaxStream, honest);
  // How much a refused peer got in depends on how its bytes came (the
  // connection is closed anyway); everything else must not.
  const bool refused = !whole.statuses.empty() && whole.statuses.back() == Status::kRefuse;
  check(cut.statuses == whole.statuses && (refused || cut.consumed == whole.consumed) &&
            cut.rank == whole.rank,
        kTarget, "cutting the stream differently changed the outcome");
  return 0;
}
