// The hierarchical collectives (collectives/hierarchical.cc) on "hosts"
// faked with CommunicatorOptions::host_id: the ranks are threads of this
// process; ranks with the same host id talk over shared memory, the others
// over TCP on loopback, as between real hosts. The netns case at the end
// runs them between real "hosts": processes in network namespaces on one
// bridge (test/support/netns_lan.h). Every case checks that the hierarchical path really ran
// (CpuCommunicator::hierarchical_calls()), so none can pass on the flat
// algorithms, and every output against the sweep's reference (small
// integers: any order of reduction is exact, so the hierarchical and the
// flat result must be bitwise equal).
#include <catch2/catch.hpp>

#include <csignal>
#include <cstdio>
#include <cstring>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/collectives/cpu_communicator.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/test/collectives/harness.h"
#include "collie/test/support/child.h"
#include "collie/test/support/netns_lan.h"
#include "collie/test/support/netns_pair.h"
#include "collie/test/support/subprocess.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

const Deadline& deadline() {
  static const Deadline d(std::chrono::minutes(5));
  return d;
}

// Rank r on host host_of[r]; small segments and small crossovers, as in the
// sweep, so that the direct exchanges, the two-step exchange, the
// multi-segment rings and the shared-memory reads all run (all_reduce
// across hosts: one rank per host, in one hop up to 16 bytes and in two
// steps up to 64; sliced, by the ring, above). Transport "auto" even in the
// [tcp] run.
CommunicatorOptions sweep_options() {
  CommunicatorOptions o;
  o.store_prefix = "hier";
  o.transport = "auto";
  o.segment_bytes = 1024;
  o.small_message_bytes = 64;
  o.hierarchical_small_bytes = 16;
  o.timeout = std::chrono::seconds(60);
  return o;
}

std::function<CommunicatorOptions(int)> on_hosts(
    std::vector<int> host_of, std::function<void(CommunicatorOptions&)> tweak = nullptr) {
  return [host_of, tweak](int r) {
    CommunicatorOptions o = sweep_options();
    o.host_id = str_cat("fake-host-", host_of[r]);
    if (tweak) tweak(o);
    return o;
  };
}

CpuCommunicator& socket_of(Communicator& c) { return dynamic_cast<CpuCommunicator&>(c); }

// Runs `call` and checks that it took the hierarchical path (or not).
template <typename Call>
void expect_path(Communicator& c, bool hierarchical, const std::string& what, Call&& call) {
  const uint64_t before = socket_of(c).hierarchical_calls();
  call();
  const uint64_t ran = socket_of(c).hierarchical_calls() - before;
  if (ran != (hierarchical ? 1u : 0u)) {
    throw std::runtime_error(str_cat(what, " on rank ", c.rank(), " ran ",
                                     hierarchical ? "the flat algorithm" : "hierarchically"));
  }
}

void sweep_all_reduce(Communicator& c, bool hierarchical) {
  const int P = c.size(), r = c.rank();
  for_each_reduction(P, [&](DataType dt, ReduceOp op, size_t n, bool in_place) {
    auto in = make_data(dt, n, r, op);
    const auto want = reference_reduce(dt, op, P, n);
    const std::string what = str_cat("all_reduce ", dt, " ", op, " n=", n);
    if (in_place) {
      expect_path(c, hierarchical, what,
                  [&] { c.all_reduce(view_of(in, dt), view_of(in, dt), op, deadline()); });
      EXPECT_SAME(in, want, dt, what, " in place");
    } else {
      const auto in_copy = in;
      std::vector<uint8_t> out(in.size(), 0xab);
      expect_path(c, hierarchical, what,
                  [&] { c.all_reduce(view_of(in, dt), view_of(out, dt), op, deadline()); });
      EXPECT_SAME(out, want, dt, what);
      EXPECT_SAME(in, in_copy, dt, "all_reduce modified its input ", dt, " n=", n);
      // The flat ring on the same input: bitwise the same.
      std::vector<uint8_t> flat(in.size(), 0xcd);
      c.all_reduce(view_of(in, dt), view_of(flat, dt), op, deadline(), AllReduceAlgorithm::kRing);
      EXPECT_SAME(flat, out, dt, what, ": flat ring against hierarchical");
    }
  });
}

