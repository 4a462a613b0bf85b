// scatter. Rank p ends with the root's slot p.
//
// Large messages: direct. The root sends slot p straight from its buffer to
// rank p (every send posted at once); one hop, (P-1) buffers out of the
// root, the least any scatter can.
//
// Small messages (P buffers up to small_message_bytes): a binomial tree,
// gather's mirror, so that the root sends ceil(log2 P) messages instead of
// P-1. With relative position v = (r - root) mod P, a rank other than the
// root first receives the block of positions [v, v + 2^k) (clipped to P)
// from v - 2^k, where 2^k is the lowest set bit of v; then, for each lower
// bit 2^j from high to low, it sends the block [v + 2^j, v + 2^(j+1)) on to
// v + 2^j. The root stages its slots in position order first.
#include <algorithm>
#include <cstring>

#include "collie/collectives/algorithms.h"

namespace collie {

void scatter(Transport& t, Workspace& ws, const AlgorithmConfig& cfg,
             std::span<const uint8_t* const> slots, TensorView out, int root) {
  const int P = t.size();
  const int r = t.rank();
  const size_t bytes = out.nbytes();

  if (bytes * static_cast<size_t>(P) > cfg.small_message_bytes) {
    if (r != root) {
      t.recv(root, out.data, bytes);
    } else {
      for (int p = 0; p < P; ++p) {
        if (p != root) t.send(p, slots[p], bytes);
      }
      if (slots[root] != out.data && bytes > 0) std::memcpy(out.data, slots[root], bytes);
    }
    t.wait_all();
    return;
  }

  if (P == 2) {  // one message: express when the pair shares memory
    if (r != root) {
      t.recv_one(root, out.data, bytes);
      return;
    }
    t.send_one(1 - r, slots[1 - r], bytes);
    if (slots[r] != out.data && bytes > 0) std::memcpy(out.data, slots[r], bytes);
    return;
  }

  const int v = (r - root + P) % P;
  auto rank_at = [&](int position) { return (position + root) % P; };
  auto* staged = static_cast<uint8_t*>(ws.get(0, static_cast<size_t>(P) * bytes));
  auto at = [&](int position) { return staged + static_cast<size_t>(position) * bytes; };
  int top = 1;  // the lowest set bit of v; above every bit for the root
  if (v == 0) {
    while (top < P) top *= 2;
    for (int u = 0; u < P && bytes > 0; ++u) std::memcpy(at(u), slots[rank_at(u)], bytes);
  } else {
    while (!(v & top)) top *= 2;
    const int end = std::min(v + top, P);
    t.recv(rank_at(v - top), at(v), static_cast<size_t>(end - v) * bytes);
    t.wait_all();
  }
  for (int step = top / 2; step >= 1; step /= 2) {
    if (v + step >= P) continue;
    const int end = std::min(v + 2 * step, P);
    t.send(rank_at(v + step), at(v + step), static_cast<size_t>(end - v - step) * bytes);
  }
  t.wait_all();
  if (bytes > 0) std::memcpy(out.data, at(v), bytes);
}

}  // namespace collie
