// NcclProcessGroup on real GPUs: one rank per visible device, ranks as
// threads of this process (each with its own communicator, device and
// current stream) rendezvousing through a HashStore. On a machine without a
// CUDA device the executable exits 77 with the reason, so ctest reports
// "skipped", never "passed".
#include <cuda_runtime.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collie/base/error.h"
#include "collie/rendezvous/hash_store.h"
#include "collie/runtime/cuda/cuda_device.h"
#include "collie/runtime/nccl/nccl_process_group.h"
#include "collie/test/support/catch_session.h"

using namespace collie;
using Catch::Matchers::Contains;

namespace {

int g_devices = 0;

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) FAIL(what << ": " << cudaGetErrorString(e));
}

// Runs fn(rank, group) on one thread per GPU and rethrows the first failure.
void run_ranks(int world, const std::function<void(int, NcclProcessGroup&)>& fn,
               NcclOptions options = {}) {
  auto store = std::make_shared<HashStore>(std::chrono::seconds(60));
  static int generation = 0;
  options.group_name = "g" + std::to_string(++generation);
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        NcclOptions o = options;
        o.device = r;
        auto pg = NcclProcessGroup::create(store, r, world, o);
        fn(r, *pg);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

double value_for(int rank, size_t i) {
  return static_cast<double>((rank + 1) * 3 + static_cast<int>(i % 7));
}

// Host element of dtype `dt` at index i as double, and back.
double load(const std::vector<uint8_t>& buf, DataType dt, size_t i) {
  return visit_dtype(dt, [&]<typename T>(TypeTag<T>) {
    T v;
    std::memcpy(&v, buf.data() + i * sizeof(T), sizeof(T));
    return to_double(v);
  });
}

void store_value(std::vector<uint8_t>& buf, DataType dt, size_t i, double v) {
  visit_dtype(dt, [&]<typename T>(TypeTag<T>) {
    const T value = from_double<T>(v);
    std::memcpy(buf.data() + i * sizeof(T), &value, sizeof(T));
  });
}

double reference(ReduceOp op, int world, size_t i) {
  double acc = value_for(0, i);
  for (int r = 1; r < world; ++r) acc = reduce_value(op, acc, value_for(r, i));
  return op == ReduceOp::kAvg ? acc / world : acc;
}

}  // namespace

TEST_CASE("all_reduce: every dtype and op, on a user stream, matches the host reference") {
  const size_t count = 1001;
  for (int d = 0; d < kNumDataTypes; ++d) {
    for (int o = 0; o < kNumReduceOps; ++o) {
      auto dt = static_cast<DataType>(d);
      auto op = static_cast<ReduceOp>(o);
      if (!unsupported_reduction(op, dt).empty()) continue;
      // NCCL has no bitwise reductions; the contract suite checks how they
      // are served. bool and int8 values here would overflow or saturate.
      if (is_integral(dt) && (dt == DataType::kBool || dt == DataType::kInt8)) continue;
      if (op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor) continue;
      // Products of more than two ranks' values overflow the narrow types.
      if (op == ReduceOp::kProduct && g_devices > 2 && dt != DataType::kFloat64) continue;
      INFO(to_string(dt) << " " << to_string(op) << " world " << g_devices);
      run_ranks(g_devices, [&](int rank, NcclProcessGroup& pg) {
        cudaStream_t stream;
        cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate");
        cuda::set_current_stream(stream);
        std::vector<uint8_t> host(count * element_size(dt));
        for (size_t i = 0; i < count; ++i) store_value(host, dt, i, value_for(rank, i));
        void* dev = nullptr;
        cuda_ok(cudaMalloc(&dev, host.size()), "cudaMalloc");
        // The copy is queued on the user's stream; the collective must be
        // ordered after it without any host synchronisation.
        cuda_ok(cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, stream),
                "h2d");
        auto work = pg.all_reduce(TensorView{dev, count, dt, Device::cuda(rank)}, {.op = op});
        work->wait();
        cuda_ok(cudaMemcpyAsync(host.data(), dev, host.size(), cudaMemcpyDeviceToHost, stream),
                "d2h");
        cuda_ok(cudaStreamSynchronize(stream), "sync");
        CHECK(work->is_completed());
        for (size_t i = 0; i < count; ++i) {
          double want = reference(op, g_devices, i);
          double rel = dt == DataType::kFloat16 || dt == DataType::kBFloat16 ? 1e-2 : 1e-6;
          double tol = std::max(1e-9, std::abs(want) * rel);
          if (std::abs(load(host, dt, i) - want) > tol) {
            FAIL("rank " << rank << " element " << i << ": got " << load(host, dt, i) << " want "
                         << want);
          }
        }
        cudaFree(dev);
        cuda::set_current_stream(nullptr);
        cudaStreamDestroy(stream);
      });
    }
  }
}

