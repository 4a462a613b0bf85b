// mpi_collectives: Open MPI's collectives (float32; sum where they reduce)
// timed like collie-bench, over whichever BTLs (and coll components) mpirun
// is given:
//
//   mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self -np 2 \
//       mpi_collectives COLLECTIVES MIN_BYTES MAX_BYTES FACTOR ITERS WARMUP ITER_BYTES
//
// COLLECTIVES is comma-separated: all_reduce (MPI_Allreduce, in place),
// broadcast (MPI_Bcast from rank 0), reduce (MPI_Reduce to rank 0),
// all_gather (MPI_Allgather), reduce_scatter (MPI_Reduce_scatter_block),
// gather (MPI_Gather to rank 0), scatter (MPI_Scatter from rank 0),
// all_to_all (MPI_Alltoall, equal parts), all_to_all_uneven (MPI_Alltoallv
// with peer_sweep::router_splits' counts), pingpong (MPI_Send/MPI_Recv
// between ranks 0 and 1, osu_latency's: one-way time, half a round trip)
// and stream (rank 0 sends ITERS messages back to back to rank 1, which
// acknowledges the last: time per message). Sizes count as nccl-tests
// counts them: the whole gathered / scattered / exchanged buffer for
// all_gather, reduce_scatter, gather, scatter and the all_to_alls; the
// message for pingpong and stream (bytes, not floats). ITER_BYTES: 0, or at
// most ITER_BYTES / bytes timed calls per size (1 to ITERS; the warm-up at
// most as many). Rank 0 prints
//
//   bytes time_us algbw_gbps busbw_gbps collective
//
// per collective and size, the time averaged over the ranks (pingpong and
// stream: rank 0's; the others idle).
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
  std::vector<float> data(max_bytes / sizeof(float) + 1, 1.0f),
      out(data.size() + static_cast<size_t>(world), 0.0f);
  const std::vector<std::string> known = {
      "all_reduce", "broadcast",  "reduce",   "all_gather",        "reduce_scatter", "gather",
      "scatter",    "all_to_all", "pingpong", "all_to_all_uneven", "stream"};

  for (const auto& c : collectives) {
    if (std::find(known.begin(), known.end(), c) == known.end()) {
      if (rank == 0) std::fprintf(stderr, "mpi_collectives: unknown collective %s\n", c.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    // Its index in `known`, for the timed calls: comparing names there cost a
    // small call tens of ns.
    const size_t k = static_cast<size_t>(std::find(known.begin(), known.end(), c) - known.begin());
    const bool p2p = c == "pingpong" || c == "stream";
    if (p2p && world < 2) {
      if (rank == 0) std::fprintf(stderr, "mpi_collectives: %s needs 2 ranks\n", c.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (size_t bytes = min_bytes; bytes <= max_bytes;) {
      const int count = static_cast<int>(bytes / sizeof(float)), part = count / world;
      const bool whole = c == "all_reduce" || c == "broadcast" || c == "reduce";
      // all_to_all_uneven: the router's counts and their offsets, in floats.
      std::vector<int> sends, sdispl, recvs, rdispl;
      if (c == "all_to_all_uneven") {
        const auto s = peer_sweep::router_splits(count, world, rank);
        const auto r = peer_sweep::router_receives(count, world, rank);
        for (int p = 0, so = 0, ro = 0; p < world; ++p) {
          sends.push_back(static_cast<int>(s[p]));
          recvs.push_back(static_cast<int>(r[p]));
          sdispl.push_back(so);
          rdispl.push_back(ro);
          so += sends.back();
          ro += recvs.back();
        }
      }
      const int pbytes = static_cast<int>(bytes);
      char* const send_bytes = reinterpret_cast<char*>(data.data());
      char* const recv_bytes = reinterpret_cast<char*>(out.data());
      if (p2p || (whole ? count > 0 : part > 0)) {
        auto call = [&] {
          if (k == 0 /* all_reduce */)
            MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
          else if (k == 1 /* broadcast */)
            MPI_Bcast(data.data(), count, MPI_FLOAT, 0, MPI_COMM_WORLD);
          else if (k == 2 /* reduce */)
            MPI_Reduce(data.data(), out.data(), count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
          else if (k == 3 /* all_gather */)
            MPI_Allgather(data.data(), part, MPI_FLOAT, out.data(), part, MPI_FLOAT,
                          MPI_COMM_WORLD);
          else if (k == 4 /* reduce_scatter */)
            MPI_Reduce_scatter_block(data.data(), out.data(), part, MPI_FLOAT, MPI_SUM,
                                     MPI_COMM_WORLD);
          else if (k == 5 /* gather */)
            MPI_Gather(data.data(), part, MPI_FLOAT, out.data(), part, MPI_FLOAT, 0,
                       MPI_COMM_WORLD);
          else if (k == 6 /* scatter */)
            MPI_Scatter(data.data(), part, MPI_FLOAT, out.data(), part, MPI_FLOAT, 0,
                        MPI_COMM_WORLD);
          else if (k == 7 /* all_to_all */)
            MPI_Alltoall(data.data(), part, MPI_FLOAT, out.data(), part, MPI_FLOAT, MPI_COMM_WORLD);
          else if (k == 9 /* all_to_all_uneven */)
            MPI_Alltoallv(data.data(), sends.data(), sdispl.data(), MPI_FLOAT, out.data(),
                          recvs.data(), rdispl.data(), MPI_FLOAT, MPI_COMM_WORLD);
          else if (k == 8 /* pingpong */ && rank == 0) {
            MPI_Send(send_bytes, pbytes, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(recv_bytes, pbytes, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          } else if (k == 8 /* pingpong */ && rank == 1) {
            MPI_Recv(recv_bytes, pbytes, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(recv_bytes, pbytes, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
          } else if (k == 10 /* stream */ && rank == 0) {
            MPI_Send(send_bytes, pbytes, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
          } else if (k == 10 /* stream */ && rank == 1) {
            MPI_Recv(recv_bytes, pbytes, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          }
        };
        // stream: the receiver's word that the last message is in, so that
        // rank 0's clock covers every delivery.
        auto ack = [&] {
          if (c != "stream") return;
          char done = 0;
          if (rank == 1) MPI_Send(&done, 1, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
          if (rank == 0) MPI_Recv(&done, 1, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        };
        const int iters = peer_sweep::timed_calls(max_iters, iter_bytes, bytes);
        const int warmup = std::min(max_warmup, iters);
        for (int i = 0; i < warmup; ++i) call();
        ack();
        MPI_Barrier(MPI_COMM_WORLD);
        const double start = MPI_Wtime();
        for (int i = 0; i < iters; ++i) call();
        ack();
        double us = (MPI_Wtime() - start) * 1e6 / iters, avg = 0;
        if (c == "pingpong") us /= 2;
        MPI_Reduce(&us, &avg, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        avg = p2p ? us : avg / world;
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
