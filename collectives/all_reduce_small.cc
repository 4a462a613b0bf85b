// Small-message all_reduce: a direct exchange. Every rank sends its whole
// input to every other rank at once and reduces the P inputs locally, in rank
// order (0, 1, ..., P-1) so that every rank computes bitwise the same result.
// One network hop instead of the ring's 2 (P-1), at the price of (P-1) times
// the buffer on the wire per rank: the right trade below a few KiB, where a
// message costs its latency, not its bytes (the crossover is
// CommunicatorOptions::small_message_bytes, measured in docs/algorithms.md).
// Any world size works; there is no power-of-two special case.
//
// two_step_all_reduce: the same direct exchange, cut in P parts so that
// each rank sends 2 (P-1)/P of the buffer (the bandwidth optimum) in 2 hops:
// (1) rank r sends part p of its input to rank p and reduces the P copies of
// part r in rank order; (2) it sends that reduced part to every rank and
// receives the others' into out. Each part is reduced by one rank, so every
// rank ends with bitwise the same result. For links where the bytes cost
// more than a hop (the hierarchical all_reduce across hosts).
#include <cstring>

#include "collie/collectives/algorithms.h"
#include "collie/collectives/reduce_kernels.h"

namespace collie {

void small_all_reduce(Transport& t, Workspace& ws, TensorView in, TensorView out, ReduceOp op) {
  const int P = t.size();
  const int r = t.rank();
  const size_t bytes = out.nbytes();
  auto* slots = static_cast<uint8_t*>(ws.get(0, P * bytes));
  auto slot = [&](int p) { return slots + static_cast<size_t>(p) * bytes; };

  if (P == 2) {
    // One peer: a pairwise exchange, express when the pair shares memory.
    t.exchange(1 - r, in.data, slot(1 - r), bytes);  // our send is done when it returns
    if (bytes > 0) std::memcpy(slot(r), in.data, bytes);
  } else {
    // Sends first: each starts as it is posted, so the receives are posted
    // while the data travels.
    for (int p = 0; p < P; ++p) {
      if (p != r) t.send(p, in.data, bytes);
    }
    for (int p = 0; p < P; ++p) {
      if (p != r) t.recv(p, slot(p), bytes);
    }
    if (bytes > 0) std::memcpy(slot(r), in.data, bytes);
    t.wait_all();  // also means every send is done: out may now overwrite in
  }

  reduce_in_rank_order(ws, slots, bytes, P, out, op);
}

void two_step_all_reduce(Transport& t, Workspace& ws, TensorView in, TensorView out, ReduceOp op) {
  const size_t P = static_cast<size_t>(t.size());
  const size_t r = static_cast<size_t>(t.rank());
  const size_t n = out.count, es = element_size(out.dtype);
  auto begin = [&](size_t p) { return part_begin(n, P, p) * es; };
  auto bytes = [&](size_t p) { return begin(p + 1) - begin(p); };
  const auto* src = static_cast<const uint8_t*>(in.data);
  auto* dst = static_cast<uint8_t*>(out.data);
  const size_t mine = bytes(r);
  // Both ends know every part's size: an empty part is not sent at all.
  auto* slots = static_cast<uint8_t*>(ws.get(0, P * mine));
  for (size_t p = 0; p < P; ++p) {
    if (p == r) continue;
    if (bytes(p) > 0) t.send(static_cast<int>(p), src + begin(p), bytes(p));
    if (mine > 0) t.recv(static_cast<int>(p), slots + p * mine, mine);
  }
  if (mine > 0) std::memcpy(slots + r * mine, src + begin(r), mine);
  t.wait_all();  // every part of `in` is sent: out may now overwrite it
  const TensorView part{dst + begin(r), mine / es, out.dtype, out.device};
  reduce_in_rank_order(ws, slots, mine, static_cast<int>(P), part, op);
  for (size_t p = 0; p < P; ++p) {
    if (p == r) continue;
    if (mine > 0) t.send(static_cast<int>(p), dst + begin(r), mine);
    if (bytes(p) > 0) t.recv(static_cast<int>(p), dst + begin(p), bytes(p));
  }
  t.wait_all();
}

void reduce_in_rank_order(Workspace& ws, const uint8_t* slots, size_t slot_bytes, int P,
                          TensorView out, ReduceOp op) {
  const size_t n = out.count;
  const DataType dtype = out.dtype;
  auto slot = [&](int p) { return slots + static_cast<size_t>(p) * slot_bytes; };
  if (P == 1) {
    if (slot_bytes > 0 && out.data != slots) std::memcpy(out.data, slots, slot_bytes);
    return;
  }
  if (is_half(dtype)) {
    auto* acc = static_cast<float*>(ws.get(1, n * sizeof(float)));
    widen(acc, slot(0), n, dtype);
    for (int p = 1; p < P - 1; ++p) reduce_widen(acc, slot(p), acc, n, dtype, op);
    reduce_narrow(out.data, slot(P - 1), acc, n, dtype, op,
                  op == ReduceOp::kAvg ? static_cast<float>(P) : 1.0f);
    return;
  }
  reduce(out.data, slot(0), slot(1), n, dtype, op);
  for (int p = 2; p < P; ++p) reduce(out.data, out.data, slot(p), n, dtype, op);
  if (op == ReduceOp::kAvg) divide(out.data, n, dtype, P);
}

}  // namespace collie
