// Waiting for the answer to kDetect's dialect probe (store_protocol.h), with
// the one server that never answers it: torch 2.x's libuv server (the 2.x
// default) holds a first message that is not VALIDATE without a word until
// more bytes arrive on that connection, and then runs it as 2.x (the probe
// would be an ADD there). So nothing more may go on the probe's connection.
// When the probe has been unanswered for a moment, a second connection asks
// instead: 2.x PINGs sent one at a time, which libuv echoes once one of them
// arrives in a read of its own, and which every other server refuses by
// closing (torch 1.13, torch's classic 2.x server) or echoes too (collie).
// Both connections are watched: whichever answers first decides, so a slow
// server is never mistaken for another.
#pragma once

#include <cstdint>
#include <string>

#include "collie/rendezvous/tcp_store/tcp_store_socket.h"

namespace collie {

struct ProbeOutcome {
  // The probe connection's: ok (its answer byte in `answer`), kClosed (a
  // 2.x server refused it), or why it failed. Unused when `echoed`.
  IoResult io;
  uint8_t answer = 0;
  // The second connection's PING came back: a 2.x server that holds the
  // probe, torch's libuv one (or, busy, collie's).
  bool echoed = false;
};

// Waits until `probe` (the connection the probe went out on) answers or
// closes, or a PING on a second connection to host:port is echoed, or the
// deadline passes (io: kTimeout).
ProbeOutcome await_probe_answer(StoreSocket& probe, const std::string& host, uint16_t port,
                                const Deadline& deadline);

}  // namespace collie
