// Dissemination barrier (Hensgen, Finkel and Manber): in round k = 0, 1, ...
// while 2^k < P, rank r sends an empty message to r + 2^k and waits for one
// from r - 2^k (mod P). After ceil(log2 P) rounds every rank has heard,
// directly or through others, from every rank, so none leaves before all
// have entered. Each round costs one header (40 bytes) per rank; it runs over
// the data connections, so a barrier also proves they all still work.
#include "collie/collectives/algorithms.h"

namespace collie {

void dissemination_barrier(Transport& t) {
  const int P = t.size();
  const int r = t.rank();
  for (int distance = 1; distance < P; distance *= 2) {
    t.send((r + distance) % P, nullptr, 0);
    t.recv((r - distance + P) % P, nullptr, 0);
    t.wait_all();
  }
}

}  // namespace collie
