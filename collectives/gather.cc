// gather. The root ends with every rank's input, rank p's in slot p.
//
// Large messages: direct. Every other rank sends its input to the root,
// which receives each straight into its slot. One hop; the root receives
// (P-1) buffers, the least any gather can.
//
// Small messages (P buffers up to small_message_bytes): a binomial tree, so
// that the root takes ceil(log2 P) messages instead of P-1. With relative
// position v = (r - root) mod P, after round k a rank holds the buffers of
// positions [v, v + 2^(k+1)) (clipped to P). In round k a rank whose bit k
// is the lowest set bit of v sends everything it holds to v - 2^k and is
// done; a rank with bits 0..k of v clear receives the block of
// [v + 2^k, v + 2^(k+1)) from v + 2^k, if that position exists. Blocks are
// staged in position order and the root copies them to the slots. Each
// buffer crosses up to log2 P links; fine for small ones, which is why large
// ones go direct.
#include <algorithm>
#include <cstring>

#include "collie/collectives/algorithms.h"

namespace collie {

void gather(Transport& t, Workspace& ws, const AlgorithmConfig& cfg, TensorView in,
            std::span<uint8_t* const> slots, int root) {
  const int P = t.size();
  const int r = t.rank();
  const size_t bytes = in.nbytes();

  if (bytes * static_cast<size_t>(P) > cfg.small_message_bytes) {
    if (r != root) {
      t.send(root, in.data, bytes);
    } else {
      for (int p = 0; p < P; ++p) {
        if (p != root) t.recv(p, slots[p], bytes);
      }
      if (slots[root] != in.data && bytes > 0) std::memcpy(slots[root], in.data, bytes);
    }
    t.wait_all();
    return;
  }

  if (P == 2) {  // one message: express when the pair shares memory
    if (r != root) {
      t.send_one(root, in.data, bytes);
      return;
    }
    if (slots[r] != in.data && bytes > 0) std::memcpy(slots[r], in.data, bytes);
    t.recv_one(1 - r, slots[1 - r], bytes);
    return;
  }

  const int v = (r - root + P) % P;
  auto rank_at = [&](int position) { return (position + root) % P; };
  auto* staged = static_cast<uint8_t*>(ws.get(0, static_cast<size_t>(P) * bytes));
  auto at = [&](int position) { return staged + static_cast<size_t>(position) * bytes; };
  if (bytes > 0) std::memcpy(at(v), in.data, bytes);
  int held_end = v + 1;  // this rank holds positions [v, held_end)
  for (int step = 1; step < P; step *= 2) {
    if (v & step) {
      t.send(rank_at(v - step), at(v), static_cast<size_t>(held_end - v) * bytes);
      t.wait_all();
      return;
    }
    if (v + step < P) {
      const int end = std::min(v + 2 * step, P);
      t.recv(rank_at(v + step), at(v + step), static_cast<size_t>(end - v - step) * bytes);
      t.wait_all();
      held_end = end;
    }
  }
  // The root: positions in order; position u is rank u + root.
  if (bytes == 0) return;
  for (int u = 0; u < P; ++u) std::memcpy(slots[rank_at(u)], at(u), bytes);
}

}  // namespace collie
