// SHA-256 and HMAC-SHA256 against published vectors (FIPS 180-4 examples,
// RFC 4231) and against Python's hashlib/hmac on random inputs; the handshakes'
// proofs against fixed vectors.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <random>
#include <sstream>

#include "collie/base/error.h"
#include "collie/base/sha256.h"
#include "collie/collectives/transport/peer_auth.h"
#include "collie/rendezvous/env/job_secret.h"
#include "collie/rendezvous/tcp_store/store_auth.h"
#include "collie/test/support/skip.h"
#include "collie/test/support/subprocess.h"

using namespace collie;

namespace {

std::vector<uint8_t> unhex(const std::string& h) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < h.size(); i += 2)
    out.push_back(static_cast<uint8_t>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}
std::string sha(std::string_view s) { return to_hex(Sha256().update(s).finish()); }
std::string hmac(const std::vector<uint8_t>& key, const std::vector<uint8_t>& data) {
  return to_hex(HmacSha256(key).update(data).finish());
}

}  // namespace

TEST_CASE("SHA-256 matches FIPS 180-4's examples", "[security][sha256]") {
  CHECK(sha("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // One million 'a's, fed in uneven pieces so that block boundaries fall
  // everywhere.
  Sha256 h;
  const std::string chunk(997, 'a');
  size_t left = 1'000'000;
  while (left > 0) {
    const size_t n = std::min(left, chunk.size());
    h.update(std::string_view(chunk).substr(0, n));
    left -= n;
  }
  CHECK(to_hex(h.finish()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Lengths around the padding boundary (55, 56, 63, 64 bytes) against a
  // one-shot digest of the same bytes fed byte by byte.
  for (size_t len : {55, 56, 57, 63, 64, 65, 119, 120}) {
    const std::string s(len, 'x');
    Sha256 bytewise;
    for (char c : s) bytewise.update(std::string_view(&c, 1));
    CHECK(to_hex(bytewise.finish()) == sha(s));
  }
}

TEST_CASE("HMAC-SHA256 matches RFC 4231", "[security][sha256]") {
  // Test case 1: 20-byte key of 0x0b, "Hi There".
  CHECK(hmac(std::vector<uint8_t>(20, 0x0b), unhex("4869205468657265")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: key "Jefe".
  CHECK(
      hmac(unhex("4a656665"), unhex("7768617420646f2079612077616e7420666f72206e6f7468696e673f")) ==
      "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 3: 20 bytes of 0xaa, 50 bytes of 0xdd.
  CHECK(hmac(std::vector<uint8_t>(20, 0xaa), std::vector<uint8_t>(50, 0xdd)) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // An empty key (zero-padded to a block, RFC 2104), against Python's hmac.
  CHECK(hmac({}, unhex("616263")) ==
        "fd7adb152c05ef80dccf50a1fa4c05d5a3ec6da95575fc312ae7c5d091836351");
  // Test case 6: a 131-byte key (hashed first), longer than a block.
  const std::string msg6 = "Test Using Larger Than Block-Size Key - Hash Key First";
  CHECK(hmac(std::vector<uint8_t>(131, 0xaa), std::vector<uint8_t>(msg6.begin(), msg6.end())) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("SHA-256 and HMAC agree with Python's hashlib and hmac", "[security][sha256]") {
  if (::access("/usr/bin/python3", X_OK) != 0) test::skip_test("no /usr/bin/python3");
  std::mt19937 rng(12345);
  std::ostringstream script, expected;
  script << "import hashlib, hmac\n";
  for (int i = 0; i < 20; ++i) {
    std::vector<uint8_t> key(rng() % 150), data(rng() % 300);
    for (auto& b : key) b = static_cast<uint8_t>(rng());
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    script << "print(hashlib.sha256(bytes.fromhex('" << to_hex(data) << "')).hexdigest(), "
           << "hmac.new(bytes.fromhex('" << to_hex(key) << "'), bytes.fromhex('" << to_hex(data)
           << "'), 'sha256').hexdigest())\n";
    expected << to_hex(Sha256::digest(data)) << " " << hmac(key, data) << "\n";
  }
  auto p = test::Subprocess::spawn({"/usr/bin/python3", "-c", script.str()});
  REQUIRE(p.wait(std::chrono::seconds(60)).ok());
  CHECK(p.out() == expected.str());
}

TEST_CASE("job secrets parse 64 hex digits and prove with distinct labels", "[security][secret]") {
  const JobSecret a = JobSecret::generate();
  const JobSecret b = JobSecret::generate();
  CHECK(a.is_set());
  CHECK_FALSE(JobSecret().is_set());
  CHECK(a.to_hex().size() == 64);
  CHECK(a.to_hex() != b.to_hex());
  CHECK(JobSecret::from_hex(a.to_hex()).to_hex() == a.to_hex());
  CHECK_THROWS_AS(JobSecret::from_hex("abc"), InvalidArgument);
  CHECK_THROWS_AS(JobSecret::from_hex(std::string(63, 'a') + "g"), InvalidArgument);
  // The message never quotes the value.
  try {
    JobSecret::from_hex(std::string(63, '7') + "z");
  } catch (const InvalidArgument& e) {
    CHECK(std::string(e.what()).find("777") == std::string::npos);
  }
  const std::vector<uint8_t> t{1, 2, 3};
  const auto proof = a.prove("x", t);
  CHECK(a.verify("x", t, proof));
  CHECK_FALSE(a.verify("y", t, proof));  // another role's label
  CHECK_FALSE(b.verify("x", t, proof));  // another job's secret
  // The label length is part of the MAC: ("ab", "c...") is not ("a", "bc...").
  const std::vector<uint8_t> tc{'c'};
  const std::vector<uint8_t> tbc{'b', 'c'};
  CHECK(a.prove("ab", tc) != a.prove("a", tbc));
}

// The handshakes' wire format, pinned: ranks built before and after a change
// of the HMAC code must still authenticate each other. The proofs of a known
// secret over a known transcript are fixed values (from Python's hmac:
// hmac.new(K, bytes([len(label)]) + label + transcript, 'sha256')), and both
// acceptors' AUTH2 carry HMAC(K, u8 len(label) | label | AUTH1 | nonce) as
// docs/security.md spells it, computed here from the bytes alone.
TEST_CASE("handshake proofs match fixed vectors and the documented layout",
          "[security][sha256][secret]") {
  const JobSecret secret = JobSecret::from_hex(
      "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", "the test");
  std::vector<uint8_t> fixed(37);
  for (size_t i = 0; i < fixed.size(); ++i) fixed[i] = static_cast<uint8_t>(0x40 + i);
  fixed.insert(fixed.end(), 32, 0xee);
  CHECK(to_hex(secret.prove("collie data acceptor v1", fixed)) ==
        "b83eaeeb605e3d9a172aaaca9057775ab5343edcff8dae23269306073174ea4e");
  CHECK(to_hex(secret.prove("collie data connector v1", fixed)) ==
        "4ccd4adc0010ff8e1ea9f88a45047512ae74ad1621343dfbef47c6b66dba41c9");
  CHECK(to_hex(secret.prove("collie store server v1", fixed)) ==
        "7f5199dddac14fdb5b82973825d217d21ea0736e2d907a750cc856b76f52aef5");
  CHECK(to_hex(secret.prove("collie store client v1", fixed)) ==
        "d583bddf0787742f192a3f4f626fb0da356234682f28bc7a3b0f096112d9db2d");

  const std::vector<uint8_t> key = unhex(secret.to_hex());
  // HMAC(K, label, AUTH1 | nonce) from the documented layout.
  auto spec_mac = [&](std::string_view label, const std::vector<uint8_t>& auth1,
                      std::span<const uint8_t> nonce) {
    const uint8_t len = static_cast<uint8_t>(label.size());
    return HmacSha256(key).update({&len, 1}).update(label).update(auth1).update(nonce).finish();
  };
  auto le32 = [](std::vector<uint8_t>& out, uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };

  SECTION("the store's gate") {
    StoreAuthPolicy policy{secret, false};
    StoreAuthGate gate(policy);
    std::vector<uint8_t> auth1{kStoreAuthQuery};
    le32(auth1, kStoreAuthMagic);
    auth1.insert(auth1.end(), 32, 0x11);  // Nc
    auto step = gate.feed(auth1);
    REQUIRE(step.status == StoreAuthGate::Step::Status::kProgress);
    REQUIRE(step.reply.size() == 65);
    const std::span<const uint8_t> ns(step.reply.data() + 1, 32);
    const Sha256Digest server = spec_mac("collie store server v1", auth1, ns);
    CHECK(std::equal(server.begin(), server.end(), step.reply.begin() + 33));
    const Sha256Digest client = spec_mac("collie store client v1", auth1, ns);
    step = gate.feed(client);
    CHECK(step.status == StoreAuthGate::Step::Status::kDone);
    CHECK(gate.authenticated());
    CHECK(step.reply == Bytes{kStoreAuthAccepted});
  }
  SECTION("the data connections' acceptor") {
    const PeerIdentity self{0x01020304, 3, 0, "127.0.0.1:1"};
    PeerAuthAcceptor acc(secret, self);
    std::vector<uint8_t> auth1;
    for (uint32_t v : {kPeerAuthMagic, kPeerAuthVersion, self.group, 3u, 2u, 0u}) le32(auth1, v);
    auth1.insert(auth1.end(), 32, 0x22);  // Nc
    auto step = acc.feed(auth1);
    REQUIRE(step.status == PeerAuthAcceptor::Step::Status::kReply);
    REQUIRE(step.reply.size() == 64);
    const std::span<const uint8_t> na(step.reply.data(), 32);
    const Sha256Digest acceptor = spec_mac("collie data acceptor v1", auth1, na);
    CHECK(std::equal(acceptor.begin(), acceptor.end(), step.reply.begin() + 32));
    const Sha256Digest connector = spec_mac("collie data connector v1", auth1, na);
    step = acc.feed(connector);
    CHECK(step.status == PeerAuthAcceptor::Step::Status::kDone);
    CHECK(acc.rank() == 2);
  }
}
