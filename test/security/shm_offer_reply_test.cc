// What a forged shared-memory offer gets back (collectives/transport/shm/
// shm_channel.h): the acceptor's answer to an offer it refuses, or to one
// whose sender's memory it cannot read, is its magic and a refusal and
// zeros, never the address of its probe word (an address of the rank's
// memory, which undoes ASLR for whoever can reach its Unix socket) nor
// bytes left over from anything. Each case forges one offer on a Unix
// socket pair against shm_accept in a thread and reads the raw answer.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <string>
#include <thread>

#include "collie/base/error.h"
#include "collie/base/unique_fd.h"
#include "collie/collectives/transport/shm/shm_channel.h"

using namespace collie;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

constexpr uint32_t kMagic = 0x434c4953;  // "CLIS"

struct ForgedOffer {
  uint32_t magic = kMagic;
  uint32_t status = 0;
  uint64_t ring_bytes = 4096;
  uint64_t probe_address = 0;
  uint64_t probe_value = 0;
};
struct RawAnswer {
  uint32_t magic, status, cma, reserved;
  uint64_t probe_address, probe_value;
};
static_assert(sizeof(ForgedOffer) == 32 && sizeof(RawAnswer) == 32);

void send_offer(int sock, const ForgedOffer& offer, int fd) {
  iovec iov{const_cast<ForgedOffer*>(&offer), sizeof offer};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  if (::sendmsg(sock, &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof offer))
    throw Error(std::string("sendmsg: ") + std::strerror(errno));
}

// A memfd of `bytes`, sealed against shrinking, whose start is collie's
// segment header for rings of `ring` when `header` (the layout of
// SegmentHeader in shm_channel.cc: magic, ring_bytes, nonce, proof).
int forged_segment(size_t bytes, uint64_t ring, bool header) {
  const int fd = ::memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, static_cast<off_t>(bytes)) == 0);
  if (header) {
    const uint64_t words[3] = {0x434c49534d454732, ring, 0x1234};
    REQUIRE(::pwrite(fd, words, sizeof words, 0) == sizeof words);
  }
  REQUIRE(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
  return fd;
}

struct Outcome {
  RawAnswer answer{};
  std::array<uint8_t, sizeof(RawAnswer)> bytes{};
  std::string why;
  bool accepted = false;
};

