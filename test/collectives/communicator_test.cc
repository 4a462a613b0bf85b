// Communicator behaviour that needs no second process: argument checks, the
// broken state, abort() from another thread, deadlines, world size 1, and the
// wire header. Ranks are threads over a HashStore.
#include <catch2/catch.hpp>

#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <bit>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>

#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/collectives/cpu_communicator.h"
#include "collie/collectives/reduce_kernels.h"
#include "collie/collectives/transport/join.h"
#include "collie/collectives/transport/wire.h"
#include "collie/rendezvous/hash_store.h"
#include "collie/test/collectives/harness.h"
#include "collie/test/support/skip.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

// Connects `size` communicators on threads and returns them.
std::vector<std::unique_ptr<Communicator>> connect_all(HashStore& store, int size,
                                                       const std::string& prefix) {
  std::vector<std::unique_ptr<Communicator>> comms(size);
  std::vector<std::thread> threads;
  CommunicatorOptions o;
  o.store_prefix = prefix;
  o.timeout = 30s;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      comms[r] = Communicator::connect(store, r, size, CommunicatorOptions::from_env(o));
    });
  }
  for (auto& t : threads) t.join();
  return comms;
}

struct Failure {
  std::string type, message;
};

// Runs barriers (at most two) until one fails; what failed and how.
Failure first_failure(Communicator& c) {
  for (int i = 0; i < 2; ++i) {
    try {
      c.barrier(Deadline(30s));
    } catch (const TimeoutError& e) {
      return {"TimeoutError", e.what()};
    } catch (const NetworkError& e) {
      return {"NetworkError", e.what()};
    } catch (const BackendError& e) {
      return {"BackendError", e.what()};
    }
  }
  return {"none", ""};
}

}  // namespace

TEST_CASE("bad arguments throw InvalidArgument and leave the communicator usable") {
  HashStore store;
  auto comms = connect_all(store, 2, "args");
  Communicator& c = *comms[0];
  const Deadline d(30s);
  std::vector<int32_t> ints(8);
  std::vector<float> floats(8), small(3);
  CHECK_THROWS_AS(c.all_reduce(view(ints.data(), 8), view(ints.data(), 8), ReduceOp::kAvg, d),
                  InvalidArgument);
  CHECK_THROWS_WITH(c.all_reduce(view(ints.data(), 8), view(ints.data(), 8), ReduceOp::kAvg, d),
                    Contains("ReduceOp avg is not defined for int32"));
  TensorView gpu = view(floats.data(), 8);
  gpu.device = Device::cuda(0);
  CHECK_THROWS_WITH(c.broadcast(gpu, 0, d), Contains("cuda:0") && Contains("CPU buffers only"));
  CHECK_THROWS_AS(c.all_reduce(view(floats.data(), 8), view(small.data(), 3), ReduceOp::kSum, d),
                  InvalidArgument);
  CHECK_THROWS_WITH(c.broadcast(view(floats.data(), 8), 2, d), Contains("root 2"));
  CHECK_THROWS_WITH(c.all_gather(view(floats.data(), 4), view(floats.data(), 7), d),
                    Contains("size x in"));
  CHECK_THROWS_WITH(
      c.reduce_scatter(view(floats.data(), 8), view(floats.data() + 1, 4), ReduceOp::kSum, d),
      Contains("overlaps"));
  CHECK_THROWS_WITH(
      c.all_reduce(view(floats.data(), 4), view(floats.data() + 2, 4), ReduceOp::kSum, d),
      Contains("overlap"));
  // A bad element of a list is named by its index.
  std::vector<TensorView> parts{view(floats.data(), 4), view(ints.data(), 4)};
  std::vector<TensorView> outs{view(floats.data() + 4, 4), view(small.data(), 3)};
  CHECK_THROWS_WITH(c.all_to_all(parts, outs, d),
                    Contains("in[1] is int32") && Contains("the call's dtype is float32"));
  parts[1] = view(floats.data(), 4);
  parts[1].data = nullptr;
  CHECK_THROWS_WITH(c.all_to_all(parts, outs, d),
                    Contains("in[1] has 4 elements but a null data pointer"));
  CHECK_THROWS_WITH(c.all_gather(view(floats.data(), 4), outs, d),
                    Contains("out[1] has 3 elements, expected 4"));
  CHECK_FALSE(c.broken());
  // Still works: both ranks run one all_reduce.
  auto other = std::async(std::launch::async, [&] {
    std::vector<float> v(8, 2.0f);
    comms[1]->all_reduce(view(v.data(), 8), view(v.data(), 8), ReduceOp::kSum, d);
    return v[7];
  });
  std::fill(floats.begin(), floats.end(), 1.0f);
  c.all_reduce(view(floats.data(), 8), view(floats.data(), 8), ReduceOp::kSum, d);
  CHECK(floats[0] == 3.0f);
  CHECK(other.get() == 3.0f);
}