void sweep_broadcast_and_barrier(Communicator& c) {
  const int P = c.size(), r = c.rank();
  for (DataType dt : kAllDtypes) {
    for (size_t n : counts_for(P)) {
      for (int root = 0; root < P; ++root) {
        auto t = make_data(dt, n, r == root ? 1000 + root : r, ReduceOp::kSum);
        const std::string what = str_cat("broadcast ", dt, " n=", n, " root ", root);
        expect_path(c, true, what, [&] { c.broadcast(view_of(t, dt), root, deadline()); });
        EXPECT_SAME(t, make_data(dt, n, 1000 + root, ReduceOp::kSum), dt, what);
      }
    }
  }
  for (int i = 0; i < 3; ++i) expect_path(c, true, "barrier", [&] { c.barrier(deadline()); });
}

// reduce_scatter, all_gather and reduce (tensor forms) against the
// reference, in place and not, every root; `hierarchical` says which path
// must run.
void sweep_scatter_gather_reduce(Communicator& c, bool hierarchical) {
  const int P = c.size(), r = c.rank();
  for_each_reduction(P, [&](DataType dt, ReduceOp op, size_t n, bool in_place) {
    const size_t es = element_size(dt);
    // reduce_scatter: rank r gets elements [r n, (r + 1) n) of the sum.
    auto in = make_data(dt, n * P, r, op);
    const auto full = reference_reduce(dt, op, P, n * P);
    const std::vector<uint8_t> want(full.begin() + r * n * es, full.begin() + (r + 1) * n * es);
    const std::string what = str_cat("reduce_scatter ", dt, " ", op, " n=", n);
    if (in_place) {
      expect_path(c, hierarchical, what, [&] {
        c.reduce_scatter(view_of(in, dt), view_of(in, dt, r * n, n), op, deadline());
      });
      std::vector<uint8_t> got(in.begin() + r * n * es, in.begin() + (r + 1) * n * es);
      EXPECT_SAME(got, want, dt, what, " in place");
    } else {
      std::vector<uint8_t> out(n * es, 0xab);
      expect_path(c, hierarchical, what,
                  [&] { c.reduce_scatter(view_of(in, dt), view_of(out, dt), op, deadline()); });
      EXPECT_SAME(out, want, dt, what);
      EXPECT_SAME(in, make_data(dt, n * P, r, op), dt, what, " modified its input");
    }
    // reduce to every root.
    for (int root = 0; root < P; ++root) {
      auto mine = make_data(dt, n, r, op);
      std::vector<uint8_t> out(n * es, 0xab);
      const std::string rwhat = str_cat("reduce ", dt, " ", op, " n=", n, " root ", root);
      auto& target = in_place ? mine : out;
      expect_path(c, hierarchical, rwhat,
                  [&] { c.reduce(view_of(mine, dt), view_of(target, dt), op, root, deadline()); });
      if (r == root) EXPECT_SAME(target, reference_reduce(dt, op, P, n), dt, rwhat);
      if (!in_place) EXPECT_SAME(mine, make_data(dt, n, r, op), dt, rwhat, " modified its input");
    }
  });
  for (DataType dt : kAllDtypes) {
    for (size_t n : counts_for(P)) {
      const size_t es = element_size(dt);
      std::vector<uint8_t> want;
      for (int p = 0; p < P; ++p) {
        const auto part = make_data(dt, n, p, ReduceOp::kSum);
        want.insert(want.end(), part.begin(), part.end());
      }
      const std::string what = str_cat("all_gather ", dt, " n=", n);
      std::vector<uint8_t> out(n * es * P, 0xab);
      auto in = make_data(dt, n, r, ReduceOp::kSum);
      expect_path(c, hierarchical, what,
                  [&] { c.all_gather(view_of(in, dt), view_of(out, dt), deadline()); });
      EXPECT_SAME(out, want, dt, what);
      // In place: the input is this rank's slot of the output.
      std::vector<uint8_t> inplace(n * es * P, 0xcd);
      std::copy(in.begin(), in.end(), inplace.begin() + r * n * es);
      expect_path(c, hierarchical, what, [&] {
        c.all_gather(view_of(inplace, dt, r * n, n), view_of(inplace, dt), deadline());
      });
      EXPECT_SAME(inplace, want, dt, what, " in place");
    }
  }
}

