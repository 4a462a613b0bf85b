// mpi_collectives: Open MPI's collectives (float32; sum where they reduce)
// timed like collie-bench, over whichever BTLs mpirun is given:
//
//   mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self -np 2 \
//       mpi_collectives COLLECTIVES MIN_BYTES MAX_BYTES FACTOR ITERS WARMUP ITER_BYTES
//
// COLLECTIVES is comma-separated: all_reduce (MPI_Allreduce, in place),
// broadcast (MPI_Bcast from rank 0), all_gather (MPI_Allgather),
// reduce_scatter (MPI_Reduce_scatter_block). Sizes count as nccl-tests
// counts them: the whole gathered / scattered buffer for all_gather and
// reduce_scatter. ITER_BYTES: 0, or at most ITER_BYTES / bytes timed calls
// per size (1 to ITERS; the warm-up at most as many). Rank 0 prints
//
//   bytes time_us algbw_gbps busbw_gbps collective
//
// per collective and size, the time averaged over the ranks.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "collie/bench/compare/peer_sweep.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (argc != 8) {
    if (rank == 0)
      std::fprintf(stderr,
                   "usage: %s COLLECTIVES MIN_BYTES MAX_BYTES FACTOR ITERS WARMUP ITER_BYTES\n",
                   argv[0]);
    MPI_Finalize();
    return 2;
  }
  std::vector<std::string> collectives;
  std::stringstream list(argv[1]);
  for (std::string c; std::getline(list, c, ',');) collectives.push_back(c);
  const size_t min_bytes = std::strtoull(argv[2], nullptr, 10),
               max_bytes = std::strtoull(argv[3], nullptr, 10),
               iter_bytes = std::strtoull(argv[7], nullptr, 10);
  const double factor = std::atof(argv[4]);
  const int max_iters = std::atoi(argv[5]), max_warmup = std::atoi(argv[6]);
  std::vector<float> data(max_bytes / sizeof(float) + 1, 1.0f), out(data.size(), 0.0f);

  for (const auto& c : collectives) {
    if (c != "all_reduce" && c != "broadcast" && c != "all_gather" && c != "reduce_scatter") {
      if (rank == 0) std::fprintf(stderr, "mpi_collectives: unknown collective %s\n", c.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (size_t bytes = min_bytes; bytes <= max_bytes;) {
      const int count = static_cast<int>(bytes / sizeof(float)), part = count / world;
      const bool gathers = c == "all_gather" || c == "reduce_scatter";
      if (gathers ? part > 0 : count > 0) {
        auto call = [&] {
          if (c == "all_reduce")
            MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
          else if (c == "broadcast")
            MPI_Bcast(data.data(), count, MPI_FLOAT, 0, MPI_COMM_WORLD);
          else if (c == "all_gather")
            MPI_Allgather(data.data(), part, MPI_FLOAT, out.data(), part, MPI_FLOAT,
                          MPI_COMM_WORLD);
          else
            MPI_Reduce_scatter_block(data.data(), out.data(), part, MPI_FLOAT, MPI_SUM,
                                     MPI_COMM_WORLD);
        };
        const int iters = peer_sweep::timed_calls(max_iters, iter_bytes, bytes);
        const int warmup = std::min(max_warmup, iters);
        for (int i = 0; i < warmup; ++i) call();
        MPI_Barrier(MPI_COMM_WORLD);
        const double start = MPI_Wtime();
        for (int i = 0; i < iters; ++i) call();
        double us = (MPI_Wtime() - start) * 1e6 / iters, avg = 0;
        MPI_Reduce(&us, &avg, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        avg /= world;
        const double algbw = bytes / (avg * 1e3);
        if (rank == 0)
          std::printf("%zu %.2f %.4f %.4f %s\n", bytes, avg, algbw,
                      algbw * peer_sweep::bus_factor(c, world), c.c_str());
        std::fflush(stdout);
      }
      const auto next = static_cast<size_t>(bytes * factor);
      bytes = next > bytes ? next : bytes + 1;
    }
  }
  MPI_Finalize();
  return 0;
}