TEST_CASE("world size 1 copies locally and opens no socket") {
  HashStore store;
  auto c = Communicator::connect(store, 0, 1, CommunicatorOptions::from_env({}));
  CHECK(c->address().empty());
  std::vector<double> in{1, 2, 3}, out(3);
  c->all_reduce(view(in.data(), 3), view(out.data(), 3), ReduceOp::kAvg, Deadline(1s));
  CHECK(out == in);
  std::vector<double> gathered(3);
  c->all_gather(view(in.data(), 3), view(gathered.data(), 3), Deadline(1s));
  CHECK(gathered == in);
  c->barrier(Deadline(1s));
  CHECK(store.num_keys() == 0);
}

TEST_CASE("a peer that never comes trips the deadline naming the call and the peer") {
  HashStore store;
  auto comms = connect_all(store, 2, "deadline");
  const auto start = Clock::now();
  try {
    comms[0]->barrier(Deadline(300ms));
    FAIL("no timeout");
  } catch (const TimeoutError& e) {
    CHECK_THAT(e.what(), Contains("barrier() as op #1 on rank 0 timed out") &&
                             Contains("limit 300.0ms") &&
                             Contains("receive from rank 1 (127.0.0.1:"));
  }
  CHECK(Clock::now() - start < 2s);
  CHECK(comms[0]->broken());
  // Broken: refused at once, naming the original error.
  std::vector<float> v(4);
  try {
    comms[0]->all_reduce(view(v.data(), 4), view(v.data(), 4), ReduceOp::kSum, Deadline(30s));
    FAIL("a broken communicator ran a collective");
  } catch (const BackendError& e) {
    CHECK_THAT(e.what(), Contains("broken") && Contains("timed out"));
  }
  // Rank 0 had sent its barrier message before it gave up, so rank 1's
  // barrier may complete; its next call at the latest learns of the failure
  // from rank 0's abort frame, with rank 0's reason.
  const auto failure = first_failure(*comms[1]);
  CHECK(failure.type == "TimeoutError");
  CHECK_THAT(failure.message, Contains("rank 0 (127.0.0.1:") && Contains("timed out"));
}

TEST_CASE("a rank outside the call: the timeout probe makes every other rank name it") {
  // Ranks 0 and 1 run an all_reduce that rank 2 never joins. Rank 1 waits
  // on rank 0 in the ring, not on rank 2, yet both must name rank 2: each
  // probes at its deadline, hears the other, and not rank 2.
  HashStore store;
  auto comms = connect_all(store, 3, "probe");
  auto run = [&](int r) {
    std::vector<float> v(3000, 1.0f);
    const auto start = Clock::now();
    try {
      comms[r]->all_reduce(view(v.data(), v.size()), view(v.data(), v.size()), ReduceOp::kSum,
                           Deadline(400ms));
    } catch (const TimeoutError& e) {
      return std::pair{std::string(e.what()), Clock::now() - start};
    }
    return std::pair{std::string("no timeout"), Clock::now() - start};
  };
  auto one = std::async(std::launch::async, run, 1);
  const auto [zero_what, zero_took] = run(0);
  const auto [one_what, one_took] = one.get();
  for (const auto& [what, took] :
       {std::pair{zero_what, zero_took}, std::pair{one_what, one_took}}) {
    INFO(what);
    CHECK_THAT(what, Contains("all_reduce(float32, 3000, sum") && Contains("as op #1") &&
                         Contains("ranks 0,1 answered a timeout probe, rank 2 (127.0.0.1:") &&
                         Contains("did not within 200.0ms"));
    CHECK(took < 5s);  // the 400 ms deadline, then at most the 200 ms grace (generous bound)
  }
  CHECK(comms[0]->broken());
  CHECK(comms[1]->broken());
}