// Every connected peer on this rank's host talks over shared memory, every
// other over TCP.
void check_channels(Communicator& c, const std::vector<int>& hosts) {
  const auto kinds = c.channel_kinds(deadline(), false);
  for (int p = 0; p < c.size(); ++p) {
    if (kinds[p].empty()) continue;
    const std::string want = hosts[p] == hosts[c.rank()] ? "shm" : "tcp";
    if (kinds[p] != want) {
      throw std::runtime_error(
          str_cat("rank ", c.rank(), " talks to rank ", p, " over ", kinds[p], ", not ", want));
    }
  }
}

void require_hierarchical(Communicator& c, bool on) {
  if (socket_of(c).hierarchical() != on) {
    throw std::runtime_error(str_cat("rank ", c.rank(), ": hierarchical algorithms ",
                                     on ? "off" : "on", ", expected ", on ? "on" : "off"));
  }
}

}  // namespace

TEST_CASE("hierarchical all_reduce matches the reference and the flat ring on 2 and 3 hosts",
          "[hierarchical]") {
  // Contiguous and interleaved placements of 2 x 2 and 3 x 2 ranks.
  const std::vector<int> hosts =
      GENERATE(std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 1, 0, 1},
               std::vector<int>{0, 0, 1, 1, 2, 2}, std::vector<int>{0, 1, 2, 0, 1, 2});
  INFO("host of each rank: " << join(hosts, ","));
  // As sweep_options (one rank per host in one hop up to 16 bytes, in two
  // up to 64, sliced above), or with larger crossovers so that the
  // 3001-element sweeps take the two-step exchange: 8-byte types sliced
  // (12 KiB per slice), 4-byte ones one rank per host; or every non-empty
  // buffer up to 64 KiB one rank per host. Uneven and empty parts: 3001 or
  // 1 element over 2 or 3 hosts.
  const size_t small_message_bytes = GENERATE(size_t{0}, size_t{16} << 10, size_t{64} << 10);
  INFO("small_message_bytes " << small_message_bytes << " (0: sweep_options)");
  auto tweak = [small_message_bytes](CommunicatorOptions& o) {
    if (small_message_bytes == 0) return;
    o.hierarchical_small_bytes = 0;
    o.small_message_bytes = small_message_bytes;
  };
  auto errors =
      run_ranks(static_cast<int>(hosts.size()), on_hosts(hosts, tweak), [&](Communicator& c) {
        require_hierarchical(c, true);
        sweep_all_reduce(c, true);
        check_channels(c, hosts);
      });
  REQUIRE(join_errors(errors) == "");
}

TEST_CASE("hierarchical reduce_scatter, all_gather and reduce match the reference on 2 and 3 hosts",
          "[hierarchical]") {
  const std::vector<int> hosts =
      GENERATE(std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 1, 0, 1},
               std::vector<int>{0, 1, 2, 0, 1, 2}, std::vector<int>{0, 0, 0, 1, 1, 1});
  INFO("host of each rank: " << join(hosts, ","));
  auto errors = run_ranks(static_cast<int>(hosts.size()), on_hosts(hosts), [&](Communicator& c) {
    require_hierarchical(c, true);
    sweep_scatter_gather_reduce(c, true);
    check_channels(c, hosts);
  });
  REQUIRE(join_errors(errors) == "");
}

