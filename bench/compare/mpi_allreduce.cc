// mpi_allreduce: MPI_Allreduce (float32 sum, in place) timed like
// collie-bench, for Open MPI over TCP loopback:
//
//   mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self -np 2 \
//       mpi_allreduce MIN_BYTES MAX_BYTES FACTOR ITERS WARMUP
//
// Rank 0 prints "bytes time_us algbw_gbps busbw_gbps" per size, the time
// averaged over the ranks.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (argc != 6) {
    if (rank == 0)
      std::fprintf(stderr, "usage: %s MIN_BYTES MAX_BYTES FACTOR ITERS WARMUP\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  const size_t min_bytes = std::strtoull(argv[1], nullptr, 10),
               max_bytes = std::strtoull(argv[2], nullptr, 10);
  const double factor = std::atof(argv[3]);
  const int iters = std::atoi(argv[4]), warmup = std::atoi(argv[5]);
  std::vector<float> data(max_bytes / sizeof(float) + 1, 1.0f);
  for (size_t bytes = min_bytes; bytes <= max_bytes;) {
    int count = static_cast<int>(bytes / sizeof(float));
    if (count > 0) {
      for (int i = 0; i < warmup; ++i)
        MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      MPI_Barrier(MPI_COMM_WORLD);
      double start = MPI_Wtime();
      for (int i = 0; i < iters; ++i)
        MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double us = (MPI_Wtime() - start) * 1e6 / iters, avg = 0;
      MPI_Reduce(&us, &avg, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
      avg /= world;
      double algbw = count * sizeof(float) / (avg * 1e3);
      if (rank == 0)
        std::printf("%zu %.2f %.4f %.4f\n", count * sizeof(float), avg, algbw,
                    algbw * 2.0 * (world - 1) / world);
      std::fflush(stdout);
    }
    size_t next = static_cast<size_t>(bytes * factor);
    bytes = next > bytes ? next : bytes + 1;
  }
  MPI_Finalize();
  return 0;
}