TEST_CASE("abort() from another thread ends a blocked call promptly; the peer's error names it") {
  HashStore store;
  auto comms = connect_all(store, 2, "abort");
  std::atomic<bool> entered{false};
  auto blocked = std::async(std::launch::async, [&] {
    entered = true;
    comms[0]->barrier(Deadline(60s));  // rank 1 never joins
  });
  while (!entered) std::this_thread::yield();
  const auto start = Clock::now();
  comms[0]->abort();
  CHECK_THROWS_AS(blocked.get(), BackendError);
  CHECK(Clock::now() - start < 2s);
  CHECK(comms[0]->broken());
  std::vector<float> v(4);
  CHECK_THROWS_WITH(
      comms[0]->all_reduce(view(v.data(), 4), view(v.data(), 4), ReduceOp::kSum, Deadline(1s)),
      Contains("broken"));
  // The peer learns it from the abort frame of rank 0's failing call when
  // that got out before rank 0's own shutdown was seen (shared memory still
  // takes it: BackendError with the reason), else from the hang-up
  // (NetworkError). Either names rank 0.
  const auto failure = first_failure(*comms[1]);
  INFO(failure.type << ": " << failure.message);
  CHECK((failure.type == "NetworkError" ||
         (failure.type == "BackendError" &&
          failure.message.find("abort() called") != std::string::npos)));
  CHECK_THAT(failure.message, Contains("rank 0 (127.0.0.1:"));
}

TEST_CASE("a rank that leaves in order does not break a peer still finishing its call") {
  HashStore store;
  auto comms = connect_all(store, 3, "goodbye");
  auto run = [&](int r) {
    std::vector<float> v(100000, 1.0f);
    for (int i = 0; i < 3; ++i)
      comms[r]->all_reduce(view(v.data(), v.size()), view(v.data(), v.size()), ReduceOp::kSum,
                           Deadline(60s));
    comms[r].reset();  // says goodbye while the others may still be running
    return v[0];
  };
  auto a = std::async(std::launch::async, run, 0), b = std::async(std::launch::async, run, 1),
       c = std::async(std::launch::async, run, 2);
  CHECK(a.get() == 27.0f);
  CHECK(b.get() == 27.0f);
  CHECK(c.get() == 27.0f);
}

TEST_CASE("the wire header is 40 bytes, names the call and matches only the same call") {
  CallInfo call{CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 0, 1024, 17};
  call.algorithm = static_cast<uint8_t>(AllReduceAlgorithm::kRing);
  CHECK(call.describe_with_seq() == "all_reduce(float32, 1024, sum, ring) as op #17");
  CHECK(CallInfo{CollectiveKind::kBroadcast, DataType::kFloat32, ReduceOp::kSum, 3, 1000, 2}
            .describe() == "broadcast(float32, 1000, root 3)");
  const uint32_t group = group_hash("default_pg");
  CHECK(group != group_hash("group_1"));
  WireHeader h = WireHeader::data(group, call, 4096);
  CHECK(sizeof h == 40);
  CHECK(h.matches(group, call));
  CHECK(h.call() == call);
  CHECK_FALSE(h.matches(group_hash("other"), call));
  CallInfo other = call;
  other.count = 1023;
  CHECK_FALSE(h.matches(group, other));
  other = call;
  other.seq = 18;
  CHECK_FALSE(h.matches(group, other));
}

TEST_CASE("two communicators over the same ranks run concurrently without cross-talk") {
  HashStore store;
  auto group_a = connect_all(store, 3, "concurrent_a");
  auto group_b = connect_all(store, 3, "concurrent_b");
  std::vector<std::future<std::pair<float, double>>> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.push_back(std::async(std::launch::async, [&, r] {
      auto a = std::async(std::launch::async, [&] {
        std::vector<float> v(50000);
        for (int i = 0; i < 20; ++i) {
          std::fill(v.begin(), v.end(), static_cast<float>(r + i));
          group_a[r]->all_reduce(view(v.data(), v.size()), view(v.data(), v.size()), ReduceOp::kSum,
                                 Deadline(60s));
        }
        return v.back();
      });
      std::vector<double> w(777);
      for (int i = 0; i < 50; ++i) {
        std::fill(w.begin(), w.end(), 1.0 + r);
        group_b[r]->all_reduce(view(w.data(), w.size()), view(w.data(), w.size()), ReduceOp::kMax,
                               Deadline(60s));
      }
      return std::make_pair(a.get(), w.front());
    }));
  }
  for (auto& f : ranks) {
    auto [a, b] = f.get();
    CHECK(a == 0.0f + 1 + 2 + 3 * 19);  // sum over ranks of (r + 19)
    CHECK(b == 3.0);
  }
}

