// libFuzzer target for the agent store's authentication
// (rendezvous/tcp_store/store_auth.h): StoreAuthGate, the parser a TcpStore server
// with a job secret runs on a connection's first bytes, fed exactly as
// StoreConnection::process() feeds it (the bytes buffered so far, again
// once `need` are buffered).
//
// Input layout: byte 0 is a mode: bit 0 is the server's policy (0: secure,
// 1: torch-compatibility mode, which serves clients without the secret);
// bit 1 answers the server's challenge with the right proof, computed here
// with the secret, so that mutations reach what follows a successful
// handshake; bit 2 repairs AUTH1's first five bytes (0xA5 and the magic)
// so that mutations reach the proof. Byte 1 is how many bytes arrive per
// read (0: all at once). The rest is what the client sends. Promises:
//   - the gate never takes more than is buffered, and when it needs more
//     it asks for more than is buffered (else the server would spin);
//   - it answers (AUTH2) only 0xA5 + the magic, with 65 bytes whose proof
//     verifies with the secret, having taken exactly AUTH1;
//   - it authenticates only after exactly the right proof; compatibility
//     mode admits a client that does not start with 0xA5 unauthenticated
//     and without taking a byte (those are TCPStore requests), secure mode
//     refuses it; a refusal says why (in its error) and sends nothing but,
//     to such a client, the one-byte "secret required" notice;
//   - cutting the stream into different reads never changes the outcome.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collie/rendezvous/tcp_store/store_auth.h"
#include "collie/test/fuzz/fuzz_check.h"

namespace {

using collie::StoreAuthGate;
using collie::fuzz::check;
using collie::fuzz::u32;
using Status = StoreAuthGate::Step::Status;

constexpr const char* kTarget = "store_auth_fuzz";
constexpr size_t kMaxStream = 16 << 10;

const collie::JobSecret& secret() {
  static const collie::JobSecret s = collie::JobSecret::from_hex(
      "ffeeddccbbaa99887766554433221100fedcba98765432100123456789abcdef");
  return s;
}

struct Outcome {
  std::vector<Status> statuses;  // every status but kNeedMore, in order
  size_t consumed = 0;
  bool authenticated = false;
  bool operator==(const Outcome&) const = default;
};

Outcome run(std::vector<uint8_t> stream, size_t chunk, bool compat, bool honest) {
  collie::StoreAuthPolicy policy{secret(), compat};
  StoreAuthGate gate(policy);
  Outcome out;
  std::vector<uint8_t> transcript;  // AUTH1 | Ns, once answered
  size_t arrived = 0, begin = 0, need = 0;
  while (!gate.done()) {
    // One read: up to `chunk` more bytes arrive.
    if (arrived == stream.size()) break;
    arrived += std::min(chunk, stream.size() - arrived);
    for (;;) {
      const size_t buffered = arrived - begin;
      if (buffered == 0 || buffered < need) break;
      const bool proof_next = gate.started();
      const StoreAuthGate::Step step = gate.feed({stream.data() + begin, buffered});
      check(step.consumed <= buffered, kTarget, "took more than was buffered");
      if (step.status == Status::kNeedMore) {
        check(step.need > buffered && step.consumed == 0 && step.reply.empty(), kTarget,
              "asks for no more than it has: the server would spin");
        need = step.need;
        break;
      }
      need = 0;
      const uint8_t* in = stream.data() + begin;
      out.statuses.push_back(step.status);
      out.consumed += step.consumed;
      switch (step.status) {
        case Status::kRefuse: {
          // The only answer a refusal carries: "the secret is required",
          // to a first message that does not open the exchange.
          const bool notice = step.reply.size() == 1 &&
                              step.reply[0] == collie::kStoreRefusedSecretRequired && !proof_next &&
                              in[0] != collie::kStoreAuthQuery;
          check(!step.error.empty() && (step.reply.empty() || notice) && !gate.done() &&
                    !gate.authenticated(),
                kTarget, "a refusal without a reason, or with an answer other than its notice");
          return out;
        }
        case Status::kProgress: {
          check(!proof_next && step.consumed == 37 && in[0] == collie::kStoreAuthQuery &&
                    u32(in + 1) == collie::kStoreAuthMagic,
                kTarget, "answered something that is not AUTH1");
          check(step.reply.size() == 65 && step.reply[0] == collie::kStoreAuthQuery, kTarget,
                "AUTH2 of the wrong shape");
          transcript.assign(in, in + 37);
          transcript.insert(transcript.end(), step.reply.begin() + 1, step.reply.begin() + 33);
          check(secret().verify("collie store server v1", transcript, {step.reply.data() + 33, 32}),
                kTarget, "AUTH2's proof does not verify");
          if (honest) {
            const collie::Sha256Digest proof = secret().prove("collie store client v1", transcript);
            stream.insert(stream.begin() + static_cast<std::ptrdiff_t>(begin + 37), proof.begin(),
                          proof.end());
            arrived += proof.size();  // it arrives with what was already read
          }
          break;
        }
        case Status::kDone:
          check(gate.done(), kTarget, "kDone but not done()");
          if (gate.authenticated()) {
            check(proof_next && step.consumed == 32 && transcript.size() == 69, kTarget,
                  "authenticated without the whole exchange");
            const collie::Sha256Digest want = secret().prove("collie store client v1", transcript);
            check(std::equal(want.begin(), want.end(), in), kTarget, "authenticated a wrong proof");
            check(step.reply.size() == 1 && step.reply[0] == collie::kStoreAuthAccepted, kTarget,
                  "no acceptance byte");
          } else {
            check(compat && !proof_next && step.consumed == 0 && in[0] != collie::kStoreAuthQuery &&
                      step.reply.empty(),
                  kTarget,
                  "admitted unauthenticated outside compatibility mode, or took TCPStore bytes");
          }
          out.authenticated = gate.authenticated();
          break;
        case Status::kNeedMore: break;
      }
      begin += step.consumed;
      if (gate.done()) {
        check(gate.feed({stream.data() + begin, arrived - begin}).consumed == 0, kTarget,
              "took bytes after the exchange (they are TCPStore requests)");
        break;
      }
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t mode = data[0];
  const size_t chunk = data[1] == 0 ? kMaxStream : data[1];
  std::vector<uint8_t> stream(data + 2, data + 2 + std::min(size - 2, kMaxStream));
  if ((mode & 4) && stream.size() >= 5) {
    stream[0] = collie::kStoreAuthQuery;
    for (int i = 0; i < 4; ++i)
      stream[1 + i] = static_cast<uint8_t>(collie::kStoreAuthMagic >> (8 * i));
  }
  const bool compat = mode & 1, honest = mode & 2;
  const Outcome cut = run(stream, chunk, compat, honest);
  const Outcome whole = run(stream, kMaxStream, compat, honest);
  check(cut == whole, kTarget, "cutting the stream differently changed the outcome");
  return 0;
}
