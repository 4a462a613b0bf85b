#include "collie/rendezvous/env/job_secret.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/env/shared_secret.h"

namespace collie {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

void random_bytes(std::span<uint8_t> out) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t r = ::getrandom(out.data() + done, out.size() - done, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(str_cat("getrandom failed: ", std::strerror(errno)));
    }
    done += static_cast<size_t>(r);
  }
}

Nonce random_nonce() {
  Nonce n;
  random_bytes(n);
  return n;
}

JobSecret JobSecret::generate() {
  JobSecret s;
  random_bytes(s.key_);
  s.set_ = true;
  return s;
}

JobSecret JobSecret::from_hex(std::string_view hex, const char* where) {
  JobSecret s;
  if (hex.size() != 2 * s.key_.size()) {
    throw InvalidArgument(str_cat(where, " must be ", 2 * s.key_.size(),
                                  " hex digits (256 bits), got ", hex.size(), " characters"));
  }
  for (size_t i = 0; i < s.key_.size(); ++i) {
    const int hi = hex_value(hex[2 * i]);
    const int lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      throw InvalidArgument(
          str_cat(where, " must be hex digits; character ", hi < 0 ? 2 * i : 2 * i + 1, " is not"));
    }
    s.key_[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  s.set_ = true;
  return s;
}

const JobSecret& JobSecret::from_env() {
  // Parsed once: a bad value throws at the first connection that needs it
  // (and again at every later one, since the static is not initialised).
  static const JobSecret secret = [] {
    const char* v = std::getenv(kJobSecretEnv);
    if (v && *v) return from_hex(v);
    // A multi-node job started by a scheduler without collie-run: a shared
    // file, or a secret derived from the job (shared_secret.h).
    if (std::optional<SharedSecret> shared = scheduler_secret()) {
      COLLIE_LOG(kInfo) << "job secret: " << shared->source << " (docs/security.md)";
      return shared->secret;
    }
    COLLIE_LOG(kInfo) << kJobSecretEnv << " is not set: store and data connections are "
                      << "unauthenticated (collie-run sets it; see docs/security.md)";
    return JobSecret();
  }();
  return secret;
}

std::string JobSecret::to_hex() const { return collie::to_hex(key_); }

Sha256Digest JobSecret::prove(std::string_view label, std::span<const uint8_t> transcript) const {
  // The label's length goes first so that no (label, transcript) pair can
  // be re-cut into another.
  const uint8_t label_len = static_cast<uint8_t>(label.size());
  return HmacSha256(key_).update({&label_len, 1}).update(label).update(transcript).finish();
}

bool JobSecret::verify(std::string_view label, std::span<const uint8_t> transcript,
                       std::span<const uint8_t> proof) const {
  const Sha256Digest expected = prove(label, transcript);
  return constant_time_equal(expected, proof);
}

bool store_compat_from_env() {
  const char* v = std::getenv("COLLIE_STORE_COMPAT");
  return v && (std::strcmp(v, "1") == 0 || std::strcmp(v, "true") == 0);
}

}  // namespace collie