namespace {
std::mutex g_lines_mu;
std::vector<std::string> g_lines;
void keep_line(LogLevel level, std::string_view line) {
  if (level != LogLevel::kWarn) return;
  std::lock_guard<std::mutex> lock(g_lines_mu);
  g_lines.emplace_back(line);
}
}  // namespace

TEST_CASE("a call waiting on a silent peer says so at report_after, then as the wait doubles") {
  HashStore store;
  CommunicatorOptions o;
  o.store_prefix = "slow";
  o.timeout = 30s;
  o.report_after = 100ms;
  std::vector<std::unique_ptr<Communicator>> comms(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      comms[r] = Communicator::connect(store, r, 2, CommunicatorOptions::from_env(o));
    });
  }
  for (auto& t : threads) t.join();
  set_log_tap(keep_line);
  // Rank 1 never calls: rank 0 waits 700 ms, reporting at ~100, ~200, ~400 ms.
  CHECK_THROWS_AS(comms[0]->barrier(Deadline(700ms)), TimeoutError);
  set_log_tap(nullptr);
  std::vector<std::string> lines;
  {
    std::lock_guard<std::mutex> lock(g_lines_mu);
    for (auto& l : g_lines) {
      if (l.find("still waiting") != std::string::npos) lines.push_back(l);
    }
  }
  REQUIRE(lines.size() >= 2);
  CHECK(lines.size() <= 4);  // doubling, not every poll
  CHECK_THAT(lines[0], Contains("barrier() as op #1 on rank 0: still waiting to receive from "
                                "rank 1 (127.0.0.1:") &&
                           Contains(" after ") && Contains("limit 700.0ms"));
}

namespace {

// Peers each rank has a data connection to (channel_kinds without connecting).
std::vector<int> connected_counts(std::vector<std::unique_ptr<Communicator>>& comms) {
  std::vector<int> counts;
  for (auto& c : comms) {
    int n = 0;
    for (const auto& kind : c->channel_kinds(Deadline(30s), false)) n += !kind.empty();
    counts.push_back(n);
  }
  return counts;
}

std::vector<std::unique_ptr<Communicator>> connect_tcp(HashStore& store, int size,
                                                       const std::string& prefix, bool connect_all,
                                                       const std::string& bind_host = "") {
  std::vector<std::unique_ptr<Communicator>> comms(size);
  std::vector<std::thread> threads;
  CommunicatorOptions o;
  o.store_prefix = prefix;
  o.transport = "tcp";
  o.connect_all = connect_all;
  o.bind_host = bind_host;
  o.timeout = 60s;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      comms[r] = Communicator::connect(store, r, size, CommunicatorOptions::from_env(o));
    });
  }
  for (auto& t : threads) t.join();
  return comms;
}

}  // namespace

TEST_CASE("data connections are lazy: the ring neighbours at init and after a ring all_reduce") {
  HashStore store;
  const int size = 8;
  auto comms = connect_tcp(store, size, "lazy", false);
  CHECK(connected_counts(comms) == std::vector<int>(size, 2));
  // A 1 MiB all_reduce runs the ring: still only the neighbours.
  std::vector<std::thread> threads;
  std::vector<std::vector<float>> data(size, std::vector<float>(1 << 18, 1.0f));
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      comms[r]->all_reduce(view(data[r].data(), data[r].size()),
                           view(data[r].data(), data[r].size()), ReduceOp::kSum, Deadline(60s));
    });
  }
  for (auto& t : threads) t.join();
  for (auto& d : data) CHECK(d.front() == float(size));
  CHECK(connected_counts(comms) == std::vector<int>(size, 2));
}

TEST_CASE("the full mesh at init, with connect_all") {
  HashStore store;
  const int size = 5;
  auto mesh = connect_tcp(store, size, "mesh", true);
  CHECK(connected_counts(mesh) == std::vector<int>(size, size - 1));
}

