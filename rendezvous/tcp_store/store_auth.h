// Authenticating TcpStore connections with the job secret
// (docs/security.md "The agent store").
//
// A collie client that has a secret opens its connection with a collie-only
// exchange, before the dialect probe or VALIDATE:
//
//   client -> server  AUTH1  0xA5, u32 magic "CLS1", client nonce Nc (37 bytes)
//   server -> client  AUTH2  0xA5, server nonce Ns, HMAC(K, "collie store server v1" | AUTH1 | Ns)
//   client -> server  AUTH3  HMAC(K, "collie store client v1" | AUTH1 | Ns)
//   server -> client  0x00   accepted (a refusal closes the connection)
//
// 0xA5 is no query type of either TCPStore dialect, so a torch server drops
// such a connection (the client then reports that the server does not
// authenticate), and a collie server without a secret does the same.
//
// A server with a secret refuses, with a WARN line naming the client's
// address, every connection that does not open this way (torch 2.x and
// 1.13 clients, collie clients without a secret), unless it runs in torch
// compatibility mode, where such connections are served unauthenticated.
// A torch 2.x client is refused at its first request, after its PING is
// answered: torch retries a failed VALIDATE/PING for its whole timeout (30
// minutes under init_process_group), but raises at once when a request
// fails.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "collie/base/deadline.h"
#include "collie/rendezvous/env/job_secret.h"
#include "collie/rendezvous/store.h"
#include "collie/rendezvous/tcp_store/tcp_store_socket.h"

namespace collie {

inline constexpr uint8_t kStoreAuthQuery = 0xA5;
inline constexpr uint32_t kStoreAuthMagic = 0x434c5331;  // "CLS1"
inline constexpr uint8_t kStoreAuthAccepted = 0x00;

// Why a collie server closes a connection it will not serve: one byte, sent
// in place of any answer just before the close, so that a collie client can
// name the cause (others just see the close). No answer a collie client
// waits for during its handshake (AUTH2's 0xA5, the verdict 0x00, the
// probe's 0x00/0x01/0xC0, the first byte of its PING nonce) is in 0xB0-0xBF.
//   busy:            it did not prove the secret within the server's
//                    handshake deadline, or was the oldest of too many
//                    connections doing so (a flood): try again
//   full:            the server serves max_connections clients already
//   no secret:       the client sent AUTH1 to a server without a secret
//   secret required: a client without the secret, to a server requiring it
inline constexpr uint8_t kStoreRefusedBusy = 0xB5;
inline constexpr uint8_t kStoreRefusedFull = 0xB6;
inline constexpr uint8_t kStoreRefusedNoSecret = 0xB7;
inline constexpr uint8_t kStoreRefusedSecretRequired = 0xB8;

bool is_store_refusal(uint8_t b);
// What a refusal byte means to the client, as the tail of its error
// message ("the server ...").
std::string describe_store_refusal(uint8_t notice);

// What a server requires of its clients.
struct StoreAuthPolicy {
  JobSecret secret;                     // none: no authentication at all
  bool accept_unauthenticated = false;  // compatibility mode: torch clients too
};

// The server's side of one connection: fed the connection's first bytes
// until it has decided. Pure (no socket), so it is unit-testable.
class StoreAuthGate {
 public:
  struct Step {
    enum class Status { kNeedMore, kProgress, kDone, kRefuse };
    Status status = Status::kNeedMore;
    size_t consumed = 0;  // input bytes used
    size_t need = 0;      // kNeedMore: feed again once this many are buffered
    Bytes reply;          // to send to the client
    std::string error;    // kRefuse: why, for the WARN line
  };

  explicit StoreAuthGate(const StoreAuthPolicy& policy) : policy_(policy) {}
  // True once the connection is authenticated (or admitted unauthenticated
  // in compatibility mode); from then on its bytes are TCPStore requests.
  bool done() const { return state_ == State::kDone; }
  bool authenticated() const { return authenticated_; }
  // Whether the client began the exchange (sent AUTH1).
  bool started() const { return state_ != State::kFirst; }
  Step feed(std::span<const uint8_t> in);

 private:
  // kTorchAnswered: a torch 2.x client without the secret got its PING
  // answered; its first request is refused (see feed()).
  enum class State { kFirst, kProof, kTorchAnswered, kDone };
  const StoreAuthPolicy& policy_;
  State state_ = State::kFirst;
  bool authenticated_ = false;
  Bytes transcript_;  // AUTH1 | Ns
};

// The client's side, on a freshly connected socket. Returns kAccepted, or
// kBusy when the server closed the connection with the busy notice (the
// caller tries again). Throws StoreError via `describe` (which prefixes the
// server's address) when the server refuses our proof, cannot prove the
// secret itself, is full, or does not speak this exchange; TimeoutError at
// the deadline.
enum class StoreAuthResult { kAccepted, kBusy };
StoreAuthResult authenticate_store_client(
    StoreSocket& socket, const JobSecret& secret, const Deadline& deadline,
    const std::function<std::string(const std::string&)>& describe);

}  // namespace collie
