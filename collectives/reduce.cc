// reduce. The root ends with every rank's input reduced; no other rank's
// output is written (so in place is reduce(tensor, tensor) on every rank).
//
// Small messages (up to small_message_bytes): a direct gather. Every other
// rank sends its input to the root, which reduces the P inputs in rank order
// (as the small all_reduce does). One hop; the root receives (P-1) buffers.
//
// Large messages: a pipelined chain that ends at the root. With position
// q = (r - root) mod P, the rank at q = P-1 sends its input, segment by
// segment, to q = P-2; every rank in between reduces each segment it
// receives with its own input and passes the partial result on at once,
// while the next segment is still arriving; the root (q = 0) reduces the
// last hop into its output:
//
//   partial(q) = in(q) op partial(q + 1),   out = in(root) op partial(1)
//
// Every rank sends and receives the buffer at most once, the minimum a
// reduce needs of the root, and the time is about one buffer's transfer
// plus (P-2) segments, as for broadcast's chain. float16/bfloat16 partials
// travel as float32 and are rounded once, at the root; AVG divides once,
// at the root.
#include <algorithm>
#include <cstring>

#include "collie/collectives/algorithms.h"
#include "collie/collectives/reduce_kernels.h"

namespace collie {

void reduce(Transport& t, Workspace& ws, const AlgorithmConfig& cfg, TensorView in, TensorView out,
            ReduceOp op, int root) {
  const int P = t.size();
  const int r = t.rank();
  const size_t n = in.count;
  const DataType dtype = in.dtype;
  const size_t es = element_size(dtype);
  const size_t bytes = in.nbytes();

  if (bytes <= cfg.small_message_bytes) {
    if (r != root) {
      t.send_one(root, in.data, bytes);  // express at two ranks when it can be
      return;
    }
    auto* slots = static_cast<uint8_t*>(ws.get(0, P * bytes));
    if (bytes > 0) std::memcpy(slots + static_cast<size_t>(root) * bytes, in.data, bytes);
    if (P == 2) {
      t.recv_one(1 - r, slots + static_cast<size_t>(1 - r) * bytes, bytes);
    } else {
      for (int p = 0; p < P; ++p) {
        if (p != root) t.recv(p, slots + static_cast<size_t>(p) * bytes, bytes);
      }
      t.wait_all();
    }
    reduce_in_rank_order(ws, slots, bytes, P, out, op);
    return;
  }

  const int q = (r - root + P) % P;
  const int toward_root = q > 0 ? (r + P - 1) % P : -1;  // position q - 1
  const int from = q < P - 1 ? (r + 1) % P : -1;         // position q + 1
  const bool half = is_half(dtype);
  const size_t wire_es = half ? sizeof(float) : es;
  const size_t seg_elems = std::max<size_t>(1, cfg.segment_bytes / wire_es);
  const size_t segments = (n + seg_elems - 1) / seg_elems;
  auto seg = [&](size_t k) {
    const size_t b = k * seg_elems;
    return std::pair<size_t, size_t>{b, std::min(n, b + seg_elems) - b};
  };
  auto* in_bytes = static_cast<const uint8_t*>(in.data);

  if (from < 0) {  // the far end of the chain sends its input as it is
    const uint8_t* src = in_bytes;
    if (half) {
      auto* wide = static_cast<float*>(ws.get(1, n * sizeof(float)));
      widen(wide, in.data, n, dtype);
      src = reinterpret_cast<const uint8_t*>(wide);
    }
    for (size_t k = 0; k < segments; ++k) {
      const auto [b, len] = seg(k);
      t.send(toward_root, src + b * wire_es, len * wire_es);
    }
    t.wait_all();
    return;
  }

  constexpr size_t kWindow = 4;  // receives posted ahead
  auto* staging = static_cast<uint8_t*>(ws.get(0, kWindow * seg_elems * wire_es));
  auto* partial = toward_root >= 0 ? static_cast<uint8_t*>(ws.get(1, n * wire_es)) : nullptr;
  auto* out_bytes = static_cast<uint8_t*>(out.data);
  const float divisor = op == ReduceOp::kAvg ? static_cast<float>(P) : 1.0f;
  size_t posted = 0, processed = 0;
  for (;;) {
    while (posted < segments && posted < processed + kWindow) {
      const auto [b, len] = seg(posted);
      t.recv(from, staging + (posted % kWindow) * seg_elems * wire_es, len * wire_es);
      ++posted;
    }
    while (processed < t.recvs_done(from)) {
      const auto [b, len] = seg(processed);
      const void* received = staging + (processed % kWindow) * seg_elems * wire_es;
      const uint8_t* mine = in_bytes + b * es;
      if (toward_root >= 0) {
        uint8_t* dst = partial + b * wire_es;
        if (half) {
          reduce_widen(reinterpret_cast<float*>(dst), mine, static_cast<const float*>(received),
                       len, dtype, op);
        } else {
          reduce(dst, mine, received, len, dtype, op);
        }
        t.send(toward_root, dst, len * wire_es);
      } else if (half) {
        reduce_narrow(out_bytes + b * es, mine, static_cast<const float*>(received), len, dtype, op,
                      divisor);
      } else {
        reduce(out_bytes + b * es, mine, received, len, dtype, op);
        if (op == ReduceOp::kAvg) divide(out_bytes + b * es, len, dtype, P);
      }
      ++processed;
    }
    if (processed == segments && (toward_root < 0 || t.sends_done(toward_root) == segments)) return;
    t.progress();
  }
}

}  // namespace collie
