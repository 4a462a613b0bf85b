// The job secret: 256 random bits that every process of one job shares and
// nobody else has. collie-run generates one per job and hands it to its
// workers as COLLIE_JOB_SECRET (64 hex digits); jobs started otherwise may
// set it themselves. With a secret, every data connection between ranks and
// every connection to the agent store proves knowledge of it with an
// HMAC-SHA256 challenge-response over fresh nonces (the secret itself never
// crosses the wire); without one, collie runs unauthenticated, as torch does.
// docs/security.md has the threat model and the messages byte by byte.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "collie/base/sha256.h"

namespace collie {

inline constexpr const char* kJobSecretEnv = "COLLIE_JOB_SECRET";
inline constexpr size_t kNonceBytes = 32;
using Nonce = std::array<uint8_t, kNonceBytes>;

class JobSecret {
 public:
  JobSecret() = default;  // none: connections are not authenticated

  // A fresh random secret (getrandom).
  static JobSecret generate();
  // Parses 64 hex digits; throws InvalidArgument naming `where` otherwise
  // (the value itself is never printed).
  static JobSecret from_hex(std::string_view hex, const char* where = kJobSecretEnv);
  // COLLIE_JOB_SECRET, or none when it is unset or empty. Read once per
  // process; the first call that finds none logs at INFO that connections
  // are unauthenticated.
  static const JobSecret& from_env();

  bool is_set() const { return set_; }
  explicit operator bool() const { return set_; }
  std::string to_hex() const;

  // HMAC-SHA256 under the secret of `label` followed by `parts`: the proof
  // one side of a handshake sends. Distinct labels per protocol and role
  // keep a proof from being replayed or reflected in another place.
  Sha256Digest prove(std::string_view label, std::span<const uint8_t> transcript) const;
  // Whether `proof` is prove(label, transcript), in constant time.
  bool verify(std::string_view label, std::span<const uint8_t> transcript,
              std::span<const uint8_t> proof) const;

 private:
  std::array<uint8_t, 32> key_{};
  bool set_ = false;
};

// `n` random bytes from getrandom(2) (the kernel's CSPRNG); throws on failure.
void random_bytes(std::span<uint8_t> out);
Nonce random_nonce();

// COLLIE_STORE_COMPAT=1: the store also admits clients without the secret
// (torch's TCPStore clients), for torch workers under collie-run.
bool store_compat_from_env();

}  // namespace collie
