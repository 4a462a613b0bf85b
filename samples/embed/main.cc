// An application with its own data-parallel loop that embeds collie for
// communication only: it averages a "gradient" vector across ranks every
// step, and checks that the replicas stay identical.
#include <cmath>
#include <cstdio>
#include <vector>

#include "collie/runtime/api/distributed.h"

int main() try {
  collie::init_process_group({.backend = "cpu"});
  const int rank = collie::get_rank(), world = collie::get_world_size();

  // Each rank's parameters start equal (broadcast from rank 0) and its
  // gradients differ; averaging keeps the replicas identical.
  std::vector<double> params(1000, rank == 0 ? 1.0 : -7.0), grads(params.size());
  collie::broadcast(collie::view(params.data(), params.size()), /*src=*/0);
  for (int step = 0; step < 20; ++step) {
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = std::sin(step + i + rank);
    collie::all_reduce(collie::view(grads.data(), grads.size()), collie::ReduceOp::kAvg);
    for (size_t i = 0; i < params.size(); ++i) params[i] -= 0.1 * grads[i];
  }
  // Every replica must hold the same bytes: gather a checksum from everyone.
  double sum = 0;
  for (double p : params) sum += p;
  std::vector<double> sums(world);
  collie::all_gather(collie::view(sums.data(), sums.size()), collie::view(&sum, 1));
  bool same = true;
  for (double s : sums) same = same && s == sums[0];

  collie::barrier();
  collie::destroy_process_group();
  if (rank == 0)
    std::printf("embed_app: %d ranks, replicas identical: %s\n", world, same ? "yes" : "NO");
  return same ? 0 : 1;
} catch (const std::exception& e) {  // a bad launch environment, a store or peer gone
  std::fprintf(stderr, "embed_app: %s\n", e.what());
  return 1;
}
