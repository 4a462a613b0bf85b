// What the peers' programs (gloo_collectives, mpi_collectives) share with
// collie-bench's accounting: nccl-tests' bus factor, and how many calls a
// size gets under an iteration budget in bytes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>

namespace peer_sweep {

// busbw = algbw x this: all_reduce 2(n-1)/n, broadcast 1, all_gather and
// reduce_scatter (n-1)/n.
inline double bus_factor(const std::string& collective, int world) {
  if (collective == "all_reduce") return 2.0 * (world - 1) / world;
  if (collective == "broadcast") return 1.0;
  return static_cast<double>(world - 1) / world;
}

// iters, or at most iter_bytes / bytes of them (at least 1) when iter_bytes > 0.
inline int timed_calls(int iters, size_t iter_bytes, size_t bytes) {
  if (iter_bytes == 0 || bytes == 0) return iters;
  return static_cast<int>(std::clamp<size_t>(iter_bytes / bytes, 1, static_cast<size_t>(iters)));
}

}  // namespace peer_sweep