TEST_CASE("hierarchical broadcast and barrier deliver from every root on 2 and 3 hosts",
          "[hierarchical]") {
  const std::vector<int> hosts =
      GENERATE(std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 1, 2, 0, 1, 2});
  INFO("host of each rank: " << join(hosts, ","));
  auto errors = run_ranks(static_cast<int>(hosts.size()), on_hosts(hosts), [](Communicator& c) {
    require_hierarchical(c, true);
    sweep_broadcast_and_barrier(c);
  });
  REQUIRE(join_errors(errors) == "");
}

TEST_CASE("hosts of different sizes: all_reduce runs flat, broadcast and barrier hierarchically",
          "[hierarchical]") {
  const std::vector<int> hosts{0, 0, 0, 1};  // 3 ranks on one host, 1 on the other
  auto errors = run_ranks(4, on_hosts(hosts), [](Communicator& c) {
    require_hierarchical(c, true);
    sweep_all_reduce(c, false);
    sweep_scatter_gather_reduce(c, false);
    std::vector<float> v(5, 1.0f);
    const TensorView t{v.data(), v.size(), DataType::kFloat32, Device::cpu()};
    try {
      c.all_reduce(t, t, ReduceOp::kSum, deadline(), AllReduceAlgorithm::kHierarchical);
      throw std::runtime_error("an explicit hierarchical all_reduce over uneven hosts ran");
    } catch (const InvalidArgument& e) {
      if (std::string(e.what()).find("hosts of different sizes") == std::string::npos) throw;
    }
    sweep_broadcast_and_barrier(c);
  });
  REQUIRE(join_errors(errors) == "");
}

TEST_CASE("the flat algorithms run with COLLIE_HIERARCHICAL=0 or one rank per host",
          "[hierarchical]") {
  SECTION("COLLIE_HIERARCHICAL=0") {
    ScopedEnv off("COLLIE_HIERARCHICAL", "0");
    auto errors = run_ranks(4, on_hosts({0, 0, 1, 1}), [](Communicator& c) {
      require_hierarchical(c, false);
      std::vector<float> v(100, static_cast<float>(c.rank()));
      const TensorView t{v.data(), v.size(), DataType::kFloat32, Device::cpu()};
      expect_path(c, false, "all_reduce", [&] { c.all_reduce(t, t, ReduceOp::kSum, deadline()); });
      expect_path(c, false, "broadcast", [&] { c.broadcast(t, 2, deadline()); });
      expect_path(c, false, "barrier", [&] { c.barrier(deadline()); });
      if (v[0] != 6.0f || v[99] != 6.0f) throw std::runtime_error(str_cat("got ", v[0]));
    });
    REQUIRE(join_errors(errors) == "");
  }
  SECTION("one rank per host") {
    auto errors = run_ranks(3, on_hosts({0, 1, 2}), [](Communicator& c) {
      require_hierarchical(c, false);
      expect_path(c, false, "barrier", [&] { c.barrier(deadline()); });
    });
    REQUIRE(join_errors(errors) == "");
  }
}

TEST_CASE("default options: a multi-megabyte hierarchical all_reduce and broadcast",
          "[hierarchical]") {
  auto errors = run_ranks(
      4,
      [](int r) {
        CommunicatorOptions o;
        o.store_prefix = "hier_big";
        o.transport = "auto";
        o.host_id = str_cat("fake-host-", r / 2);
        return o;
      },
      [](Communicator& c) {
        require_hierarchical(c, true);
        const size_t n = (size_t{3} << 20) / 4 + 7;  // ~3 MiB of float32, odd
        for (DataType dt : {DataType::kFloat32, DataType::kBFloat16}) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
            auto buf = make_data(dt, n, c.rank(), op);
            expect_path(c, true, "big all_reduce",
                        [&] { c.all_reduce(view_of(buf, dt), view_of(buf, dt), op, deadline()); });
            EXPECT_SAME(buf, reference_reduce(dt, op, 4, n), dt, "big all_reduce ", dt, " ", op);
          }
        }
        auto t = make_data(DataType::kInt64, n / 2, c.rank() == 3 ? 77 : c.rank(), ReduceOp::kSum);
        expect_path(c, true, "big broadcast",
                    [&] { c.broadcast(view_of(t, DataType::kInt64), 3, deadline()); });
        EXPECT_SAME(t, make_data(DataType::kInt64, n / 2, 77, ReduceOp::kSum), DataType::kInt64,
                    "big broadcast");
      });
  REQUIRE(join_errors(errors) == "");
}