TEST_CASE("broadcast, all_gather, reduce_scatter, barrier and coalesced all_reduce") {
  const int world = g_devices;
  run_ranks(world, [&](int rank, NcclProcessGroup& pg) {
    const size_t n = 257;
    std::vector<float> host(n * world);
    float *in = nullptr, *out = nullptr;
    cuda_ok(cudaMalloc(&in, n * world * sizeof(float)), "malloc");
    cuda_ok(cudaMalloc(&out, n * world * sizeof(float)), "malloc");
    Device dev = Device::cuda(rank);

    for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(rank * 1000 + i);
    cuda_ok(cudaMemcpy(in, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), "h2d");
    pg.broadcast(TensorView{in, n, DataType::kFloat32, dev}, {.root = world - 1})->wait();
    cuda_ok(cudaMemcpy(host.data(), in, n * sizeof(float), cudaMemcpyDeviceToHost), "d2h");
    for (size_t i = 0; i < n; ++i) REQUIRE(host[i] == static_cast<float>((world - 1) * 1000 + i));

    for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(rank * 1000 + i);
    cuda_ok(cudaMemcpy(in, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), "h2d");
    pg.all_gather(TensorView{out, n * world, DataType::kFloat32, dev},
                  TensorView{in, n, DataType::kFloat32, dev})
        ->wait();
    cuda_ok(cudaMemcpy(host.data(), out, n * world * sizeof(float), cudaMemcpyDeviceToHost), "d2h");
    for (int r = 0; r < world; ++r)
      for (size_t i = 0; i < n; ++i) REQUIRE(host[r * n + i] == static_cast<float>(r * 1000 + i));

    for (size_t i = 0; i < n * world; ++i) host[i] = static_cast<float>(i + rank);
    cuda_ok(cudaMemcpy(in, host.data(), n * world * sizeof(float), cudaMemcpyHostToDevice), "h2d");
    pg.reduce_scatter(TensorView{out, n, DataType::kFloat32, dev},
                      TensorView{in, n * world, DataType::kFloat32, dev})
        ->wait();
    cuda_ok(cudaMemcpy(host.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost), "d2h");
    float rank_sum = static_cast<float>(world * (world - 1) / 2);
    for (size_t i = 0; i < n; ++i)
      REQUIRE(host[i] == static_cast<float>(world * (rank * n + i)) + rank_sum);

    auto barrier = pg.barrier();
    CHECK(barrier->is_completed());  // barrier synchronizes

    std::vector<float> ones(n * world, 1.0f);
    cuda_ok(cudaMemcpy(in, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice), "h2d");
    cuda_ok(cudaMemcpy(out, ones.data(), n * world * sizeof(float), cudaMemcpyHostToDevice), "h2d");
    TensorView views[] = {{in, n, DataType::kFloat32, dev},
                          {out, n * world, DataType::kFloat32, dev}};
    pg.all_reduce_coalesced(views)->wait();
    cuda_ok(cudaDeviceSynchronize(), "sync");
    cuda_ok(cudaMemcpy(host.data(), out, n * world * sizeof(float), cudaMemcpyDeviceToHost), "d2h");
    for (size_t i = 0; i < n * world; ++i) REQUIRE(host[i] == static_cast<float>(world));
    cudaFree(in);
    cudaFree(out);
  });
}

