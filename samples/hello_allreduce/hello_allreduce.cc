// The smallest complete collie program: every rank contributes its rank + 1,
// all_reduce sums them, rank 0 prints the result.
//
//   build/bin/collie-run --standalone --nproc-per-node 4 build/bin/hello_allreduce [--timeout 90s]
#include <cstdio>
#include <string_view>
#include <vector>

#include "collie/base/parse_duration.h"
#include "collie/runtime/api/distributed.h"

int main(int argc, char** argv) try {
  if (argc != 1 && (argc != 3 || std::string_view(argv[1]) != "--timeout")) {
    std::fprintf(stderr, "usage: hello_allreduce [--timeout 90s]\n");
    return 2;
  }
  // --timeout, else COLLIE_TIMEOUT, else 30 min: bounds the rendezvous and every collective.
  collie::init_process_group(
      {.backend = "auto",  // env://: RANK, WORLD_SIZE, MASTER_*
       .timeout = collie::timeout_from_flag_or_env(argc == 3 ? argv[2] : "")});
  collie::setup_for_distributed(collie::is_main_process());

  const int rank = collie::get_rank(), world = collie::get_world_size();
  std::vector<float> data(4, static_cast<float>(rank + 1));
  collie::all_reduce(collie::view(data.data(), data.size()));  // sum, in place

  collie::print("world size", world, "all_reduce ->", data[0], "expected", world * (world + 1) / 2);
  collie::barrier();
  collie::destroy_process_group();
  return data[0] == world * (world + 1) / 2.0f ? 0 : 1;
} catch (const std::exception& e) {  // a bad environment, an unreachable store, a timeout
  std::fprintf(stderr, "hello_allreduce: %s\n", e.what());
  return 1;
}
