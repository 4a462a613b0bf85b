#include "collie/base/sha256.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie {
namespace {

// Throws Error naming the libcrypto call that failed and OpenSSL's reason.
[[noreturn]] void fail(const char* what) {
  char reason[256] = "no reason given";
  if (const unsigned long e = ERR_get_error(); e != 0) ERR_error_string_n(e, reason, sizeof reason);
  ERR_clear_error();
  throw Error(str_cat("OpenSSL ", what, " failed: ", reason));
}

void check(int ok, const char* what) {
  if (ok != 1) fail(what);
}

// Fetched once per process: an explicit fetch saves the provider look-up
// that a name or EVP_sha256() costs at every init. Fetched algorithms are
// immutable and may be shared between threads.
const EVP_MD* sha256_md() {
  static EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  if (md == nullptr) fail("EVP_MD_fetch(SHA256)");
  return md;
}

EVP_MAC* hmac_mac() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (mac == nullptr) fail("EVP_MAC_fetch(HMAC)");
  return mac;
}

}  // namespace

void OpenSslCtxFree::operator()(evp_md_ctx_st* ctx) const { EVP_MD_CTX_free(ctx); }
void OpenSslCtxFree::operator()(evp_mac_ctx_st* ctx) const { EVP_MAC_CTX_free(ctx); }

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_) fail("EVP_MD_CTX_new");
  check(EVP_DigestInit_ex2(ctx_.get(), sha256_md(), nullptr), "EVP_DigestInit_ex2(SHA256)");
}

Sha256& Sha256::update(std::span<const uint8_t> data) {
  check(EVP_DigestUpdate(ctx_.get(), data.data(), data.size()), "EVP_DigestUpdate");
  return *this;
}

Sha256Digest Sha256::finish() {
  Sha256Digest out;
  unsigned int n = 0;
  check(EVP_DigestFinal_ex(ctx_.get(), out.data(), &n), "EVP_DigestFinal_ex");
  if (n != out.size()) throw Error(str_cat("OpenSSL SHA-256 gave ", n, " bytes, not 32"));
  return out;
}

HmacSha256::HmacSha256(std::span<const uint8_t> key) : ctx_(EVP_MAC_CTX_new(hmac_mac())) {
  if (!ctx_) fail("EVP_MAC_CTX_new(HMAC)");
  char digest_name[] = "SHA256";
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0),
      OSSL_PARAM_construct_end()};
  // An empty key is valid HMAC (RFC 2104 pads it with zeros), but OpenSSL
  // reads a null pointer as "no key": give it a non-null one.
  static constexpr uint8_t kNoKey = 0;
  check(EVP_MAC_init(ctx_.get(), key.empty() ? &kNoKey : key.data(), key.size(), params),
        "EVP_MAC_init(HMAC-SHA256)");
}

HmacSha256& HmacSha256::update(std::span<const uint8_t> data) {
  check(EVP_MAC_update(ctx_.get(), data.data(), data.size()), "EVP_MAC_update");
  return *this;
}

Sha256Digest HmacSha256::finish() {
  Sha256Digest out;
  size_t n = 0;
  check(EVP_MAC_final(ctx_.get(), out.data(), &n, out.size()), "EVP_MAC_final");
  if (n != out.size()) throw Error(str_cat("OpenSSL HMAC-SHA256 gave ", n, " bytes, not 32"));
  return out;
}

bool constant_time_equal(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string to_hex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

}  // namespace collie