TEST_CASE("a mismatched call fails on every rank of every host, naming both calls",
          "[hierarchical]") {
  auto errors = run_ranks(4, on_hosts({0, 0, 1, 1}), [](Communicator& c) {
    // Rank 3 (host 1) passes one element more: large enough for the
    // shared-memory and ring steps.
    std::vector<float> v(c.rank() == 3 ? 1001 : 1000, 1.0f);
    const TensorView t{v.data(), v.size(), DataType::kFloat32, Device::cpu()};
    c.all_reduce(t, t, ReduceOp::kSum, Deadline(std::chrono::seconds(30)));
  });
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK_THAT(errors[r], Contains("all_reduce(float32, 100"));
  }
}

TEST_CASE("a rank that leaves mid-job: every rank of both hosts fails naming it",
          "[hierarchical]") {
  const auto start = Clock::now();
  auto errors = run_ranks(4, on_hosts({0, 0, 1, 1}), [](Communicator& c) {
    if (c.rank() == 3) return;  // closes its communicator without the call
    std::vector<float> v(1000, 1.0f);
    const TensorView t{v.data(), v.size(), DataType::kFloat32, Device::cpu()};
    c.all_reduce(t, t, ReduceOp::kSum, Deadline(std::chrono::seconds(60)));
  });
  CHECK(errors[3] == "");
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK_THAT(errors[r], Contains("rank 3"));
  }
  // Through the abort frames, not the 60 s deadline.
  CHECK(Clock::now() - start < std::chrono::seconds(30));
}

namespace {

// Inside namespaces made for the test nothing else can hold a fixed port.
constexpr uint16_t kNetnsStorePort = 29431;

// A rank of the netns cases: args are the store's host (rank 0's address,
// where rank 0 serves the store), rank, size, this rank's address.
std::unique_ptr<Store> netns_store(const std::vector<std::string>& args) {
  TcpStoreOptions so;
  so.timeout = std::chrono::seconds(60);
  return TcpStore::create(args[0], kNetnsStorePort, std::stoi(args[1]) == 0, so);
}

std::unique_ptr<Communicator> netns_rank(Store& store, const std::vector<std::string>& args) {
  CommunicatorOptions o = sweep_options();  // no host_id: the namespaces tell the hosts apart
  o.bind_host = args[3];
  return Communicator::connect(store, std::stoi(args[1]), std::stoi(args[2]),
                               CommunicatorOptions::from_env(o));
}

// 2 ranks on each of `hosts` network namespaces running `child` (rank r on
// host r / 2).
std::vector<Subprocess> spawn_netns_ranks(const NetnsLan& lan, int hosts, const char* child) {
  std::vector<Subprocess> ranks;
  for (int r = 0; r < 2 * hosts; ++r) {
    std::vector<std::string> argv = lan.exec_in(r / 2);
    for (auto& a : child_argv(
             child, {lan.addrs[0], std::to_string(r), std::to_string(2 * hosts), lan.addrs[r / 2]}))
      argv.push_back(a);
    SpawnOptions so;
    so.env["COLLIE_HOST_ID"] = std::nullopt;
    ranks.push_back(Subprocess::spawn(argv, so));
  }
  return ranks;
}

}  // namespace

