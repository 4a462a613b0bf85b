// mpi_exchange: Open MPI's MPI_Alltoall and an MPI_Send/MPI_Recv
// ping-pong (osu_latency's), timed like collie-bench -C all_to_all and
// -C sendrecv, for the peer comparison:
//
//   mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self -np 2 \
//       mpi_exchange alltoall|pingpong MIN_BYTES MAX_BYTES FACTOR ITERS WARMUP
//
// alltoall: MIN/MAX_BYTES is each rank's whole float32 buffer (P equal
// parts), as collie-bench's all_to_all. pingpong: ranks 0 and 1, one-way
// time (half a round trip). Rank 0 prints "bytes time_us algbw_gbps" per
// size, the time averaged over the ranks.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const bool pingpong = argc == 7 && std::strcmp(argv[1], "pingpong") == 0;
  if (argc != 7 || (!pingpong && std::strcmp(argv[1], "alltoall") != 0) ||
      (pingpong && world < 2)) {
    if (rank == 0)
      std::fprintf(stderr,
                   "usage: %s alltoall|pingpong MIN_BYTES MAX_BYTES FACTOR ITERS WARMUP "
                   "(pingpong: 2+ ranks)\n",
                   argv[0]);
    MPI_Finalize();
    return 2;
  }
  const size_t min_bytes = std::strtoull(argv[2], nullptr, 10),
               max_bytes = std::strtoull(argv[3], nullptr, 10);
  const double factor = std::atof(argv[4]);
  const int iters = std::atoi(argv[5]), warmup = std::atoi(argv[6]);
  std::vector<char> in(max_bytes + 1, 1), out(max_bytes + 1, 0);
  for (size_t bytes = min_bytes; bytes <= max_bytes;) {
    // alltoall: whole float32 parts of a rank's buffer; pingpong: the bytes.
    const int part = static_cast<int>(bytes / sizeof(float) / static_cast<size_t>(world));
    const size_t moved = pingpong ? bytes : static_cast<size_t>(part) * sizeof(float) * world;
    auto once = [&] {
      if (!pingpong) {
        MPI_Alltoall(in.data(), part, MPI_FLOAT, out.data(), part, MPI_FLOAT, MPI_COMM_WORLD);
      } else if (rank == 0) {
        MPI_Send(in.data(), static_cast<int>(bytes), MPI_CHAR, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(out.data(), static_cast<int>(bytes), MPI_CHAR, 1, 0, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
      } else if (rank == 1) {
        MPI_Recv(out.data(), static_cast<int>(bytes), MPI_CHAR, 0, 0, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
        MPI_Send(out.data(), static_cast<int>(bytes), MPI_CHAR, 0, 0, MPI_COMM_WORLD);
      }
    };
    if (pingpong || part > 0) {
      for (int i = 0; i < warmup; ++i) once();
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = MPI_Wtime();
      for (int i = 0; i < iters; ++i) once();
      double us = (MPI_Wtime() - start) * 1e6 / iters, avg = 0;
      if (pingpong) us /= 2;
      MPI_Reduce(&us, &avg, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
      avg /= world;
      const double shown = pingpong ? us : avg;  // pingpong: rank 0's (idle ranks report 0)
      if (rank == 0)
        std::printf("%zu %.2f %.4f\n", moved, shown,
                    shown > 0 ? static_cast<double>(moved) / (shown * 1e3) : 0.0);
      std::fflush(stdout);
    }
    const size_t next = static_cast<size_t>(static_cast<double>(bytes) * factor);
    bytes = next > bytes ? next : bytes + 1;
  }
  MPI_Finalize();
  return 0;
}
