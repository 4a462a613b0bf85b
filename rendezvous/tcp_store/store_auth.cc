#include "collie/rendezvous/tcp_store/store_auth.h"

#include <cstring>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/tcp_store/store_protocol.h"

namespace collie {
namespace {

constexpr size_t kAuth1Bytes = 1 + 4 + kNonceBytes;   // 37
constexpr size_t kAuth2Bytes = 1 + kNonceBytes + 32;  // 65
constexpr size_t kAuth3Bytes = 32;
constexpr const char* kServerLabel = "collie store server v1";
constexpr const char* kClientLabel = "collie store client v1";
// A 2.x client's opening: VALIDATE (type, u32 magic) and PING (type, u32
// nonce), which torch's TCPStore and collie's client send together.
constexpr size_t kV2HelloBytes = 10;
constexpr const char* kSecretRequired =
    ": this store requires the job secret (docs/security.md; torch clients need collie-run "
    "--store-compat or COLLIE_STORE_COMPAT=1, which opens the store to anyone who can reach it)";

uint32_t get_u32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

// What an unauthenticated first byte most likely is, for the refusal.
std::string describe_first_message(std::span<const uint8_t> in) {
  const uint8_t b = in[0];
  if (b == 0x00 && in.size() >= 5 && get_u32(in.data() + 1) == 0x3C85F7CE)
    return "a torch 2.x client (VALIDATE) without the job secret";
  if (b == 0x04)
    return "a collie client without COLLIE_JOB_SECRET (dialect probe), or a torch 1.13 client";
  if (b <= 0x08) return "a torch 1.13 client (or another client without the job secret)";
  return str_cat("not a TCPStore client (first byte 0x", to_hex({&b, 1}), ")");
}

bool is_v2_validate(std::span<const uint8_t> in) {
  return in.size() >= 5 && in[0] == static_cast<uint8_t>(store_protocol::V2Query::kValidate) &&
         get_u32(in.data() + 1) == store_protocol::kValidationMagic;
}

// torch's TCPStore PINGs with its pid as the nonce, below 2^22 (Linux's
// pid_max limit), so its top byte is 0; collie's client never sends a
// nonce whose top byte is 0 (tcp_store_client.cc), and is told why it is
// refused by the notice instead.
bool is_torch_ping(std::span<const uint8_t> in) {
  return in[5] == static_cast<uint8_t>(store_protocol::V2Query::kPing) && in[9] == 0;
}

}  // namespace

StoreAuthGate::Step StoreAuthGate::feed(std::span<const uint8_t> in) {
  using S = Step::Status;
  Step step;
  switch (state_) {
    case State::kFirst: {
      if (in.empty()) {
        step.need = 1;
        return step;
      }
      if (in[0] != kStoreAuthQuery) {
        if (policy_.accept_unauthenticated) {
          state_ = State::kDone;  // compatibility mode: serve it as TCPStore
          step.status = S::kDone;
          return step;
        }
        // Whether it is a 2.x VALIDATE is known from 5 bytes on, however
        // the stream was cut: wait for them rather than refuse a prefix.
        if (in[0] == static_cast<uint8_t>(store_protocol::V2Query::kValidate) && in.size() < 5) {
          step.need = 5;
          return step;
        }
        if (is_v2_validate(in)) {
          if (in.size() < kV2HelloBytes) {
            step.need = kV2HelloBytes;
            return step;
          }
          if (is_torch_ping(in)) {
            // torch's TCPStore retries a connection whose VALIDATE or PING
            // fails for its whole timeout (30 minutes in init_process_group),
            // silently; a failed request after them it raises at once. So
            // its PING is answered (which tells it nothing but that this is
            // a TCPStore) and its first request is refused.
            step.reply.assign(in.begin() + 6, in.begin() + kV2HelloBytes);
            step.consumed = kV2HelloBytes;
            step.status = S::kProgress;
            state_ = State::kTorchAnswered;
            return step;
          }
        }
        step.status = S::kRefuse;
        step.reply.push_back(kStoreRefusedSecretRequired);
        step.error = str_cat(describe_first_message(in), kSecretRequired);
        return step;
      }
      if (in.size() < kAuth1Bytes) {
        step.need = kAuth1Bytes;
        return step;
      }
      if (get_u32(in.data() + 1) != kStoreAuthMagic) {
        step.status = S::kRefuse;
        step.error = "an authentication request with the wrong magic";
        return step;
      }
      const Nonce ns = random_nonce();
      transcript_.assign(in.begin(), in.begin() + kAuth1Bytes);
      transcript_.insert(transcript_.end(), ns.begin(), ns.end());
      const Sha256Digest proof = policy_.secret.prove(kServerLabel, transcript_);
      step.reply.push_back(kStoreAuthQuery);
      step.reply.insert(step.reply.end(), ns.begin(), ns.end());
      step.reply.insert(step.reply.end(), proof.begin(), proof.end());
      step.consumed = kAuth1Bytes;
      step.status = S::kProgress;
      state_ = State::kProof;
      return step;
    }
    case State::kProof: {
      if (in.size() < kAuth3Bytes) {
        step.need = kAuth3Bytes;
        return step;
      }
      if (!policy_.secret.verify(kClientLabel, transcript_, in.first(kAuth3Bytes))) {
        step.status = S::kRefuse;
        step.error =
            "its proof of the job secret is wrong (a client of another job, or a "
            "different COLLIE_JOB_SECRET)";
        return step;
      }
      step.consumed = kAuth3Bytes;
      step.reply.push_back(kStoreAuthAccepted);
      step.status = S::kDone;
      state_ = State::kDone;
      authenticated_ = true;
      Bytes().swap(transcript_);
      return step;
    }
    case State::kTorchAnswered: {
      if (in.empty()) {
        step.need = 1;
        return step;
      }
      // No answer: the close makes torch raise "Connection was likely
      // closed" from this request, in the worker's init_process_group.
      step.status = S::kRefuse;
      step.error = str_cat(
          "a torch 2.x client (VALIDATE) without the job secret, refused at its first request",
          kSecretRequired);
      return step;
    }
    case State::kDone: step.status = S::kDone; return step;
  }
  return step;
}

bool is_store_refusal(uint8_t b) {
  return b == kStoreRefusedBusy || b == kStoreRefusedFull || b == kStoreRefusedNoSecret ||
         b == kStoreRefusedSecretRequired;
}

std::string describe_store_refusal(uint8_t notice) {
  switch (notice) {
    case kStoreRefusedBusy:
      return "the server closed the connection before we proved the job secret: past its "
             "handshake deadline, or to make room among too many connections that have not "
             "proven it (someone may be holding connections open to it without the secret)";
    case kStoreRefusedFull:
      return "the server already serves its max_connections clients (collie-store "
             "--max-connections, TcpStoreServerOptions::max_connections): raise it, or look for "
             "processes holding connections to it";
    case kStoreRefusedNoSecret:
      return "the server runs without a job secret, and this process has COLLIE_JOB_SECRET: "
             "give the store the job's COLLIE_JOB_SECRET, or unset it here to connect without "
             "authentication";
    case kStoreRefusedSecretRequired:
      return "the server requires the job secret, and this process has none: set "
             "COLLIE_JOB_SECRET to the job's secret (the value the store was started with; "
             "docs/security.md)";
  }
  return str_cat("the server refused the connection (notice 0x", to_hex({&notice, 1}), ")");
}

StoreAuthResult authenticate_store_client(
    StoreSocket& socket, const JobSecret& secret, const Deadline& deadline,
    const std::function<std::string(const std::string&)>& describe) {
  auto check = [&](const IoResult& r, const char* step) {
    if (r.ok()) return;
    if (r.kind == IoResult::Kind::kTimeout)
      throw TimeoutError(
          describe(str_cat("authentication (", step, ") got no answer ", deadline.describe())));
    if (r.kind == IoResult::Kind::kClosed) {
      throw StoreError(describe(
          str_cat("the server closed the connection during authentication (", step, "): ",
                  std::strcmp(step, "waiting for acceptance") == 0
                      ? "it refused our proof, so it has a different COLLIE_JOB_SECRET"
                      : "it does not take a job secret (a torch TCPStore, or an older collie "
                        "store); unset COLLIE_JOB_SECRET in this process to connect "
                        "unauthenticated")));
    }
    throw StoreError(describe(str_cat("authentication (", step, ") failed: ", r.describe())));
  };
  // A refusal notice in place of an answer: busy is the caller's to retry,
  // the others are final.
  auto refused = [&](uint8_t b) {
    if (!is_store_refusal(b)) return false;
    if (b == kStoreRefusedBusy) return true;
    throw StoreError(describe(describe_store_refusal(b)));
  };
  uint8_t auth1[kAuth1Bytes];
  auth1[0] = kStoreAuthQuery;
  for (int i = 0; i < 4; ++i) auth1[1 + i] = static_cast<uint8_t>(kStoreAuthMagic >> (8 * i));
  const Nonce nc = random_nonce();
  std::memcpy(auth1 + 5, nc.data(), kNonceBytes);
  check(socket.send_all(auth1, sizeof auth1, deadline.when()), "sending our nonce");

  uint8_t auth2[kAuth2Bytes];
  check(socket.recv_exact(auth2, 1, deadline.when()), "reading the server's challenge");
  if (refused(auth2[0])) return StoreAuthResult::kBusy;
  if (auth2[0] != kStoreAuthQuery) {
    throw StoreError(describe(str_cat("unexpected answer 0x", to_hex({auth2, 1}),
                                      " to the authentication request: is this a collie store?")));
  }
  check(socket.recv_exact(auth2 + 1, sizeof auth2 - 1, deadline.when()),
        "reading the server's challenge");
  Bytes transcript(auth1, auth1 + kAuth1Bytes);
  transcript.insert(transcript.end(), auth2 + 1, auth2 + 1 + kNonceBytes);
  if (!secret.verify(kServerLabel, transcript, {auth2 + 1 + kNonceBytes, 32})) {
    throw StoreError(
        describe("the server failed to prove knowledge of the job secret: it belongs "
                 "to another job or has a different COLLIE_JOB_SECRET"));
  }
  const Sha256Digest proof = secret.prove(kClientLabel, transcript);
  check(socket.send_all(proof.data(), proof.size(), deadline.when()), "sending our proof");
  uint8_t verdict = 0xff;
  check(socket.recv_exact(&verdict, 1, deadline.when()), "waiting for acceptance");
  if (refused(verdict)) return StoreAuthResult::kBusy;
  if (verdict != kStoreAuthAccepted) {
    throw StoreError(
        describe(str_cat("unexpected verdict 0x", to_hex({&verdict, 1}), " after authentication")));
  }
  return StoreAuthResult::kAccepted;
}

}  // namespace collie