namespace {

// Every rank all_reduces (a ring: 100000 int32) and then runs a barrier;
// each one checks the sum.
void reduce_and_check(std::vector<std::unique_ptr<Communicator>>& comms) {
  const int size = static_cast<int>(comms.size());
  std::vector<std::thread> threads;
  std::vector<std::vector<int32_t>> data(size);
  for (int r = 0; r < size; ++r) {
    data[r].assign(100000, r + 1);
    threads.emplace_back([&, r] {
      comms[r]->all_reduce(view(data[r].data(), data[r].size()),
                           view(data[r].data(), data[r].size()), ReduceOp::kSum, Deadline(30s));
      comms[r]->barrier(Deadline(30s));
    });
  }
  for (auto& t : threads) t.join();
  const int32_t sum = size * (size + 1) / 2;
  for (auto& d : data) CHECK((d.front() == sum && d.back() == sum));
}

}  // namespace

TEST_CASE("IPv6: ranks listen on ::1, publish [::1]:port and reduce over it") {
  // CI machines have ::1 on lo; a kernel booted without IPv6 has not.
  const int probe = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (probe < 0) test::skip_test("no IPv6 on this machine (socket(AF_INET6) failed)");
  ::close(probe);
  HashStore store;
  auto comms = connect_tcp(store, 3, "ipv6", false, "::1");
  for (auto& c : comms) CHECK_THAT(c->address(), Catch::Matchers::StartsWith("[::1]:"));
  reduce_and_check(comms);
}

TEST_CASE("a host name to listen on: ranks resolve localhost, publish its address, reduce") {
  HashStore store;
  auto comms = connect_tcp(store, 3, "named", false, "localhost");
  for (auto& c : comms) {
    // The published address is the resolved one, so peers need no resolver.
    const std::string a = c->address();
    CHECK((a.rfind("127.0.0.1:", 0) == 0 || a.rfind("[::1]:", 0) == 0));
  }
  reduce_and_check(comms);
}

TEST_CASE("a host name that does not resolve: the error names the rank and the host") {
  HashStore store;
  CommunicatorOptions o;
  o.store_prefix = "unresolved";
  o.transport = "tcp";
  o.bind_host = "no-such-host.invalid";
  o.timeout = 5s;
  CHECK_THROWS_AS(Communicator::connect(store, 0, 2, CommunicatorOptions::from_env(o)),
                  InvalidArgument);
  CHECK_THROWS_WITH(Communicator::connect(store, 1, 2, CommunicatorOptions::from_env(o)),
                    Contains("rank 1") && Contains("no-such-host.invalid"));
}

TEST_CASE("auto all_reduce on one host: the ring at 2-4 ranks, shm from 5 ranks below 4 MiB") {
  const int P = GENERATE(2, 4, 5);
  INFO(P << " ranks");
  CommunicatorOptions o;
  o.store_prefix = "choice";
  o.timeout = 60s;
  // The plain run is "auto" (shared memory, threads of one process count as
  // one host); the [tcp] run has no shm algorithms, so never kShm.
  const bool want_shm =
      resolve_transport(CommunicatorOptions::from_env().transport) != TransportChoice::kTcp;
  auto errors = run_ranks(P, o, [&](Communicator& c) {
    auto& s = dynamic_cast<CpuCommunicator&>(c);
    if (s.shm_algorithms() != want_shm) throw std::runtime_error("shm algorithms not as expected");
    const Deadline d(60s);
    for (size_t bytes : {o.small_message_bytes, size_t{64} << 10, o.shm_ring_bytes}) {
      const size_t n = bytes / sizeof(float);
      std::vector<float> buf(n, static_cast<float>(c.rank() + 1));
      c.all_reduce({buf.data(), n, DataType::kFloat32}, {buf.data(), n, DataType::kFloat32},
                   ReduceOp::kSum, d);
      const float sum = static_cast<float>(P * (P + 1) / 2);
      for (size_t i = 0; i < n; ++i) {
        if (buf[i] != sum) {
          throw std::runtime_error(str_cat(bytes, " bytes: element ", i, " is ", buf[i]));
        }
      }
      const AllReduceAlgorithm want =
          bytes <= o.small_message_bytes ? AllReduceAlgorithm::kSmall
          : want_shm && P >= o.shm_all_reduce_ranks && bytes < o.shm_ring_bytes
              ? AllReduceAlgorithm::kShm
              : AllReduceAlgorithm::kRing;
      if (s.last_all_reduce_algorithm() != want) {
        throw std::runtime_error(str_cat(bytes, " bytes ran ",
                                         to_string(s.last_all_reduce_algorithm()), ", expected ",
                                         to_string(want)));
      }
    }
  });
  REQUIRE(join_errors(errors) == "");
}