// Runs shm_accept against one forged offer (with `fd` attached, -1: none)
// and returns the answer exactly as it came over the socket.
Outcome forge(const ForgedOffer& offer, int fd) {
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0);
  UniqueFd acceptor(pair[0]), forger(pair[1]);
  Outcome out;
  std::string error;
  std::thread accept([&] {
    try {
      out.accepted = shm_accept(acceptor, Deadline(10s), "rank 1 (a forger)", &out.why) != nullptr;
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  send_offer(forger.get(), offer, fd);
  if (fd >= 0) ::close(fd);
  const ssize_t got = ::recv(forger.get(), out.bytes.data(), out.bytes.size(), MSG_WAITALL);
  // The verdict: the forger refuses, whatever it was told.
  const RawAnswer verdict{kMagic, 1, 0, 0, 0, 0};
  (void)::send(forger.get(), &verdict, sizeof verdict, MSG_NOSIGNAL);
  accept.join();
  INFO(error);
  REQUIRE(error.empty());
  REQUIRE(got == static_cast<ssize_t>(sizeof(RawAnswer)));
  std::memcpy(&out.answer, out.bytes.data(), sizeof out.answer);
  return out;
}

// The answer to a refusal: magic, status 1, and nothing else but zeros.
void check_bare_refusal(const Outcome& out) {
  INFO("why: " << out.why);
  CHECK_FALSE(out.accepted);
  CHECK(out.answer.magic == kMagic);
  CHECK(out.answer.status == 1);
  std::array<uint8_t, sizeof(RawAnswer) - 8> zeros{};
  CHECK(std::memcmp(out.bytes.data() + 8, zeros.data(), zeros.size()) == 0);
  CHECK(out.answer.probe_address == 0);
  CHECK(out.answer.probe_value == 0);
}

}  // namespace

TEST_CASE("a refused forged shared-memory offer gets no address and no stray bytes back",
          "[security][shm]") {
  SECTION("an offer with no segment attached") {
    ForgedOffer offer;
    offer.status = 1;
    const Outcome out = forge(offer, -1);
    check_bare_refusal(out);
    CHECK_THAT(out.why, Contains("offered no shared-memory segment"));
  }
  SECTION("an offer claiming a segment but attaching none") {
    check_bare_refusal(forge(ForgedOffer{}, -1));
  }
  SECTION("garbage instead of collie's magic") {
    ForgedOffer offer;
    offer.magic = 0xdeadbeef;
    check_bare_refusal(forge(offer, forged_segment(shm_segment_bytes(4096), 4096, true)));
  }
  SECTION("rings of a size collie never offers") {
    ForgedOffer offer;
    offer.ring_bytes = 4097;
    const Outcome out = forge(offer, forged_segment(shm_segment_bytes(8192), 4097, true));
    check_bare_refusal(out);
    CHECK_THAT(out.why, Contains("4097"));
  }
  SECTION("a segment too short for its rings") {
    check_bare_refusal(forge(ForgedOffer{}, forged_segment(64, 4096, false)));
  }
  SECTION("a segment of the right size without collie's header") {
    const Outcome out = forge(ForgedOffer{}, forged_segment(shm_segment_bytes(4096), 4096, false));
    check_bare_refusal(out);
    CHECK_THAT(out.why, Contains("collie's header"));
  }
  SECTION("an offer that says its sender had no memory for the rings") {
    ForgedOffer offer;
    offer.status = 2;
    offer.ring_bytes = uint64_t{1} << 30;
    const Outcome out = forge(offer, -1);
    check_bare_refusal(out);
    CHECK_THAT(out.why, Contains("1 GiB") && Contains("COLLIE_SHM_BYTES"));
  }
}

TEST_CASE("a well-formed forged segment whose sender's memory cannot be read gets no address",
          "[security][shm]") {
  // The acceptor maps and proves the segment (status 0), but the forger's
  // probe word is at address 0: no cross-memory attach, and so no reason
  // to tell the forger where the acceptor's own probe word lives.
  const Outcome out = forge(ForgedOffer{}, forged_segment(shm_segment_bytes(4096), 4096, true));
  INFO("why: " << out.why);
  CHECK_FALSE(out.accepted);  // the forger's verdict refused it
  CHECK(out.answer.magic == kMagic);
  CHECK(out.answer.status == 0);
  CHECK(out.answer.cma == 0);
  CHECK(out.answer.reserved == 0);
  CHECK(out.answer.probe_address == 0);
  CHECK(out.answer.probe_value == 0);
}

TEST_CASE("a genuine shared-memory pair still gets cross-memory attach", "[security][shm]") {
  // The addresses withheld from forgers still reach a real peer: both ends
  // of a pair set up by shm_connect and shm_accept read each other's probe
  // word (here one process, so each reads its own pid's memory).
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0);
  UniqueFd a(pair[0]), b(pair[1]);
  std::unique_ptr<Channel> accepted;
  std::string accept_why;
  std::thread accept([&] { accepted = shm_accept(b, Deadline(10s), "rank 0", &accept_why); });
  std::string connect_why;
  std::unique_ptr<Channel> connected = shm_connect(a, 4096, Deadline(10s), "rank 1", &connect_why);
  accept.join();
  INFO(connect_why << " / " << accept_why);
  REQUIRE(connected);
  REQUIRE(accepted);
  REQUIRE(connected->shared_memory());
  REQUIRE(accepted->shared_memory());
  CHECK(connected->shared_memory()->peer_pid() == ::getpid());
  CHECK(accepted->shared_memory()->peer_pid() == ::getpid());
}
