#include "collie/rendezvous/tcp_store/tcp_store_detect.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "collie/rendezvous/tcp_store/store_protocol.h"

namespace collie {
namespace {

using namespace std::chrono_literals;

// Every server but torch's libuv one answers the probe at once (well under
// a millisecond on a quiet network); past this, look for libuv as well.
constexpr Timeout kProbeGrace = 100ms;
// How long each PING gets before the next one follows it. libuv reads what
// has arrived in one go, so two PINGs that land together count as one
// message it holds; one that lands apart makes it answer them all.
constexpr Timeout kPingInterval = 50ms;

Clock::time_point soon(const Deadline& deadline, Timeout after) {
  return std::min(deadline.when(), Clock::now() + after);
}

ProbeOutcome read_answer(StoreSocket& probe, IoResult readable, const Deadline& deadline) {
  ProbeOutcome out;
  out.io = readable.ok() ? probe.recv_exact(&out.answer, 1, deadline.when()) : readable;
  return out;
}

}  // namespace

ProbeOutcome await_probe_answer(StoreSocket& probe, const std::string& host, uint16_t port,
                                const Deadline& deadline) {
  IoResult r = probe.wait_readable(soon(deadline, kProbeGrace));
  if (r.kind != IoResult::Kind::kTimeout || deadline.expired())
    return read_answer(probe, r, deadline);

  const uint32_t nonce = (static_cast<uint32_t>(::getpid()) << 8) ^ 0x11B00Cu;
  Bytes ping;
  store_protocol::Writer(ping).u8(static_cast<uint8_t>(store_protocol::V2Query::kPing)).u32(nonce);
  StoreSocket asker;
  bool asking = false;   // `asker` is connected and has not been refused
  bool refused = false;  // a server that closes on a PING is not libuv: stop asking
  for (;;) {
    if (!asking && !refused) {
      asking = StoreSocket::connect(host, port, soon(deadline, kPingInterval), &asker).ok();
    }
    if (asking && !asker.send_all(ping.data(), ping.size(), soon(deadline, kPingInterval)).ok()) {
      asking = false;
      refused = true;
    }
    // Half the interval on each connection, the probe's first.
    r = probe.wait_readable(soon(deadline, kPingInterval / 2));
    if (r.kind != IoResult::Kind::kTimeout || deadline.expired())
      return read_answer(probe, r, deadline);
    if (!asking) {
      r = probe.wait_readable(soon(deadline, kPingInterval / 2));
      if (r.kind != IoResult::Kind::kTimeout || deadline.expired())
        return read_answer(probe, r, deadline);
      continue;
    }
    if (asker.wait_readable(soon(deadline, kPingInterval / 2)).ok()) {
      uint8_t echo[4];
      if (asker.recv_exact(echo, 4, soon(deadline, kPingInterval)).ok() &&
          store_protocol::load_u32(echo) == nonce) {
        ProbeOutcome out;
        out.echoed = true;
        return out;
      }
      // Closed (or a refusal notice, then closed): not the server we ask for.
      asker.close();
      asking = false;
      refused = true;
    }
  }
}

}  // namespace collie