// The sweep on 2 ranks per host, rank r on host r / 2.
COLLIE_TEST_CHILD(hierarchical_rank) {
  const int rank = std::stoi(args[1]), size = std::stoi(args[2]);
  auto store = netns_store(args);
  std::vector<int> hosts;
  for (int r = 0; r < size; ++r) hosts.push_back(r / 2);
  {
    auto comm = netns_rank(*store, args);
    require_hierarchical(*comm, true);
    sweep_all_reduce(*comm, true);
    sweep_broadcast_and_barrier(*comm);
    sweep_scatter_gather_reduce(*comm, true);
    check_channels(*comm, hosts);
    std::printf("rank %d: %llu hierarchical calls\n", rank,
                static_cast<unsigned long long>(socket_of(*comm).hierarchical_calls()));
  }
  // Rank 0 serves the store: it leaves last.
  if (store->add("done", 1) == size) store->set("all_done", to_bytes("1"));
  if (rank == 0) store->wait({"all_done"}, std::chrono::seconds(60));
  return 0;
}

TEST_CASE("netns: hierarchical collectives between 2 and 3 hosts of 2 ranks each",
          "[hierarchical][netns]") {
  const int H = GENERATE(2, 3);
  auto lan = namespaces_or_skip<NetnsLan>("q", "10.231.13", H);
  std::vector<Subprocess> ranks = spawn_netns_ranks(*lan, H, "hierarchical_rank");
  for (int r = 0; r < 2 * H; ++r) {
    const ExitStatus st = ranks[r].wait(std::chrono::minutes(4));
    INFO(H << " hosts, rank " << r << ": " << st.describe() << "\n"
           << ranks[r].out() << ranks[r].err());
    CHECK(st.ok());
    CHECK_THAT(ranks[r].out(),
               Contains(str_cat("rank ", r, ": ")) && Contains("hierarchical calls"));
  }
}

// All_reduces of 4 MiB until one fails (rank 3 never stops: the test kills
// it); prints "ready" after the first and "error: <what>" at the end.
COLLIE_TEST_CHILD(hierarchical_victim) {
  auto store = netns_store(args);
  auto comm = netns_rank(*store, args);
  require_hierarchical(*comm, true);
  std::vector<float> v(size_t{1} << 20, 1.0f);
  const TensorView t{v.data(), v.size(), DataType::kFloat32, Device::cpu()};
  try {
    for (int i = 0;; ++i) {
      comm->all_reduce(t, t, ReduceOp::kMax, Deadline(std::chrono::seconds(60)));
      if (i == 0) std::printf("ready\n");
      std::fflush(stdout);
    }
  } catch (const Error& e) {
    std::printf("error: %s\n", e.what());
  }
  std::fflush(stdout);
  // Stay until every survivor has its error: a rank that exits at once
  // closes its sockets, and a peer still sending to it would blame it
  // (a broken pipe) instead of reading its abort frame naming rank 3.
  const int survivors = std::stoi(args[2]) - 1;
  if (store->add("failed", 1) == survivors) store->set("all_failed", to_bytes("1"));
  store->wait({"all_failed"}, std::chrono::seconds(60));
  // Rank 0 serves the store: it leaves last.
  if (store->add("left", 1) == survivors) store->set("all_left", to_bytes("1"));
  if (std::stoi(args[1]) == 0) store->wait({"all_left"}, std::chrono::seconds(60));
  return 0;
}

TEST_CASE("netns: a rank SIGKILLed mid-job is named on every rank of both hosts",
          "[hierarchical][netns]") {
  auto lan = namespaces_or_skip<NetnsLan>("q", "10.231.13", 2);
  std::vector<Subprocess> ranks = spawn_netns_ranks(*lan, 2, "hierarchical_victim");
  for (auto& r : ranks) r.wait_for_output("ready", std::chrono::seconds(60));
  const auto killed = Clock::now();
  ranks[3].kill(SIGKILL);
  for (int r = 0; r < 3; ++r) {
    const ExitStatus st = ranks[r].wait(std::chrono::seconds(50));
    INFO("rank " << r << ": " << st.describe() << "\n" << ranks[r].out() << ranks[r].err());
    CHECK(st.ok());
    CHECK_THAT(ranks[r].out(),
               Contains("error: ") && Contains("rank 3") && Contains(str_cat("on rank ", r, ":")));
  }
  // Through EOFs and abort frames, well before the calls' 60 s deadline.
  CHECK(Clock::now() - killed < std::chrono::seconds(30));
}

