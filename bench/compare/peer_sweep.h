// What the peers' programs (gloo_collectives, mpi_collectives) share with
// collie-bench's accounting: nccl-tests' bus factor, how many calls a size
// gets under an iteration budget in bytes, and the uneven all_to_all's split
// (torch_collectives.py has the same split in Python).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace peer_sweep {

// busbw = algbw x this: all_reduce 2(n-1)/n; broadcast, reduce, pingpong and
// stream 1; all_gather, reduce_scatter, gather, scatter and both all_to_alls
// (n-1)/n.
inline double bus_factor(const std::string& collective, int world) {
  if (collective == "all_reduce") return 2.0 * (world - 1) / world;
  if (collective == "broadcast" || collective == "reduce" || collective == "pingpong" ||
      collective == "stream")
    return 1.0;
  return static_cast<double>(world - 1) / world;
}

// iters, or at most iter_bytes / bytes of them (at least 1) when iter_bytes > 0.
inline int timed_calls(int iters, size_t iter_bytes, size_t bytes) {
  if (iter_bytes == 0 || bytes == 0) return iters;
  return static_cast<int>(std::clamp<size_t>(iter_bytes / bytes, 1, static_cast<size_t>(iters)));
}

// all_to_all_uneven: the elements rank `from` sends to each rank when every
// rank sends `total` elements, as a mixture-of-experts router's counts with a
// fixed skew: rank p gets a weight of 2^((p + from) mod world mod 8) (at
// N = 4 the busiest pair moves 8x the quietest) of the weights' sum, rounded
// down, the rest staying with `from` itself. The weights form a Latin square,
// so every rank also receives about `total` elements; what rank r receives
// from p is router_splits(total, world, p)[r].
inline std::vector<size_t> router_splits(size_t total, int world, int from) {
  std::vector<size_t> counts(static_cast<size_t>(world));
  auto weight = [&](int p) { return size_t{1} << ((p + from) % world % 8); };
  size_t parts = 0, given = 0;
  for (int p = 0; p < world; ++p) parts += weight(p);
  for (int p = 0; p < world; ++p) {
    counts[p] = total * weight(p) / parts;
    given += counts[p];
  }
  counts[from] += total - given;
  return counts;
}

// The elements `rank` receives from each rank (what each sends it).
inline std::vector<size_t> router_receives(size_t total, int world, int rank) {
  std::vector<size_t> counts(static_cast<size_t>(world));
  for (int p = 0; p < world; ++p) counts[p] = router_splits(total, world, p)[rank];
  return counts;
}

}  // namespace peer_sweep
