// all_gather. The output has P slots of in.count elements (one buffer, or a
// list of P buffers); rank r's input belongs in slot r.
//
// Ring (the default): in step s (0 <= s < P-1) rank r sends slot r - s to its
// right and receives slot r - s - 1 from its left, straight into the output;
// slots are segmented and pipelined like the ring all_reduce (a segment is
// forwarded in step s + 1 as soon as it arrived in step s). Each rank sends
// and receives (P-1)/P of the output: the bandwidth optimum.
//
// Small outputs (up to small_message_bytes) use a direct exchange instead:
// every rank sends its input to every other rank at once, one hop (at two
// ranks Transport::exchange, express when the pair shares memory).
#include <cstring>

#include "collie/collectives/algorithms.h"
#include "collie/collectives/ring_pipeline.h"

namespace collie {

void all_gather(Transport& t, const AlgorithmConfig& cfg, TensorView in,
                std::span<uint8_t* const> slots) {
  const size_t P = static_cast<size_t>(t.size());
  const size_t r = static_cast<size_t>(t.rank());
  const size_t slot_bytes = in.nbytes();
  uint8_t* mine = slots[r];
  if (in.data != mine && slot_bytes > 0) std::memcpy(mine, in.data, slot_bytes);

  if (slot_bytes * P <= cfg.small_message_bytes && P <= kDirectPeers) {
    if (P == 2) {
      // One peer: a pairwise exchange, express when the pair shares memory.
      t.exchange(static_cast<int>(1 - r), mine, slots[1 - r], slot_bytes);
      return;
    }
    for (size_t p = 0; p < P; ++p) {
      if (p == r) continue;
      t.recv(static_cast<int>(p), slots[p], slot_bytes);
      t.send(static_cast<int>(p), mine, slot_bytes);
    }
    t.wait_all();
    return;
  }

  const size_t es = element_size(in.dtype);
  const size_t seg_bytes = std::max<size_t>(es, cfg.segment_bytes / es * es);
  const size_t segments = std::max<size_t>(1, (slot_bytes + seg_bytes - 1) / seg_bytes);
  auto piece = [&](size_t slot, size_t k) {
    const size_t b = std::min(slot_bytes, k * seg_bytes);
    return MutableSpan{slots[slot] + b, std::min(slot_bytes, b + seg_bytes) - b};
  };
  auto send_of = [&](size_t i) {
    const MutableSpan s = piece((r + P - i / segments % P) % P, i % segments);
    return Span{s.data, s.bytes};
  };
  auto recv_of = [&](size_t i) {
    return piece((r + P - (i / segments + 1) % P) % P, i % segments);
  };
  run_ring_pipeline(t, (P - 1) * segments, segments, 8, send_of, recv_of, [](size_t) {});
}

}  // namespace collie