TEST_CASE("the small all_reduce reduces in rank order: every rank agrees bit for bit") {
  // max and min keep their first operand on a tie (+0 vs -0) and on NaN,
  // so a rank that reduced its peers' inputs in another order would end
  // with other bits than its peers; in place and into another buffer. (A
  // two-rank variant that reduced the peer's input on arrival, saving the
  // staging copies, failed this when it put the operands the other way
  // round on rank 1; it measured no faster and was dropped.)
  const int P = GENERATE(2, 3);
  const ReduceOp op = GENERATE(ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kSum);
  const bool in_place = GENERATE(true, false);
  INFO(P << " ranks, " << to_string(op) << (in_place ? ", in place" : ", out of place"));
  constexpr size_t n = 5;
  auto input = [](int r) {
    const float nan = std::bit_cast<float>(0x7fc00001u + static_cast<uint32_t>(r));
    return std::vector<float>{r == 0 ? 0.0f : -0.0f, r == 0 ? nan : 1.0f + r, r == 1 ? nan : 2.0f,
                              nan, r == 0 ? -0.0f : 0.0f};
  };
  std::vector<float> want = input(0);
  for (int r = 1; r < P; ++r) {
    const std::vector<float> next = input(r);
    reduce(want.data(), want.data(), next.data(), n, DataType::kFloat32, op);
  }
  std::vector<std::vector<float>> got(P);
  CommunicatorOptions o;
  o.store_prefix = "rank-order";
  o.timeout = 60s;
  auto errors = run_ranks(P, o, [&](Communicator& c) {
    std::vector<float> in = input(c.rank()), out(n);
    float* dst = in_place ? in.data() : out.data();
    c.all_reduce({in.data(), n, DataType::kFloat32}, {dst, n, DataType::kFloat32}, op,
                 Deadline(60s), AllReduceAlgorithm::kSmall);
    got[c.rank()].assign(dst, dst + n);
  });
  REQUIRE(join_errors(errors) == "");
  for (int r = 0; r < P; ++r) {
    INFO("rank " << r);
    CHECK(std::memcmp(got[r].data(), want.data(), n * sizeof(float)) == 0);
  }
}

