// The smallest complete collie program: every rank contributes its rank + 1,
// all_reduce sums them, rank 0 prints the result.
//
//   collie-run --standalone --nproc-per-node 4 ./build/bin/hello_allreduce
#include <cstdio>
#include <vector>

#include "runtime/api/distributed.h"

int main() {
  collie::init_process_group({.backend = "auto"});  // env://: RANK, WORLD_SIZE, MASTER_*
  collie::setup_for_distributed(collie::is_main_process());

  const int rank = collie::get_rank(), world = collie::get_world_size();
  std::vector<float> data(4, static_cast<float>(rank + 1));
  collie::all_reduce(collie::view(data.data(), data.size()));  // sum, in place

  collie::print("world size", world, "all_reduce ->", data[0], "expected", world * (world + 1) / 2);
  collie::barrier();
  collie::destroy_process_group();
  return data[0] == world * (world + 1) / 2.0f ? 0 : 1;
}
