// nccl_overhead: what collie's NCCL wrapper costs on top of NCCL.
//
// For each size, one process drives one rank per visible GPU (threads). Two
// loops run back to back on the same stream and buffer:
//   direct: ncclAllReduce(buf, buf, ..., comm, stream)       (NCCL alone)
//   collie: pg.all_reduce(view, {.async_op = false})         (stream-ordered,
//           what torch's dist.all_reduce(t) does), current stream = that stream
// Device time per call comes from CUDA events around `iters` calls; host time
// per call from the wall clock of issuing them (what a small-message caller
// feels). The table's last columns are collie/direct - 1 (device time) and
// the extra host microseconds per call.
//
// Then CUDA graphs: `iters` calls of each kind captured in one graph, the
// graph replayed `replays` times; the device time per call of the replays.
// Last, the host cost of each CUDA call on collie's call path (event
// record, stream wait, event query, pointer check, ...), 2,000 of each:
// where a call's host microseconds go.
//
//   nccl_overhead [-b 4] [-e 268435456] [-f 4] [-n 50] [-w 10]
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collie/rendezvous/hash_store.h"
#include "collie/runtime/cuda/cuda_device.h"
#include "collie/runtime/nccl/nccl_process_group.h"

using namespace collie;

namespace {

#define CK(x)                                                                             \
  do {                                                                                    \
    auto e_ = (x);                                                                        \
    if (e_ != 0) {                                                                        \
      std::fprintf(stderr, "%s failed (%d) at %s:%d\n", #x, (int)e_, __FILE__, __LINE__); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

struct Result {
  double direct_us = 0, collie_us = 0;              // device time per call
  double direct_host_us = 0, collie_host_us = 0;    // host issue time per call
  double direct_graph_us = 0, collie_graph_us = 0;  // device time per call, replayed
};

// Host microseconds per call of fn, over n calls.
template <typename Fn>
double host_cost(int n, Fn&& fn) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) fn();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
         n;
}

// The CUDA calls a collie launch makes, timed one by one on this thread.
void print_call_costs(cudaStream_t stream, void* buf, int device) {
  const int n = 2000;
  cudaStream_t other;
  CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CK(cudaEventRecord(ev, stream));
  CK(cudaStreamSynchronize(stream));
  std::printf("\n# host cost of the CUDA calls on a launch's path (us per call, %d calls)\n", n);
  std::printf("%-40s %8.3f\n", "cudaSetDevice", host_cost(n, [&] { cudaSetDevice(device); }));
  std::printf("%-40s %8.3f\n", "cudaStreamIsCapturing", host_cost(n, [&] {
                cudaStreamCaptureStatus st;
                cudaStreamIsCapturing(stream, &st);
              }));
  std::printf("%-40s %8.3f\n", "cudaPointerGetAttributes", host_cost(n, [&] {
                cudaPointerAttributes a;
                cudaPointerGetAttributes(&a, buf);
              }));
  std::printf("%-40s %8.3f\n", "cudaEventRecord",
              host_cost(n, [&] { cudaEventRecord(ev, stream); }));
  std::printf("%-40s %8.3f\n", "cudaStreamWaitEvent",
              host_cost(n, [&] { cudaStreamWaitEvent(other, ev, 0); }));
  CK(cudaStreamSynchronize(stream));
  CK(cudaStreamSynchronize(other));
  std::printf("%-40s %8.3f\n", "cudaEventQuery (fired)", host_cost(n, [&] { cudaEventQuery(ev); }));
  std::printf("%-40s %8.3f\n", "cudaEventCreate + cudaEventDestroy", host_cost(n, [&] {
                cudaEvent_t e;
                cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
                cudaEventDestroy(e);
              }));
  cudaEventDestroy(ev);
  cudaStreamDestroy(other);
}

struct Args {
  size_t min_bytes = 4, max_bytes = size_t{256} << 20, factor = 4;
  int iters = 50, warmup = 10, replays = 20;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i];
    size_t v = std::strtoull(argv[i + 1], nullptr, 10);
    if (f == "-b")
      a.min_bytes = v;
    else if (f == "-e")
      a.max_bytes = v;
    else if (f == "-f")
      a.factor = v;
    else if (f == "-n")
      a.iters = static_cast<int>(v);
    else if (f == "-w")
      a.warmup = static_cast<int>(v);
    else if (f == "-r")
      a.replays = static_cast<int>(v);
    else {
      std::fprintf(stderr,
                   "usage: nccl_overhead [-b min] [-e max] [-f factor] [-n iters] [-w warmup] "
                   "[-r graph replays]\n");
      std::exit(2);
    }
  }
  return a;
}