TEST_CASE("two ranks exchange straight through shared memory, and hand over to the posted path") {
  // Transport::exchange, the small all_reduce at two ranks: the frame goes
  // into the ring and the peer's is taken where it lands. Every way out of
  // that path is taken here and must end exactly as the posted path would.
  CommunicatorOptions o;
  o.store_prefix = "express";
  o.transport = "auto";  // threads of one process: one host, shared memory
  o.timeout = 60s;
  auto counts = [](Communicator& c) { return dynamic_cast<CpuCommunicator&>(c).express_counts(); };
  auto sum_of_ranks = [](size_t n, int call, int rank) {
    std::vector<float> v(n);
    for (size_t k = 0; k < n; ++k) v[k] = static_cast<float>(rank * 1000 + call * 3 + k);
    return v;
  };
  auto all_reduce = [](Communicator& c, std::vector<float>& v) {
    const TensorView t{v.data(), v.size(), DataType::kFloat32, Device::cpu()};
    c.all_reduce(t, t, ReduceOp::kSum, Deadline(60s), AllReduceAlgorithm::kSmall);
  };
  // Waits (bounded) until the rank published in `peer` has handed its
  // express receive over to the posted path: its spin is over, so a frame
  // sent now cannot have been found there.
  auto wait_until_handed = [&](const std::atomic<Communicator*>& peer) {
    const auto until = Clock::now() + 30s;
    while (peer.load() == nullptr || counts(*peer.load()).handed == 0) {
      REQUIRE(Clock::now() < until);
      std::this_thread::yield();
    }
  };
  auto check_sum = [&](const std::vector<float>& v, int call) {
    const auto a = sum_of_ranks(v.size(), call, 0), b = sum_of_ranks(v.size(), call, 1);
    for (size_t k = 0; k < v.size(); ++k) REQUIRE(v[k] == a[k] + b[k]);
  };

  SECTION("every size up to kExpressBytes tries it; above it, and over TCP, none does") {
    const int P = 2;
    auto errors = run_ranks(P, o, [&](Communicator& c) {
      int call = 0;
      for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{16}, size_t{64}, size_t{255},
                       Transport::kExpressBytes / sizeof(float)}) {
        for (int i = 0; i < 25; ++i, ++call) {
          auto v = sum_of_ranks(n, call, c.rank());
          all_reduce(c, v);
          check_sum(v, call);
        }
      }
      const auto e = counts(c);
      CHECK(e.tried == static_cast<uint64_t>(call));
      CHECK(e.tried == e.taken + e.handed);
      auto v = sum_of_ranks(Transport::kExpressBytes / sizeof(float) + 1, call, c.rank());
      all_reduce(c, v);
      check_sum(v, call);
      CHECK(counts(c).tried == e.tried);
    });
    REQUIRE(join_errors(errors) == "");
    CommunicatorOptions tcp = o;
    tcp.transport = "tcp";
    errors = run_ranks(P, tcp, [&](Communicator& c) {
      auto v = sum_of_ranks(4, 0, c.rank());
      all_reduce(c, v);
      check_sum(v, 0);
      CHECK(counts(c).tried == 0);
    });
    REQUIRE(join_errors(errors) == "");
  }

  SECTION("broadcast, scatter, gather and reduce: the receiver takes the one message express") {
    // Transport::send_one / recv_one: each call is one message, root to
    // peer or peer to root. Both roots, sizes up to kExpressBytes and one
    // above; the receiver counts a try per call up to kExpressBytes.
    auto errors = run_ranks(2, o, [&](Communicator& c) {
      const int me = c.rank();
      uint64_t received = 0;  // calls up to kExpressBytes in which this rank received
      int call = 0;
      for (size_t n : {size_t{1}, size_t{5}, size_t{64}, Transport::kExpressBytes / sizeof(float),
                       Transport::kExpressBytes / sizeof(float) + 1}) {
        const bool express = n * sizeof(float) <= Transport::kExpressBytes;
        for (int root = 0; root < 2; ++root, ++call) {
          INFO("n " << n << " root " << root);
          const auto mine = sum_of_ranks(n, call, me), other = sum_of_ranks(n, call, 1 - me);
          const auto root_in = sum_of_ranks(n, call, root);
          auto view = [](std::vector<float>& v) {
            return TensorView{v.data(), v.size(), DataType::kFloat32, Device::cpu()};
          };
          // broadcast: the root's buffer everywhere.
          auto b = mine;
          c.broadcast(view(b), root, Deadline(60s));
          CHECK(b == root_in);
          // scatter: part p of the root's two goes to rank p.
          std::vector<std::vector<float>> parts;
          for (int p = 0; p < 2; ++p) parts.push_back(sum_of_ranks(n, call + 100 * p, root));
          std::vector<TensorView> part_views;
          if (me == root)
            for (auto& part : parts) part_views.push_back(view(part));
          std::vector<float> got(n, -1.0f);
          c.scatter(part_views, view(got), root, Deadline(60s));
          CHECK(got == sum_of_ranks(n, call + 100 * me, root));
          // gather: rank p's buffer in the root's slot p.
          std::vector<std::vector<float>> slots(2, std::vector<float>(n, -1.0f));
          std::vector<TensorView> slot_views;
          if (me == root)
            for (auto& slot : slots) slot_views.push_back(view(slot));
          auto g = mine;
          c.gather(view(g), slot_views, root, Deadline(60s));
          if (me == root) {
            CHECK(slots[me] == mine);
            CHECK(slots[1 - me] == other);
          }
          // reduce: the sum at the root.
          auto in = mine;
          std::vector<float> sum(n, -1.0f);
          c.reduce(view(in), view(sum), ReduceOp::kSum, root, Deadline(60s));
          if (me == root)
            for (size_t k = 0; k < n; ++k) REQUIRE(sum[k] == mine[k] + other[k]);
          // This rank received in broadcast and scatter when not the root,
          // in gather and reduce when the root.
          if (express) received += 2;
        }
      }
      const auto e = counts(c);
      CHECK(e.tried == received);
      CHECK(e.tried == e.taken + e.handed);
    });
    REQUIRE(join_errors(errors) == "");
  }

  SECTION("a late root: the receiver's spin ends and the posted path finishes the broadcast") {
    std::atomic<Communicator*> receiver{nullptr};
    auto errors = run_ranks(2, o, [&](Communicator& c) {
      auto v = sum_of_ranks(16, 0, c.rank());
      const TensorView t{v.data(), v.size(), DataType::kFloat32, Device::cpu()};
      if (c.rank() == 1) {
        receiver.store(&c);
        c.broadcast(t, 0, Deadline(60s));
        const auto e = counts(c);
        CHECK(e.tried == 1);
        CHECK(e.handed == 1);
      } else {
        wait_until_handed(receiver);
        c.broadcast(t, 0, Deadline(60s));
      }
      CHECK(v == sum_of_ranks(16, 0, 0));
    });
    REQUIRE(join_errors(errors) == "");
  }

  SECTION("a peer that comes late: the spin ends and the posted path finishes the call") {
    // Rank 1 starts its call only once rank 0 has handed over, so rank 0's
    // spin cannot have found its frame (no timing involved).
    std::atomic<Communicator*> rank0{nullptr};
    auto errors = run_ranks(2, o, [&](Communicator& c) {
      auto v = sum_of_ranks(16, 0, c.rank());
      if (c.rank() == 0) {
        rank0.store(&c);
        all_reduce(c, v);
        const auto e = counts(c);
        CHECK(e.tried == 1);
        CHECK(e.handed == 1);
      } else {
        wait_until_handed(rank0);
        all_reduce(c, v);
      }
      check_sum(v, 0);
    });
    REQUIRE(join_errors(errors) == "");
  }

  SECTION("a point-to-point message ahead of the collective's frame goes to the inbox") {
    auto errors = run_ranks(2, o, [&](Communicator& c) {
      std::vector<float> m(3, 0.0f);
      const TensorView mv{m.data(), m.size(), DataType::kFloat32, Device::cpu()};
      if (c.rank() == 1) {
        m = {7.0f, 8.0f, 9.0f};
        const P2POp op{P2POpType::kIsend, mv, 0, 5};
        c.send_recv(std::span<const P2POp>(&op, 1), Deadline(60s));
      }
      auto v = sum_of_ranks(4, 0, c.rank());
      all_reduce(c, v);
      check_sum(v, 0);
      if (c.rank() == 0) {
        const P2POp op{P2POpType::kIrecv, mv, 1, 5};
        c.send_recv(std::span<const P2POp>(&op, 1), Deadline(60s));
        CHECK(m == std::vector<float>{7.0f, 8.0f, 9.0f});
        CHECK(counts(c).handed == 1);  // it met the p2p frame first
      }
    });
    REQUIRE(join_errors(errors) == "");
  }
}