TEST_CASE("reduce, gather, scatter, all_to_all_single, list all_gather and send/recv") {
  const int world = g_devices;
  run_ranks(world, [&](int rank, NcclProcessGroup& pg) {
    const size_t n = 33;
    const size_t total = n * static_cast<size_t>(world);
    const Device dev = Device::cuda(rank);
    const int root = world - 1;
    float *a = nullptr, *b = nullptr;
    cuda_ok(cudaMalloc(&a, total * sizeof(float)), "malloc");
    cuda_ok(cudaMalloc(&b, total * sizeof(float)), "malloc");
    auto put = [&](float* d, const std::vector<float>& h) {
      cuda_ok(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice), "h2d");
    };
    auto get = [&](const float* d, size_t count) {
      std::vector<float> h(count);
      cuda_ok(cudaMemcpy(h.data(), d, count * sizeof(float), cudaMemcpyDeviceToHost), "d2h");
      return h;
    };
    auto tv = [&](float* d, size_t count) { return TensorView{d, count, DataType::kFloat32, dev}; };
    auto filled = [](size_t count, const std::function<float(size_t)>& f) {
      std::vector<float> v(count);
      for (size_t i = 0; i < count; ++i) v[i] = f(i);
      return v;
    };

    // reduce: only the root's buffer changes
    put(a, std::vector<float>(n, static_cast<float>(rank + 1)));
    pg.reduce(tv(a, n), {.op = ReduceOp::kSum, .root = root})->wait();
    const float sum = static_cast<float>(world * (world + 1) / 2);
    REQUIRE(get(a, n) == std::vector<float>(n, rank == root ? sum : static_cast<float>(rank + 1)));

    // gather into the root's slots of b
    put(a, filled(n, [&](size_t i) { return static_cast<float>(rank * 100 + i); }));
    std::vector<TensorView> slots;
    if (rank == root)
      for (int p = 0; p < world; ++p) slots.push_back(tv(b + p * n, n));
    pg.gather(slots, tv(a, n), {.root = root})->wait();
    if (rank == root) {
      const auto h = get(b, total);
      for (size_t i = 0; i < total; ++i) REQUIRE(h[i] == static_cast<float>(i / n * 100 + i % n));
    }

    // scatter from the root's slots of b
    if (rank == root) put(b, filled(total, [&](size_t i) { return static_cast<float>(i * 2); }));
    pg.scatter(tv(a, n), slots, {.root = root})->wait();
    REQUIRE(get(a, n) ==
            filled(n, [&](size_t i) { return static_cast<float>((rank * n + i) * 2); }));

    // all_to_all_single, equal parts: part p of rank r holds r * 10000 + p
    put(a, filled(total, [&](size_t i) { return static_cast<float>(rank * 10000 + i / n); }));
    pg.all_to_all_single(tv(b, total), tv(a, total), {}, {})->wait();
    REQUIRE(get(b, total) ==
            filled(total, [&](size_t i) { return static_cast<float>(i / n * 10000 + rank); }));

    // list all_gather into slots that are not consecutive (reversed)
    put(a, std::vector<float>(n, static_cast<float>(rank)));
    std::vector<TensorView> reversed;
    for (int p = 0; p < world; ++p) reversed.push_back(tv(b + (world - 1 - p) * n, n));
    pg.all_gather(reversed, tv(a, n))->wait();
    REQUIRE(get(b, total) ==
            filled(total, [&](size_t i) { return static_cast<float>(world - 1 - i / n); }));

    // send/recv around a ring in one batch; no receive from any source
    if (world > 1) {
      const int right = (rank + 1) % world, left = (rank + world - 1) % world;
      put(a, std::vector<float>(n, static_cast<float>(rank)));
      const P2POp ops[] = {{P2POpType::kIsend, tv(a, n), right},
                           {P2POpType::kIrecv, tv(b, n), left}};
      pg.batch_isend_irecv(ops)->wait();
      REQUIRE(get(b, n) == std::vector<float>(n, static_cast<float>(left)));
    }
    CHECK_THROWS_WITH(pg.recv(tv(b, n), kAnySource), Contains("cannot receive from any source"));
    cudaFree(a);
    cudaFree(b);
  });
}

