// A local process that forges the shared-memory set-up (collectives/transport/shm/
// shm_channel.h) never crashes the rank that accepts it: every size the
// offer claims is checked against the memfd itself (fstat) before it is
// mapped, and the segment must be sealed against shrinking, so that a peer
// cannot cut it short under a mapping later. Each case forges one offer on a
// Unix socket pair in a child process, which would die of SIGBUS if the
// acceptor mapped past the end of the file.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "collie/base/error.h"
#include "collie/collectives/transport/shm/shm_channel.h"
#include "collie/collectives/transport/shm/shm_ring.h"
#include "collie/test/support/child.h"
#include "collie/test/support/subprocess.h"

using namespace collie;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

// The set-up messages as they travel (a forger writes these bytes).
struct ForgedOffer {
  uint32_t magic = 0x434c4953;  // "CLIS"
  uint32_t status = 0;          // a segment is attached
  uint64_t ring_bytes;
  uint64_t probe_address = 0;
  uint64_t probe_value = 0;
};
struct ForgedAnswer {
  uint32_t magic, status, cma, reserved;
  uint64_t probe_address, probe_value;
};

void send_offer(int sock, const ForgedOffer& offer, int fd) {
  iovec iov{const_cast<ForgedOffer*>(&offer), sizeof offer};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  if (::sendmsg(sock, &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof offer))
    throw Error(std::string("sendmsg: ") + std::strerror(errno));
}

// args[0]: what the forger attaches:
//   empty    a memfd of 0 bytes for rings of 4096 (the reported SIGBUS)
//   short    a memfd one page shorter than the segment the offer implies
//   unsealed a memfd of the right size that its sender can still shrink
//   file     a regular file of the right size (no seals possible)
// Prints "refused: <why>" and exits 0 when the acceptor refuses; exits 1 if
// it accepted.
COLLIE_TEST_CHILD(forge_shm_offer) {
  const std::string mode = args.at(0);
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return 2;
  UniqueFd acceptor(pair[0]);
  UniqueFd forger(pair[1]);
  std::string why;
  std::unique_ptr<Channel> channel;
  std::string error;
  std::thread accept([&] {
    try {
      channel = shm_accept(acceptor, Deadline(10s), "rank 1 (a forger)", &why);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  const size_t ring = 4096;
  const size_t segment = shm_segment_bytes(ring);
  int fd = -1;
  if (mode == "file") {
    char path[] = "/tmp/collie-forged-XXXXXX";
    fd = ::mkstemp(path);
    ::unlink(path);
  } else {
    fd = ::memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  }
  if (fd < 0) return 2;
  size_t size = 0;
  if (mode == "short") size = segment - 4096;
  if (mode == "unsealed" || mode == "file") size = segment;
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) return 2;
  send_offer(forger.get(), ForgedOffer{.ring_bytes = ring}, fd);
  ::close(fd);
  ForgedAnswer answer{};
  if (::recv(forger.get(), &answer, sizeof answer, MSG_WAITALL) != sizeof answer) return 2;
  ForgedAnswer verdict{answer.magic, 1, 0, 0, 0, 0};
  (void)::send(forger.get(), &verdict, sizeof verdict, MSG_NOSIGNAL);
  accept.join();
  if (!error.empty()) {
    std::printf("threw: %s\n", error.c_str());
    return 3;
  }
  if (channel) {
    std::printf("accepted\n");
    return 1;
  }
  std::printf("refused: %s\n", why.c_str());
  return 0;
}

std::string forge(const std::string& mode) {
  auto child = test::Subprocess::spawn(test::child_argv("forge_shm_offer", {mode}));
  const ExitStatus st = child.wait(30s);
  INFO(mode << ": " << child.out() << child.err());
  REQUIRE(st.signal == 0);  // SIGBUS here is the bug
  REQUIRE(st.exit_code == 0);
  return child.out();
}

}  // namespace

TEST_CASE("a forged shared-memory offer is refused, never mapped past its end", "[security][shm]") {
  SECTION("a memfd of 0 bytes claiming rings of 4096") {
    const std::string out = forge("empty");
    CHECK_THAT(out, Contains("rank 1 (a forger)"));
    CHECK_THAT(out, Contains("0 bytes"));
    CHECK_THAT(out, Contains(std::to_string(shm_segment_bytes(4096))));
  }
  SECTION("a memfd one page short") {
    CHECK_THAT(forge("short"), Contains(std::to_string(shm_segment_bytes(4096) - 4096)));
  }
  SECTION("a memfd its sender can still shrink") {
    CHECK_THAT(forge("unsealed"), Contains("not sealed against shrinking"));
  }
  SECTION("a regular file instead of a memfd") {
    CHECK_THAT(forge("file"), Contains("not sealed against shrinking"));
  }
}