// Two ranks that have a core each and start on the same CPU (as ranks
// forked by one launcher, or woken by one store thread, do) leave
// Communicator::connect on CPUs of their own: otherwise they spin on one
// core until the load balancer moves one, and a 2-rank job's first
// thousands of small calls took ~19 us each instead of 0.3-0.5 us (7 of 20
// jobs, docs/performance.md "Start-up").
TEST_CASE("ranks with a core each leave connect on CPUs of their own") {
  cpu_set_t all;
  REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
  if (CPU_COUNT(&all) < 2) {
    SUCCEED("one CPU: nothing to place");
    return;
  }
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  HashStore store(30s);
  std::array<std::atomic<int>, 2> cpu{-1, -1};
  std::array<std::atomic<bool>, 2> unbound{false, false};
  std::array<std::string, 2> errors;
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        // Both start on the same CPU, with every CPU allowed.
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(first, &one);
        sched_setaffinity(0, sizeof one, &one);
        sched_setaffinity(0, sizeof all, &all);
        auto comm = Communicator::connect(store, r, 2,
                                          CommunicatorOptions::from_env({.store_prefix = "place"}));
        cpu[r] = sched_getcpu();
        cpu_set_t after;
        sched_getaffinity(0, sizeof after, &after);
        unbound[r] = CPU_EQUAL(&after, &all);
        comm->barrier(Deadline(30s));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  INFO(errors[0] << errors[1]);
  REQUIRE(errors[0].empty());
  REQUIRE(errors[1].empty());
  CHECK(cpu[0] != cpu[1]);
  // A placement, not a binding: each rank's mask is what it was.
  CHECK(unbound[0]);
  CHECK(unbound[1]);
}