TEST_CASE("bad input: host buffers, wrong device, AVG on integers, bad counts") {
  run_ranks(1, [&](int, NcclProcessGroup& pg) {
    std::vector<float> host(16);
    CHECK_THROWS_WITH(pg.all_reduce(view(host.data(), host.size())),
                      Contains("backend takes cuda memory"));
    // A host pointer labelled as device memory is caught, not handed to NCCL.
    CHECK_THROWS_WITH(
        pg.all_reduce(TensorView{host.data(), 16, DataType::kFloat32, Device::cuda(0)}),
        Contains("is not CUDA device memory"));
    int32_t* dev = nullptr;
    cuda_ok(cudaMalloc(&dev, 64), "malloc");
    CHECK_THROWS_WITH(pg.all_reduce(TensorView{dev, 16, DataType::kInt32, Device::cuda(0)},
                                    {.op = ReduceOp::kAvg}),
                      Contains("avg is not defined"));
    CHECK_THROWS_AS(pg.all_gather(TensorView{dev, 3, DataType::kInt32, Device::cuda(0)},
                                  TensorView{dev, 2, DataType::kInt32, Device::cuda(0)}),
                    InvalidArgument);
    CHECK_THROWS_WITH(
        pg.broadcast(TensorView{dev, 1, DataType::kInt32, Device::cuda(0)}, {.root = 5}),
        Contains("root 5"));
    cudaFree(dev);
  });
}

