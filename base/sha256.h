// SHA-256 and HMAC-SHA256, the only cryptography collie needs: the job
// secret's challenge-response (docs/security.md) proves knowledge of a key
// over fresh nonces. Both are OpenSSL's libcrypto (EVP digest and EVP_MAC
// "HMAC"), behind this small interface so that callers, and consumers of
// the installed headers, need no OpenSSL headers of their own.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

// OpenSSL's context types (EVP_MD_CTX and EVP_MAC_CTX in <openssl/types.h>),
// declared here so that this header does not include OpenSSL's.
struct evp_md_ctx_st;
struct evp_mac_ctx_st;

namespace collie {

using Sha256Digest = std::array<uint8_t, 32>;

// Frees an OpenSSL context (defined in sha256.cc).
struct OpenSslCtxFree {
  void operator()(evp_md_ctx_st* ctx) const;
  void operator()(evp_mac_ctx_st* ctx) const;
};

// Incremental SHA-256 (FIPS 180-4). Throws Error if libcrypto fails (it
// does not with the default provider, which every OpenSSL 3 has).
class Sha256 {
 public:
  Sha256();
  Sha256& update(std::span<const uint8_t> data);
  Sha256& update(std::string_view s) {
    return update({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  }
  // Returns the digest; the object must not be updated afterwards.
  Sha256Digest finish();

  static Sha256Digest digest(std::span<const uint8_t> data) {
    return Sha256().update(data).finish();
  }

 private:
  std::unique_ptr<evp_md_ctx_st, OpenSslCtxFree> ctx_;
};

// HMAC-SHA256 (RFC 2104) of the concatenation of what is fed to update()
// under `key` (any length; keys longer than the 64-byte block are hashed
// first, as RFC 2104 says).
class HmacSha256 {
 public:
  explicit HmacSha256(std::span<const uint8_t> key);
  HmacSha256& update(std::span<const uint8_t> data);
  HmacSha256& update(std::string_view s) {
    return update({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  }
  // Returns the MAC; the object must not be updated afterwards.
  Sha256Digest finish();

 private:
  std::unique_ptr<evp_mac_ctx_st, OpenSslCtxFree> ctx_;
};

// Compares two equally long byte strings in time independent of where they
// differ (CRYPTO_memcmp), so that a remote peer cannot find a valid MAC byte
// by byte. Different lengths compare unequal.
bool constant_time_equal(std::span<const uint8_t> a, std::span<const uint8_t> b);

std::string to_hex(std::span<const uint8_t> bytes);

}  // namespace collie
