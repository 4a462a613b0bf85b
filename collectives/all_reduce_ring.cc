// Ring all_reduce: a reduce-scatter followed by an all-gather around the ring
// rank -> rank + 1, pipelined in segments (ring_pipeline.h).
//
// The buffer is cut into P chunks. In reduce-scatter step s (0 <= s < P-1)
// rank r sends chunk r - s to its right and receives chunk r - s - 1 from its
// left, which it reduces with its own input into the output:
//
//   out[c] = in[c] op received
//
// so after P-1 steps rank r holds chunk r + 1 reduced over every rank. In
// all-gather step u (0 <= u < P-1) rank r sends chunk r + 1 - u and receives
// chunk r - u straight into the output. Each rank sends and receives
// 2 (P-1)/P of the buffer, the bandwidth optimum.
//
// The reduction reads the received segment from a staging slot (over shared
// memory: from the ring itself, as it arrives, Transport::recv_reduce) and
// writes the user's output directly: no copy of the input into the output first
// (step 0 sends from the input) and none of the gathered chunks (they land
// in the output). In place is the special case in == out.
//
// float16/bfloat16: partial sums travel as float32 during the reduce-scatter
// (accumulated in a float32 workspace the size of the buffer) and are rounded
// to the storage type once, by the rank that finishes a chunk; the all-gather
// then moves the rounded values. That doubles the reduce-scatter's bytes for
// these types but keeps the result independent of P and of the ring order.
// AVG is SUM divided by P once, at the same point.
#include <cstring>

#include "collie/collectives/algorithms.h"
#include "collie/collectives/reduce_kernels.h"
#include "collie/collectives/ring_pipeline.h"

namespace collie {

void ring_all_reduce(Transport& t, Workspace& ws, const AlgorithmConfig& cfg, TensorView in,
                     TensorView out, ReduceOp op) {
  const size_t P = static_cast<size_t>(t.size());
  const size_t r = static_cast<size_t>(t.rank());
  const size_t n = out.count;
  const DataType dtype = out.dtype;
  const size_t es = element_size(dtype);
  const bool half = is_half(dtype);
  const size_t wire_es = half ? sizeof(float) : es;  // element size in the reduce-scatter
  const float divisor = op == ReduceOp::kAvg ? static_cast<float>(P) : 1.0f;

  const size_t max_chunk = (n + P - 1) / P;
  const size_t seg_elems = std::max<size_t>(1, cfg.segment_bytes / wire_es);
  const size_t segments = std::max<size_t>(1, (max_chunk + seg_elems - 1) / seg_elems);
  const size_t steps = 2 * (P - 1);
  constexpr size_t kWindow = 4;

  auto* in_bytes = static_cast<const uint8_t*>(in.data);
  auto* out_bytes = static_cast<uint8_t*>(out.data);
  auto* staging = static_cast<uint8_t*>(ws.get(0, kWindow * seg_elems * wire_es));
  float* acc = half ? static_cast<float*>(ws.get(1, n * sizeof(float))) : nullptr;

  // Chunk sent / received in step s, as an element range of segment k.
  auto chunk_of = [&](size_t s, bool sending) {
    const size_t back = s < P - 1 ? s + (sending ? 0 : 1) : (s - (P - 1)) + (sending ? P - 1 : 0);
    return (r + P - back % P) % P;
  };
  struct Range {
    size_t begin, count;
  };
  auto segment = [&](size_t chunk, size_t k) {
    const size_t cb = part_begin(n, P, chunk), ce = part_begin(n, P, chunk + 1);
    const size_t b = std::min(ce, cb + k * seg_elems);
    return Range{b, std::min(ce, b + seg_elems) - b};
  };

  if (half) {  // step 0 sends chunk r as float32
    const Range mine{part_begin(n, P, r), part_begin(n, P, r + 1) - part_begin(n, P, r)};
    widen(acc + mine.begin, in_bytes + mine.begin * es, mine.count, dtype);
  }

  auto send_of = [&](size_t i) -> Span {
    const size_t s = i / segments;
    const Range g = segment(chunk_of(s, true), i % segments);
    if (s >= P - 1) return {out_bytes + g.begin * es, g.count * es};
    if (half) return {acc + g.begin, g.count * sizeof(float)};
    return {(s == 0 ? in_bytes : out_bytes) + g.begin * es, g.count * es};
  };
  // Over shared memory the reduce-scatter's segments are reduced where they
  // lie in the ring (Transport::recv_reduce), not copied to staging first.
  const bool reduce_on_arrival = !half && t.shm_connected(static_cast<int>((r + P - 1) % P));
  auto recv_of = [&](size_t i) -> RecvTarget {
    const size_t s = i / segments;
    const Range g = segment(chunk_of(s, false), i % segments);
    if (s >= P - 1) return {out_bytes + g.begin * es, g.count * es};
    if (reduce_on_arrival) {
      return {out_bytes + g.begin * es, g.count * es, in_bytes + g.begin * es, dtype, op};
    }
    return {staging + (i % kWindow) * seg_elems * wire_es, g.count * wire_es};
  };
  auto on_recv = [&](size_t i) {
    const size_t s = i / segments;
    if (s >= P - 1) return;  // gathered straight into out
    const Range g = segment(chunk_of(s, false), i % segments);
    if (reduce_on_arrival) {
      if (s == P - 2 && op == ReduceOp::kAvg)
        divide(out_bytes + g.begin * es, g.count, dtype, static_cast<int>(P));
      return;
    }
    const void* received = staging + (i % kWindow) * seg_elems * wire_es;
    const bool last = s == P - 2;
    if (half) {
      auto* b = static_cast<const float*>(received);
      if (last) {
        reduce_narrow(out_bytes + g.begin * es, in_bytes + g.begin * es, b, g.count, dtype, op,
                      divisor);
      } else {
        reduce_widen(acc + g.begin, in_bytes + g.begin * es, b, g.count, dtype, op);
      }
    } else {
      reduce(out_bytes + g.begin * es, in_bytes + g.begin * es, received, g.count, dtype, op);
      if (last && op == ReduceOp::kAvg)
        divide(out_bytes + g.begin * es, g.count, dtype, static_cast<int>(P));
    }
  };
  run_ring_pipeline(t, steps * segments, segments, kWindow, send_of, recv_of, on_recv);
}

}  // namespace collie
