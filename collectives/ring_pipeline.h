// The segmented ring that all_reduce, all_gather and reduce_scatter share.
//
// A ring collective is a sequence of steps; in each step every rank sends one
// chunk to its right neighbour and receives one chunk from its left. Chunks
// are cut into `segments` messages, so the sequence of messages a rank sends
// is step-major: message i = step * segments + segment. What a rank sends in
// step s + 1 is what it received (and reduced) in step s, segment by
// segment, so message i (in any step after the first) may go as soon as
// received message i - segments has been processed, not when the whole
// previous step is done. That is the pipeline: while segment k of step s is
// being reduced, segment k + 1 is arriving from the left and segment k - 1 of
// step s + 1 is leaving to the right, all driven by one Transport::progress()
// loop that moves every socket it can.
//
// Receives land where recv_of(i) says (a staging slot for messages that must
// be reduced, the user's buffer directly for those that need not be; or,
// as a RecvTarget with reduce_in, reduced on arrival into the output); at
// most `window` receives are posted ahead of processing, which bounds the
// staging slots in use to `window` (slot = i % window).
#pragma once

#include <cstddef>
#include <type_traits>

#include "collie/collectives/algorithms.h"
#include "collie/collectives/transport/transport.h"

namespace collie {

template <typename SendOf, typename RecvOf, typename OnRecv>
void run_ring_pipeline(Transport& t, size_t messages, size_t segments, size_t window,
                       SendOf send_of, RecvOf recv_of, OnRecv on_recv) {
  const int right = (t.rank() + 1) % t.size();
  const int left = (t.rank() + t.size() - 1) % t.size();
  size_t sends_posted = 0, recvs_posted = 0, processed = 0;
  for (;;) {
    while (recvs_posted < messages && recvs_posted < processed + window) {
      const auto dst = recv_of(recvs_posted++);
      if constexpr (std::is_same_v<std::decay_t<decltype(dst)>, RecvTarget>) {
        if (dst.reduce_in != nullptr) {
          t.recv_reduce(left, dst.data, dst.reduce_in, dst.bytes / element_size(dst.dtype),
                        dst.dtype, dst.op);
          continue;
        }
      }
      t.recv(left, dst.data, dst.bytes);
    }
    while (sends_posted < messages &&
           (sends_posted < segments || processed + segments > sends_posted)) {
      const Span src = send_of(sends_posted++);
      t.send(right, src.data, src.bytes);
    }
    if (processed == messages && t.sends_done(right) == messages) return;
    t.progress();
    while (processed < t.recvs_done(left)) on_recv(processed++);
  }
}

}  // namespace collie
