// The correctness sweep: every collective x every dtype x every op x world
// sizes 1, 2, 3, 4, 5, 8 x counts 0, 1, P-1, P+1 and a large odd count, in
// place and out of place, each rank checking its output against a reference
// computed locally. Ranks are threads over a HashStore (real sockets, one
// process) so that the whole sweep runs in seconds. Small segments and a
// small crossover make the "large" count span many pipelined segments and
// every code path (ring and direct exchange) run.
#include <catch2/catch.hpp>

#include <cstring>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/collectives/cpu_communicator.h"
#include "collie/collectives/transport/join.h"
#include "collie/test/collectives/harness.h"

using namespace collie;
using namespace collie::test;

namespace {

CommunicatorOptions sweep_options() {
  CommunicatorOptions o;
  o.store_prefix = "sweep";
  o.segment_bytes = 1024;      // 3001 float64 = 24 KB: dozens of segments
  o.small_message_bytes = 64;  // below: direct exchange; above: ring
  o.timeout = std::chrono::seconds(60);
  return o;
}

const Deadline& deadline() {
  static const Deadline d(std::chrono::minutes(5));
  return d;
}

void sweep_all_reduce(Communicator& c, AllReduceAlgorithm algo) {
  const int P = c.size(), r = c.rank();
  for_each_reduction(P, [&](DataType dt, ReduceOp op, size_t n, bool in_place) {
    auto in = make_data(dt, n, r, op);
    const auto want = reference_reduce(dt, op, P, n);
    std::vector<uint8_t> out(in.size(), 0xab);
    if (in_place) {
      c.all_reduce(view_of(in, dt), view_of(in, dt), op, deadline(), algo);
      EXPECT_SAME(in, want, dt, "all_reduce ", to_string(algo), " ", dt, " ", op, " n=", n,
                  " in place");
    } else {
      const auto in_copy = in;
      c.all_reduce(view_of(in, dt), view_of(out, dt), op, deadline(), algo);
      EXPECT_SAME(out, want, dt, "all_reduce ", to_string(algo), " ", dt, " ", op, " n=", n);
      EXPECT_SAME(in, in_copy, dt, "all_reduce modified its input ", dt, " n=", n);
    }
  });
}

void sweep_reduce_scatter(Communicator& c) {
  const int P = c.size(), r = c.rank();
  for_each_reduction(P, [&](DataType dt, ReduceOp op, size_t n, bool in_place) {
    auto in = make_data(dt, n * P, r, op);
    const auto want = reference_reduce(dt, op, P, n, n * r);
    if (in_place) {
      c.reduce_scatter(view_of(in, dt), view_of(in, dt, n * r, n), op, deadline());
      std::vector<uint8_t> got(in.begin() + n * r * element_size(dt),
                               in.begin() + n * (r + 1) * element_size(dt));
      EXPECT_SAME(got, want, dt, "reduce_scatter ", dt, " ", op, " n=", n, " in place");
    } else {
      std::vector<uint8_t> out(n * element_size(dt), 0xab);
      c.reduce_scatter(view_of(in, dt), view_of(out, dt), op, deadline());
      EXPECT_SAME(out, want, dt, "reduce_scatter ", dt, " ", op, " n=", n);
    }
  });
}

// What all_gather yields when every rank p contributes make_data(dt, n, p).
std::vector<uint8_t> reference_gather(DataType dt, size_t n, int P) {
  std::vector<uint8_t> want;
  for (int p = 0; p < P; ++p) {
    auto part = make_data(dt, n, p, ReduceOp::kSum);
    want.insert(want.end(), part.begin(), part.end());
  }
  return want;
}

void sweep_all_gather_and_broadcast(Communicator& c) {
  const int P = c.size(), r = c.rank();
  for (DataType dt : kAllDtypes) {
    const size_t es = element_size(dt);
    for (size_t n : counts_for(P)) {
      const std::vector<uint8_t> want = reference_gather(dt, n, P);
      auto in = make_data(dt, n, r, ReduceOp::kSum);
      std::vector<uint8_t> out(n * P * es, 0xab);
      c.all_gather(view_of(in, dt), view_of(out, dt), deadline());
      EXPECT_SAME(out, want, dt, "all_gather ", dt, " n=", n);
      std::vector<uint8_t> inplace(n * P * es, 0xab);
      if (!in.empty()) std::memcpy(inplace.data() + n * r * es, in.data(), in.size());
      c.all_gather(view_of(inplace, dt, n * r, n), view_of(inplace, dt), deadline());
      EXPECT_SAME(inplace, want, dt, "all_gather ", dt, " n=", n, " in place");

      for (int root : {0, P - 1, P / 2}) {
        auto t = make_data(dt, n, r == root ? 1000 + root : r, ReduceOp::kSum);
        c.broadcast(view_of(t, dt), root, deadline());
        EXPECT_SAME(t, make_data(dt, n, 1000 + root, ReduceOp::kSum), dt, "broadcast ", dt,
                    " n=", n, " root ", root);
      }
    }
  }
  c.barrier(deadline());
}

}  // namespace

