// all_to_all. Rank r sends in[p] to rank p and receives out[p] from rank p,
// for every p; in[r] is copied to out[r]. Sizes may differ per pair (the
// all_to_all_single splits); a receiver whose size differs from what its
// peer sends fails as a mismatch naming both, before any byte lands.
//
// Small messages (every message up to small_message_bytes): one round. All
// P-1 sends and receives are posted at once and the transport moves them
// together: one hop of latency, whatever P.
//
// Large messages: pairwise exchange in P-1 rounds. In round k rank r sends
// to r + k and receives from r - k, and the next round starts when both
// are done, so each rank streams to one peer at a time at full speed
// instead of splitting its link and its receive buffers P-1 ways (and no
// rank is flooded by everyone at once). Every byte crosses one link once,
// the minimum; for P = 2 both are the same single exchange.
#include <algorithm>
#include <cstring>

#include "collie/collectives/algorithms.h"

namespace collie {

void all_to_all(Transport& t, const AlgorithmConfig& cfg, std::span<const Span> in,
                std::span<const MutableSpan> out) {
  const int P = t.size();
  const int r = t.rank();
  if (out[r].bytes > 0 && out[r].data != in[r].data)
    std::memcpy(out[r].data, in[r].data, out[r].bytes);
  size_t largest = 0;
  for (int p = 0; p < P; ++p) largest = std::max({largest, in[p].bytes, out[p].bytes});

  if (largest <= cfg.small_message_bytes) {
    for (int k = 1; k < P; ++k) {
      const int to = (r + k) % P, from = (r - k + P) % P;
      t.recv(from, out[from].data, out[from].bytes);
      t.send(to, in[to].data, in[to].bytes);
    }
    t.wait_all();
    return;
  }
  for (int k = 1; k < P; ++k) {
    const int to = (r + k) % P, from = (r - k + P) % P;
    t.recv(from, out[from].data, out[from].bytes);
    t.send(to, in[to].data, in[to].bytes);
    t.wait_all();
  }
}

}  // namespace collie