TEST_CASE("a rank that never joins makes init time out with a clear error") {
  auto store = std::make_shared<HashStore>();
  auto start = std::chrono::steady_clock::now();
  try {
    NcclProcessGroup::create(
        store, 0, 2, {.device = 0, .timeout = std::chrono::seconds(5), .group_name = "lonely"});
    FAIL("init of a 2-rank communicator with one rank succeeded");
  } catch (const TimeoutError& e) {
    CHECK_THAT(e.what(), Contains("never joined"));
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
}

TEST_CASE("an aborted group fails pending and later work at once") {
  run_ranks(1, [&](int, NcclProcessGroup& pg) {
    float* dev = nullptr;
    cuda_ok(cudaMalloc(&dev, 4096), "malloc");
    pg.abort("aborted by the test");
    CHECK(pg.broken());
    CHECK_THROWS_WITH(pg.all_reduce(TensorView{dev, 1024, DataType::kFloat32, Device::cuda(0)}),
                      Contains("aborted by the test"));
    cudaFree(dev);
  });
}

TEST_CASE("Work on the device: blocking calls are stream-ordered, wait() ends in success") {
  run_ranks(g_devices, [&](int rank, NcclProcessGroup& pg) {
    const size_t n = 1 << 20;  // 4 MiB: long enough to be still running at the return
    cudaStream_t stream;
    cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda::set_current_stream(stream);
    std::vector<float> host(n, static_cast<float>(rank + 1));
    float* dev = nullptr;
    cuda_ok(cudaMalloc(&dev, n * sizeof(float)), "cudaMalloc");
    cuda_ok(cudaMemcpyAsync(dev, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream),
            "h2d");
    const TensorView view{dev, n, DataType::kFloat32, Device::cuda(rank)};
    const float sum = static_cast<float>(g_devices * (g_devices + 1) / 2);
    // Blocking: the read-back queued next on the same stream sees the sum,
    // with no host wait in between.
    auto blocking = pg.all_reduce(view, {.async_op = false});
    CHECK(blocking->exception() == nullptr);
    cuda_ok(cudaMemcpyAsync(host.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost, stream),
            "d2h");
    cuda_ok(cudaStreamSynchronize(stream), "sync");
    CHECK(host.front() == sum);
    CHECK(host.back() == sum);
    // Async: wait() blocks the host until the device finished.
    auto async = pg.all_reduce(view);
    async->wait();
    CHECK(async->is_completed());
    CHECK(async->is_success());
    CHECK(async->exception() == nullptr);
    // synchronize(): the stream waits, the host goes on; then the Work
    // completes on its own.
    auto ordered = pg.broadcast(view, {.root = 0});
    ordered->synchronize();
    cuda_ok(cudaStreamSynchronize(stream), "sync");
    CHECK(ordered->is_completed());
    CHECK(ordered->is_success());
    cudaFree(dev);
    cuda::set_current_stream(nullptr);
    cudaStreamDestroy(stream);
  });
}

TEST_CASE("CUDA graphs: a captured all_reduce replays 1,000 times with the right sums") {
  run_ranks(g_devices, [&](int rank, NcclProcessGroup& pg) {
    const size_t n = 1024;
    const int replays = 1000;
    cudaStream_t stream;
    cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda::set_current_stream(stream);
    float *in = nullptr, *buf = nullptr, *host_in = nullptr, *host_out = nullptr;
    cuda_ok(cudaMalloc(&in, n * sizeof(float)), "cudaMalloc");
    cuda_ok(cudaMalloc(&buf, n * sizeof(float)), "cudaMalloc");
    cuda_ok(cudaMallocHost(&host_in, n * sizeof(float)), "cudaMallocHost");
    cuda_ok(cudaMallocHost(&host_out, n * sizeof(float)), "cudaMallocHost");
    const TensorView view{buf, n, DataType::kFloat32, Device::cuda(rank)};
    // The graph: copy the input into the buffer, all_reduce it in place.
    cudaGraph_t graph = nullptr;
    cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "BeginCapture");
    cuda_ok(cudaMemcpyAsync(buf, in, n * sizeof(float), cudaMemcpyDeviceToDevice, stream), "d2d");
    auto captured = pg.all_reduce(view);
    cuda_ok(cudaStreamEndCapture(stream, &graph), "EndCapture");
    CHECK(captured->is_completed());
    cudaGraphExec_t exec = nullptr;
    cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    const float ranks_sum = static_cast<float>(g_devices * (g_devices + 1) / 2);
    int wrong = 0;
    for (int i = 0; i < replays; ++i) {
      // Replay i: rank r contributes (r + 1) * (i + 1) + j at element j.
      for (size_t j = 0; j < n; ++j)
        host_in[j] = static_cast<float>((rank + 1) * (i + 1)) + static_cast<float>(j % 5);
      cuda_ok(cudaMemcpyAsync(in, host_in, n * sizeof(float), cudaMemcpyHostToDevice, stream),
              "h2d");
      cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
      cuda_ok(cudaMemcpyAsync(host_out, buf, n * sizeof(float), cudaMemcpyDeviceToHost, stream),
              "d2h");
      cuda_ok(cudaStreamSynchronize(stream), "sync");
      for (size_t j = 0; j < n; ++j) {
        const float want = ranks_sum * static_cast<float>(i + 1) +
                           static_cast<float>(g_devices) * static_cast<float>(j % 5);
        if (host_out[j] != want && wrong++ < 5)
          FAIL_CHECK("rank " << rank << " replay " << i << " element " << j << ": got "
                             << host_out[j] << " want " << want);
      }
    }
    CHECK(wrong == 0);
    // Eager calls still work after the replays, and a barrier (it waits on
    // the host) is refused inside a capture with a clear error.
    pg.all_reduce(view)->wait();
    cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "BeginCapture");
    std::string refusal;
    try {
      pg.barrier();
    } catch (const InvalidArgument& e) {
      refusal = e.what();
    }
    cudaGraph_t empty = nullptr;
    cudaStreamEndCapture(stream, &empty);
    if (empty) cudaGraphDestroy(empty);
    cudaGetLastError();
    CHECK_THAT(refusal, Contains("cannot be captured in a CUDA graph"));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaFreeHost(host_in);
    cudaFreeHost(host_out);
    cudaFree(in);
    cudaFree(buf);
    cuda::set_current_stream(nullptr);
    cudaStreamDestroy(stream);
  });
}

int main(int argc, char** argv) {
  g_devices = cuda::device_count();
  if (g_devices == 0) {
    std::printf("SKIP: no CUDA device (%s)\n", cuda::no_device_reason().c_str());
    return 77;
  }
  std::printf("NCCL %s, %d CUDA device(s)\n", NcclProcessGroup::nccl_version().c_str(), g_devices);
  return collie::test::run_catch_session(argc, argv);
}
