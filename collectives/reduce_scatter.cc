// reduce_scatter. The input has P slots of out.count elements (one buffer,
// or a list of P buffers); rank r ends with slot r reduced over every rank.
//
// Ring (the default): in step s (0 <= s < P-1) rank r sends slot r - s - 1 to
// its right and receives slot r - s - 2 from its left, reduces it with its
// own input and passes the partial result on in the next step:
//
//   acc[c] = in[c] op received      (steps before the last)
//   out    = in[r] op received      (the last step receives slot r)
//
// Partial results live in a workspace (the input is never written, except
// that out may be slot r, which is only written at the very end).
// Segmented and pipelined like the ring all_reduce; each rank sends and
// receives (P-1)/P of the input. float16/bfloat16 partial sums travel as
// float32 and are rounded once, at the end; AVG divides once, at the end.
//
// Small inputs (up to small_message_bytes) use a direct exchange: rank r
// sends slot p to rank p, and reduces the P copies of its slot in rank order
// (at two ranks Transport::exchange, express when the pair shares memory).
#include <cstring>

#include "collie/collectives/algorithms.h"
#include "collie/collectives/reduce_kernels.h"
#include "collie/collectives/ring_pipeline.h"

namespace collie {

void reduce_scatter(Transport& t, Workspace& ws, const AlgorithmConfig& cfg,
                    std::span<const uint8_t* const> slots, TensorView out, ReduceOp op) {
  const size_t P = static_cast<size_t>(t.size());
  const size_t r = static_cast<size_t>(t.rank());
  const size_t n = out.count;
  const DataType dtype = out.dtype;
  const size_t es = element_size(dtype);
  const size_t slot_bytes = n * es;

  if (slot_bytes * P <= cfg.small_message_bytes && P <= kDirectPeers) {
    auto* gathered = static_cast<uint8_t*>(ws.get(0, P * slot_bytes));
    if (P == 2) {
      // One peer: a pairwise exchange, express when the pair shares memory.
      t.exchange(static_cast<int>(1 - r), slots[1 - r], gathered + (1 - r) * slot_bytes,
                 slot_bytes);
    } else {
      for (size_t p = 0; p < P; ++p) {
        if (p == r) continue;
        t.recv(static_cast<int>(p), gathered + p * slot_bytes, slot_bytes);
        t.send(static_cast<int>(p), slots[p], slot_bytes);
      }
    }
    if (slot_bytes > 0) std::memcpy(gathered + r * slot_bytes, slots[r], slot_bytes);
    t.wait_all();
    reduce_in_rank_order(ws, gathered, slot_bytes, static_cast<int>(P), out, op);
    return;
  }

  const bool half = is_half(dtype);
  const size_t wire_es = half ? sizeof(float) : es;
  const size_t seg_elems = std::max<size_t>(1, cfg.segment_bytes / wire_es);
  const size_t segments = std::max<size_t>(1, (n + seg_elems - 1) / seg_elems);
  constexpr size_t kWindow = 4;
  auto* staging = static_cast<uint8_t*>(ws.get(0, kWindow * seg_elems * wire_es));
  auto* acc = static_cast<uint8_t*>(ws.get(1, P * n * wire_es));  // partial results by slot

  auto slot_of = [&](size_t s, bool sending) { return (r + 2 * P - s - (sending ? 1 : 2)) % P; };
  auto seg = [&](size_t k) {
    const size_t b = std::min(n, k * seg_elems);
    return std::pair<size_t, size_t>{b, std::min(n, b + seg_elems) - b};
  };
  if (half) {  // step 0 sends slot r - 1 as float32
    const size_t c = slot_of(0, true);
    widen(reinterpret_cast<float*>(acc) + c * n, slots[c], n, dtype);
  }

  auto send_of = [&](size_t i) -> Span {
    const size_t s = i / segments, c = slot_of(s, true);
    const auto [b, len] = seg(i % segments);
    if (s == 0 && !half) return {slots[c] + b * es, len * es};
    return {acc + (c * n + b) * wire_es, len * wire_es};
  };
  auto recv_of = [&](size_t i) -> MutableSpan {
    const auto [b, len] = seg(i % segments);
    return {staging + (i % kWindow) * seg_elems * wire_es, len * wire_es};
  };
  auto on_recv = [&](size_t i) {
    const size_t s = i / segments, c = slot_of(s, false);
    const auto [b, len] = seg(i % segments);
    const void* received = staging + (i % kWindow) * seg_elems * wire_es;
    const uint8_t* mine = slots[c] + b * es;
    if (s + 1 < P - 1) {
      if (half) {
        reduce_widen(reinterpret_cast<float*>(acc) + c * n + b, mine,
                     static_cast<const float*>(received), len, dtype, op);
      } else {
        reduce(acc + (c * n + b) * es, mine, received, len, dtype, op);
      }
      return;
    }
    auto* dst = static_cast<uint8_t*>(out.data) + b * es;  // c == r
    if (half) {
      reduce_narrow(dst, mine, static_cast<const float*>(received), len, dtype, op,
                    op == ReduceOp::kAvg ? static_cast<float>(P) : 1.0f);
    } else {
      reduce(dst, mine, received, len, dtype, op);
      if (op == ReduceOp::kAvg) divide(dst, len, dtype, static_cast<int>(P));
    }
  };
  run_ring_pipeline(t, (P - 1) * segments, segments, kWindow, send_of, recv_of, on_recv);
}

}  // namespace collie