// One rank: its own device, a raw communicator and a collie group.
void rank_main(int rank, int world, const Args& args, std::shared_ptr<Store> store,
               std::vector<Result>* results) {
  CK(cudaSetDevice(rank));
  auto pg = NcclProcessGroup::create(store, rank, world, {.device = rank, .group_name = "bench"});
  ncclUniqueId id;
  if (rank == 0) {
    CK(ncclGetUniqueId(&id));
    store->set("raw_id", std::span<const uint8_t>(reinterpret_cast<uint8_t*>(&id), sizeof id));
  } else {
    Bytes b = store->get("raw_id");
    std::memcpy(&id, b.data(), sizeof id);
  }
  ncclComm_t comm;
  CK(ncclCommInitRank(&comm, world, id, rank));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cuda::set_current_stream(stream);
  void* buf = nullptr;
  CK(cudaMalloc(&buf, args.max_bytes));
  CK(cudaMemset(buf, 0, args.max_bytes));
  cudaEvent_t start, stop;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));

  for (size_t bytes = args.min_bytes, k = 0; bytes <= args.max_bytes; bytes *= args.factor, ++k) {
    const size_t count = bytes / sizeof(float);
    TensorView view{buf, count, DataType::kFloat32, Device::cuda(rank)};
    auto time_loop = [&](auto&& call, double* device_us, double* host_us) {
      for (int i = 0; i < args.warmup; ++i) call();
      CK(cudaStreamSynchronize(stream));
      auto h0 = std::chrono::steady_clock::now();
      CK(cudaEventRecord(start, stream));
      for (int i = 0; i < args.iters; ++i) call();
      CK(cudaEventRecord(stop, stream));
      auto h1 = std::chrono::steady_clock::now();
      CK(cudaEventSynchronize(stop));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, start, stop));
      *device_us = ms * 1000.0 / args.iters;
      *host_us = std::chrono::duration<double, std::micro>(h1 - h0).count() / args.iters;
    };
    // `iters` calls captured in one graph, replayed; device time per call.
    auto time_graph = [&](auto&& call, double* device_us) {
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < args.iters; ++i) call();
      CK(cudaStreamEndCapture(stream, &graph));
      CK(cudaGraphInstantiate(&exec, graph, 0));
      CK(cudaGraphLaunch(exec, stream));  // warm-up
      CK(cudaStreamSynchronize(stream));
      CK(cudaEventRecord(start, stream));
      for (int i = 0; i < args.replays; ++i) CK(cudaGraphLaunch(exec, stream));
      CK(cudaEventRecord(stop, stream));
      CK(cudaEventSynchronize(stop));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, start, stop));
      *device_us = ms * 1000.0 / (static_cast<double>(args.iters) * args.replays);
      CK(cudaGraphExecDestroy(exec));
      CK(cudaGraphDestroy(graph));
    };
    Result r;
    auto direct = [&] { CK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream)); };
    auto through_collie = [&] { pg->all_reduce(view, {.async_op = false}); };
    time_loop(direct, &r.direct_us, &r.direct_host_us);
    time_loop(through_collie, &r.collie_us, &r.collie_host_us);
    time_graph(direct, &r.direct_graph_us);
    time_graph(through_collie, &r.collie_graph_us);
    if (rank == 0) results->push_back(r);
  }
  if (rank == 0) print_call_costs(stream, buf, rank);
  CK(cudaStreamSynchronize(stream));
  cuda::set_current_stream(nullptr);
  ncclCommDestroy(comm);
  cudaFree(buf);
}

}  // namespace

int main(int argc, char** argv) {
  Args args = parse(argc, argv);
  const int world = cuda::device_count();
  if (world == 0) {
    std::printf("SKIP: no CUDA device (%s)\n", cuda::no_device_reason().c_str());
    return 77;
  }
  auto store = std::make_shared<HashStore>(std::chrono::seconds(120));
  std::vector<Result> results;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back(rank_main, r, world, std::cref(args), store, &results);
  for (auto& t : threads) t.join();

  std::printf("# nccl_overhead: NCCL %s, %d GPU(s), float32 sum, %d iters (+%d warm-up)\n",
              NcclProcessGroup::nccl_version().c_str(), world, args.iters, args.warmup);
  std::printf("%12s %12s %12s %10s %14s %14s %12s %12s %12s %10s\n", "bytes", "nccl_us",
              "collie_us", "overhead", "nccl_host_us", "collie_host_us", "extra_host", "nccl_graph",
              "collie_graph", "graph_ovh");
  size_t bytes = args.min_bytes;
  for (const auto& r : results) {
    std::printf("%12zu %12.2f %12.2f %9.2f%% %14.2f %14.2f %12.2f %12.2f %12.2f %9.2f%%\n", bytes,
                r.direct_us, r.collie_us, 100.0 * (r.collie_us / r.direct_us - 1.0),
                r.direct_host_us, r.collie_host_us, r.collie_host_us - r.direct_host_us,
                r.direct_graph_us, r.collie_graph_us,
                100.0 * (r.collie_graph_us / r.direct_graph_us - 1.0));
    bytes *= args.factor;
  }
  return 0;
}