TEST_CASE("all_reduce matches the reference for every dtype, op, size and count", "[sweep]") {
  const int P = GENERATE(1, 2, 3, 4, 5, 8);
  const auto algo = GENERATE(AllReduceAlgorithm::kRing, AllReduceAlgorithm::kSmall,
                             AllReduceAlgorithm::kShm, AllReduceAlgorithm::kAuto);
  INFO("world size " << P << ", " << to_string(algo));
  auto errors = run_ranks(P, sweep_options(), [&](Communicator& c) {
    if (algo == AllReduceAlgorithm::kShm && P > 1 &&
        !dynamic_cast<CpuCommunicator&>(c).shm_algorithms()) {
      // TCP forced (the [tcp] run): kShm is refused, by name.
      std::vector<float> x(8, 1.0f);
      try {
        c.all_reduce({x.data(), 8, DataType::kFloat32}, {x.data(), 8, DataType::kFloat32},
                     ReduceOp::kSum, deadline(), algo);
      } catch (const InvalidArgument& e) {
        if (std::string(e.what()).find("the shm algorithm needs") != std::string::npos) return;
        throw;
      }
      throw std::runtime_error("kShm ran without the shm algorithms");
    }
    sweep_all_reduce(c, algo);
  });
  REQUIRE(join_errors(errors) == "");
}

TEST_CASE("reduce_scatter matches the reference for every dtype, op, size and count", "[sweep]") {
  const int P = GENERATE(1, 2, 3, 4, 5, 8);
  INFO("world size " << P);
  auto errors = run_ranks(P, sweep_options(), [&](Communicator& c) { sweep_reduce_scatter(c); });
  REQUIRE(join_errors(errors) == "");
}

TEST_CASE("all_gather and broadcast deliver every rank's data for every dtype, size and count",
          "[sweep]") {
  const int P = GENERATE(1, 2, 3, 4, 5, 8);
  INFO("world size " << P);
  auto errors =
      run_ranks(P, sweep_options(), [&](Communicator& c) { sweep_all_gather_and_broadcast(c); });
  REQUIRE(join_errors(errors) == "");
}

TEST_CASE("default options: multi-megabyte all_reduce, broadcast and all_gather", "[sweep]") {
  const int P = GENERATE(2, 3, 4);
  CommunicatorOptions o;
  o.store_prefix = "big";
  auto errors = run_ranks(P, o, [&](Communicator& c) {
    const size_t n = (size_t{3} << 20) / 4 + 7;  // ~3 MiB of float32, odd
    for (DataType dt : {DataType::kFloat32, DataType::kBFloat16}) {
      auto buf = make_data(dt, n, c.rank(), ReduceOp::kSum);
      c.all_reduce(view_of(buf, dt), view_of(buf, dt), ReduceOp::kSum, deadline());
      EXPECT_SAME(buf, reference_reduce(dt, ReduceOp::kSum, P, n), dt, "big all_reduce ", dt);
    }
    auto t = make_data(DataType::kInt64, n / 2, c.rank() == 1 ? 77 : c.rank(), ReduceOp::kSum);
    c.broadcast(view_of(t, DataType::kInt64), 1, deadline());
    EXPECT_SAME(t, make_data(DataType::kInt64, n / 2, 77, ReduceOp::kSum), DataType::kInt64,
                "big broadcast");
    // ~1.5 MiB from every rank.
    const DataType dt = DataType::kFloat32;
    auto part = make_data(dt, n / 2, c.rank(), ReduceOp::kSum);
    const auto want = reference_gather(dt, n / 2, P);
    std::vector<uint8_t> gathered(want.size(), 0xab);
    c.all_gather(view_of(part, dt), view_of(gathered, dt), deadline());
    EXPECT_SAME(gathered, want, dt, "big all_gather");
  });
  REQUIRE(join_errors(errors) == "");
}

TEST_CASE("the ring through a tiny odd-sized shared-memory ring: elements split at wraps",
          "[sweep]") {
  // 4099 bytes (4096 used: whole cache lines): 1040-byte frames fill the
  // ring and are cut where a record ends, so received segments arrive in
  // pieces that split elements and sit off their alignment; reducing them
  // where they lie must still give the reference.
  ScopedEnv ring_bytes("COLLIE_SHM_BYTES", "4099");
  const int P = GENERATE(2, 3);
  INFO("world size " << P);
  CommunicatorOptions o = sweep_options();
  o.segment_bytes = 1000;
  auto errors = run_ranks(P, o, [&](Communicator& c) {
    if (resolve_transport(CommunicatorOptions::from_env().transport) != TransportChoice::kTcp &&
        !dynamic_cast<CpuCommunicator&>(c).shm_algorithms()) {
      throw std::runtime_error("expected shared-memory channels");
    }
    sweep_all_reduce(c, AllReduceAlgorithm::kRing);
  });
  REQUIRE(join_errors(errors) == "");
}
