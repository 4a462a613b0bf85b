// libFuzzer target for the data connections' receive path: the 40-byte
// WireHeader (collectives/transport/wire.h) as collectives::Connection decodes it from
// a socket, the abort and goodbye frames, and the stash walk a hang-up
// triggers. The bytes arrive through a real socketpair, so the code under
// test is exactly what a rank runs on a connection from a peer.
//
// Input layout: byte 0 is a mode (bit 0: the peer hung up before anything
// was posted, so the receiver first absorbs the stream into its stash, as
// Transport does; bits 1-2: how many receives to post, 1 to 4); byte 1 is
// the element count of the expected all_reduce(float32) (0 to 63); the rest
// is what the peer sent before closing. Promises checked:
//   - a completed receive means the frame on the wire was exactly the
//     expected header followed by its payload, byte for byte, at the right
//     place in the stream (a frame from another call is never data);
//   - an abort text is never longer than its frame says or than what came;
//   - a mismatched header can be described for the error message, whatever
//     its enum bytes hold;
//   - a connection that ended always reports a problem, never a hang.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collie/collectives/transport/connection.h"
#include "collie/collectives/transport/tcp/tcp_channel.h"
#include "collie/collectives/transport/wire.h"
#include "collie/test/fuzz/fuzz_check.h"
#include "collie/test/fuzz/wire_call.h"

using collie::fuzz::fuzz_call;

namespace {

using collie::Connection;
using collie::RecvProblem;
using collie::WireHeader;
using collie::fuzz::check;

constexpr const char* kTarget = "wire_header_fuzz";
constexpr size_t kMaxStream = 64 << 10;  // below any socketpair buffer: the write never blocks

// What a rank puts in an error message about a header it did not expect.
void describe(const WireHeader& h) {
  const std::string text = h.call().describe_with_seq();
  check(!text.empty(), kTarget, "an empty description of a received header");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const bool hung_up_first = data[0] & 1;
  const int receives = 1 + ((data[0] >> 1) & 3);
  const uint64_t count = data[1] % 64;
  const uint32_t payload = static_cast<uint32_t>(count * 4);
  const uint8_t* stream = data + 2;
  const size_t stream_size = std::min(size - 2, kMaxStream);
  const uint32_t group = collie::group_hash("fuzz/group");

  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    collie::fuzz::broken(kTarget, "socketpair");
  int sndbuf = 1 << 20;
  ::setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  for (size_t done = 0; done < stream_size;) {
    const ssize_t n = ::write(fds[1], stream + done, stream_size - done);
    if (n <= 0) collie::fuzz::broken(kTarget, "write to the socketpair");
    done += static_cast<size_t>(n);
  }
  ::close(fds[1]);
  ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  Connection conn(collie::make_local_channel(collie::UniqueFd(fds[0]), "fuzz-peer:1"), 1,
                  "fuzz-peer:1");

  size_t pos = 0;  // where in the stream the next frame starts
  if (hung_up_first) {
    std::string text;
    const RecvProblem p = conn.absorb(&text);
    check(p != RecvProblem::kNone, kTarget, "absorb after EOF reported nothing");
    if (p == RecvProblem::kAbort) {
      check(text.size() <= conn.received_header().payload_bytes && text.size() <= stream_size,
            kTarget, "abort text longer than its frame");
      describe(conn.received_header());
    }
    // Transport's check at a frame boundary: an abort frame next is taken.
    WireHeader h;
    if (conn.at_frame_boundary() && conn.peek_header(&h) && h.magic == collie::kWireMagic &&
        h.frame == static_cast<uint8_t>(collie::FrameType::kAbort)) {
      const std::string abort_text = conn.take_abort_frame();
      const size_t available = stream_size - collie::kHeaderBytes;
      check(abort_text.size() == std::min<size_t>(h.payload_bytes, available), kTarget,
            "take_abort_frame read a different length than the frame and the stream allow");
      pos = collie::kHeaderBytes + abort_text.size();
    }
  }

  for (int i = 0; i < receives; ++i) {
    const WireHeader expected = WireHeader::data(group, fuzz_call(count, i + 1), payload);
    std::vector<uint8_t> buffer(payload);
    conn.post_recv(expected, buffer.data());
    RecvProblem problem = RecvProblem::kNone;
    int err = 0;
    long r = 0;
    // Everything was sent before the close, so each call moves bytes or ends.
    for (int spins = 0; conn.recv_pending() && r >= 0; ++spins) {
      r = conn.progress_recv(&problem, &err);
      check(spins < 100000, kTarget, "progress_recv made no progress on a closed stream");
    }
    if (r < 0) {
      check(problem != RecvProblem::kNone, kTarget, "a failed receive without a problem");
      if (problem == RecvProblem::kAbort) {
        const std::string text = conn.read_abort_text();
        check(text.size() <= conn.received_header().payload_bytes, kTarget,
              "abort text longer than its frame");
      }
      if (problem == RecvProblem::kMismatch || problem == RecvProblem::kAbort)
        describe(conn.received_header());
      return 0;
    }
    const size_t frame = collie::kHeaderBytes + payload;
    check(pos + frame <= stream_size, kTarget, "a receive completed beyond the bytes sent");
    check(std::memcmp(stream + pos, &expected, collie::kHeaderBytes) == 0, kTarget,
          "a receive completed on a header other than the expected one");
    check(payload == 0 ||
              std::memcmp(stream + pos + collie::kHeaderBytes, buffer.data(), payload) == 0,
          kTarget, "the payload received differs from the bytes sent");
    pos += frame;
  }
  return 0;
}