// Issue 16's goal: per-rank data sockets O(local ranks + 2), not O(N). With
// 4 hosts x 4 ranks, after every hierarchical collective (small and large
// all_reduce, broadcast, barrier), a rank talks to its host's ranks over
// shared memory and to a few ranks elsewhere over TCP: its peers of the
// same local index (the small all_reduce's direct exchange among them
// reaches every host: hosts - 1), its flat ring neighbours linked at init,
// and for a host leader the leaders' dissemination barrier. Measured: 3 shm
// and 3-5 tcp per rank, where a flat job's would reach 15.
TEST_CASE("a hierarchical job connects a rank to its host and a few ranks elsewhere",
          "[hierarchical]") {
  constexpr int kHosts = 4, kLocal = 4, P = kHosts * kLocal;
  std::vector<int> hosts;
  for (int r = 0; r < P; ++r) hosts.push_back(r / kLocal);
  std::vector<std::string> counts(P);
  const auto errors = run_ranks(P, on_hosts(hosts), [&](Communicator& c) {
    require_hierarchical(c, true);
    std::vector<float> small(8, 1.0f), large(1 << 16, 1.0f);
    expect_path(c, true, "all_reduce", [&] {
      c.all_reduce(view(small.data(), small.size()), view(small.data(), small.size()),
                   ReduceOp::kSum, deadline());
    });
    expect_path(c, true, "all_reduce", [&] {
      c.all_reduce(view(large.data(), large.size()), view(large.data(), large.size()),
                   ReduceOp::kSum, deadline());
    });
    expect_path(c, true, "broadcast", [&] { c.broadcast(view(large.data(), 64), 5, deadline()); });
    expect_path(c, true, "barrier", [&] { c.barrier(deadline()); });
    // The new hierarchical collectives talk to the same column of ranks.
    std::vector<float> gathered(large.size() * P);
    for (size_t part : {size_t{2}, large.size()}) {
      expect_path(c, true, "all_gather", [&] {
        c.all_gather(view(large.data(), part), view(gathered.data(), part * P), deadline());
      });
      expect_path(c, true, "reduce_scatter", [&] {
        c.reduce_scatter(view(gathered.data(), part * P), view(large.data(), part), ReduceOp::kSum,
                         deadline());
      });
      expect_path(c, true, "reduce", [&] {
        c.reduce(view(large.data(), part), view(large.data(), part), ReduceOp::kSum, 9, deadline());
      });
    }
    check_channels(c, hosts);
    int shm = 0, tcp = 0;
    for (const auto& kind : c.channel_kinds(deadline(), false)) {
      shm += kind == "shm";
      tcp += kind == "tcp";
    }
    counts[static_cast<size_t>(c.rank())] = str_cat(shm, " shm + ", tcp, " tcp");
    const bool leader = c.rank() % kLocal == 0;
    // Same-index peers on every other host + the flat ring's neighbours
    // linked at init (at most 2) + for a leader the barrier's 2 log2(hosts).
    const int tcp_bound = (kHosts - 1) + 2 + (leader ? 2 * 2 : 0);
    if (shm > kLocal - 1 || tcp > tcp_bound)
      throw std::runtime_error(str_cat("rank ", c.rank(), " holds ", shm, " shm and ", tcp,
                                       " tcp peers; bound ", kLocal - 1, " and ", tcp_bound));
  });
  std::string table;
  for (int r = 0; r < P; ++r) table += str_cat("rank ", r, ": ", counts[r], "\n");
  INFO(table);
  REQUIRE(join_errors(errors) == "");
  WARN(table);
}
