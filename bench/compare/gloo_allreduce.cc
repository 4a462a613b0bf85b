// gloo_allreduce: Gloo's ring all_reduce (the algorithm torch's ProcessGroupGloo
// runs for CPU tensors) over its TCP transport on loopback, timed like
// collie-bench: one process per rank, float32 sum, sizes from -b to -e
// bytes multiplied by -f, -n timed iterations after -w warm-up ones. Ranks
// meet through a gloo FileStore directory; rank 0 prints one line per size:
//
//   bytes time_us algbw_gbps busbw_gbps
//
// Usage: gloo_allreduce RANK WORLD STORE_DIR MIN_BYTES MAX_BYTES FACTOR ITERS WARMUP
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 9) {
    std::fprintf(stderr, "usage: %s RANK WORLD STORE_DIR MIN_BYTES MAX_BYTES FACTOR ITERS WARMUP\n",
                 argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]), world = std::atoi(argv[2]);
  const std::string store_dir = argv[3];
  const size_t min_bytes = std::strtoull(argv[4], nullptr, 10),
               max_bytes = std::strtoull(argv[5], nullptr, 10);
  const double factor = std::atof(argv[6]);
  const int iters = std::atoi(argv[7]), warmup = std::atoi(argv[8]);

  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(store_dir);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
  context->setTimeout(std::chrono::minutes(5));
  context->connectFullMesh(store, device);

  std::vector<float> data(max_bytes / sizeof(float) + 1, 1.0f);
  uint32_t tag = 0;
  auto run = [&](size_t count) {
    gloo::AllreduceOptions opts(context);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setOutput(data.data(), count);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTag(tag++);
    gloo::allreduce(opts);
  };
  for (size_t bytes = min_bytes; bytes <= max_bytes;) {
    size_t count = bytes / sizeof(float);
    if (count > 0) {
      for (int i = 0; i < warmup; ++i) run(count);
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) run(count);
      double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count() /
          iters;
      double algbw = count * sizeof(float) / (us * 1e3);
      if (rank == 0)
        std::printf("%zu %.2f %.4f %.4f\n", count * sizeof(float), us, algbw,
                    algbw * 2.0 * (world - 1) / world);
      std::fflush(stdout);
    }
    size_t next = static_cast<size_t>(bytes * factor);
    bytes = next > bytes ? next : bytes + 1;
  }
  return 0;
}
