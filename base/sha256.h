// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), the only cryptography
// collie needs: the job secret's challenge-response (docs/security.md) proves
// knowledge of a key over fresh nonces. Small inputs (tens of bytes) at
// connection set-up, so clarity wins over speed here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace collie {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  Sha256& update(std::span<const uint8_t> data);
  Sha256& update(std::string_view s) {
    return update({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  }
  // Pads and returns the digest; the object must not be updated afterwards.
  Sha256Digest finish();

  static Sha256Digest digest(std::span<const uint8_t> data) {
    return Sha256().update(data).finish();
  }

 private:
  void compress(const uint8_t* block);

  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> block_{};
  size_t block_bytes_ = 0;
  uint64_t total_bytes_ = 0;
};

// HMAC-SHA256 of the concatenation of `parts` under `key` (any length; keys
// longer than the 64-byte block are hashed first, as RFC 2104 says).
class HmacSha256 {
 public:
  explicit HmacSha256(std::span<const uint8_t> key);
  HmacSha256& update(std::span<const uint8_t> data) {
    inner_.update(data);
    return *this;
  }
  HmacSha256& update(std::string_view s) {
    inner_.update(s);
    return *this;
  }
  Sha256Digest finish();

 private:
  Sha256 inner_;
  std::array<uint8_t, 64> outer_key_{};
};

// Compares two equally long byte strings in time independent of where they
// differ, so that a remote peer cannot find a valid MAC byte by byte.
bool constant_time_equal(std::span<const uint8_t> a, std::span<const uint8_t> b);

std::string to_hex(std::span<const uint8_t> bytes);

}  // namespace collie
