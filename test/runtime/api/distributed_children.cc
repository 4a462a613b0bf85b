// The child processes of distributed_test.cc: each is one rank of a job that
// initializes the default group through the public API (the way a training
// script does) and runs one scenario, checking results against values it
// computes locally. A child prints "ok" and exits 0, or throws (exit 1 with
// the error on stderr).
#include <unistd.h>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <numeric>
#include <thread>

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/file_store.h"
#include "collie/runtime/api/distributed.h"
#include "collie/test/support/child.h"

using namespace collie;
using namespace std::chrono_literals;

namespace {

// Rank r's element i: small integers, so sums and products are exact in
// every dtype.
double input_value(int rank, size_t i) { return static_cast<double>((rank + 1) * (i % 3 + 1)); }

template <typename T>
std::vector<T> rank_input(int rank, size_t count) {
  std::vector<T> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<T>(input_value(rank, i));
  return v;
}

template <typename T>
void expect_equal(const std::vector<T>& got, const std::function<double(size_t)>& want,
                  const char* what) {
  for (size_t i = 0; i < got.size(); ++i)
    COLLIE_CHECK(static_cast<double>(got[i]) == want(i), what, ": element ", i, " is ",
                 static_cast<double>(got[i]), ", expected ", want(i), " on rank ", get_rank());
}

double sum_over_ranks(int world, size_t i) {
  double s = 0;
  for (int r = 0; r < world; ++r) s += input_value(r, i);
  return s;
}

void scenario_collectives() {
  const int rank = get_rank(), world = get_world_size();
  const size_t n = 1000 + static_cast<size_t>(world) + 1;  // not a multiple of world
  auto f = rank_input<float>(rank, n);
  all_reduce(view(f.data(), n));
  expect_equal(
      f, [&](size_t i) { return sum_over_ranks(world, i); }, "all_reduce float32 sum");

  auto d = rank_input<double>(rank, n);
  all_reduce(view(d.data(), n), ReduceOp::kAvg);
  expect_equal(
      d, [&](size_t i) { return sum_over_ranks(world, i) / world; }, "all_reduce float64 avg");

  auto ints = rank_input<int32_t>(rank, n);
  all_reduce(view(ints.data(), n), ReduceOp::kMax);
  expect_equal(
      ints, [&](size_t i) { return input_value(world - 1, i); }, "all_reduce int32 max");

  auto longs = rank_input<int64_t>(rank, 7);
  all_reduce(view(longs.data(), 7), ReduceOp::kProduct);
  expect_equal(
      longs,
      [&](size_t i) {
        double p = 1;
        for (int r = 0; r < world; ++r) p *= input_value(r, i);
        return p;
      },
      "all_reduce int64 product");

  // broadcast's src is a default-group rank, as in torch.
  auto b = rank_input<float>(rank, n);
  broadcast(view(b.data(), n), world - 1);
  expect_equal(
      b, [&](size_t i) { return input_value(world - 1, i); }, "broadcast");

  barrier();

  auto in = rank_input<int64_t>(rank, 5);
  std::vector<int64_t> gathered(5 * world);
  all_gather(view(gathered.data(), gathered.size()), view(in.data(), in.size()));
  expect_equal(
      gathered, [&](size_t i) { return input_value(static_cast<int>(i / 5), i % 5); },
      "all_gather");

  auto scatter_in = rank_input<float>(rank, 4 * world);
  std::vector<float> scatter_out(4);
  reduce_scatter(view(scatter_out.data(), 4), view(scatter_in.data(), scatter_in.size()));
  expect_equal(
      scatter_out, [&](size_t i) { return sum_over_ranks(world, rank * 4 + i); }, "reduce_scatter");

  // Zero elements is a valid call.
  all_reduce(TensorView{nullptr, 0, DataType::kFloat32});
}

// Many collectives in flight at once, waited in reverse order.
void scenario_inflight() {
  const int rank = get_rank(), world = get_world_size();
  constexpr int kOps = 48;
  std::vector<std::vector<float>> bufs;
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < kOps; ++k) {
    bufs.push_back(rank_input<float>(rank + k, 64 + k * 37));
  }
  for (int k = 0; k < kOps; ++k)
    works.push_back(all_reduce(view(bufs[k].data(), bufs[k].size()), ReduceOp::kSum, {}, true));
  for (int k = kOps - 1; k >= 0; --k) works[k]->wait();
  for (int k = 0; k < kOps; ++k)
    expect_equal(
        bufs[k],
        [&](size_t i) {
          double s = 0;
          for (int r = 0; r < world; ++r) s += input_value(r + k, i);
          return s;
        },
        str_cat("in-flight all_reduce #", k, " of ", bufs[k].size()).c_str());
}

// Two groups over the same ranks, driven concurrently from two threads.
void scenario_two_groups() {
  const int rank = get_rank(), world = get_world_size();
  Group a = new_group();
  Group b = new_group();
  COLLIE_CHECK(a.is_member() && b.is_member());
  COLLIE_CHECK(a.process_group() != b.process_group());
  auto drive = [&](const Group& g, int salt) {
    for (int k = 0; k < 30; ++k) {
      auto v = rank_input<double>(rank + salt, 300 + k);
      all_reduce(view(v.data(), v.size()), ReduceOp::kSum, g);
      expect_equal(
          v,
          [&](size_t i) {
            double s = 0;
            for (int r = 0; r < world; ++r) s += input_value(r + salt, i);
            return s;
          },
          str_cat("concurrent all_reduce on group ", salt, " #", k, " of ", v.size()).c_str());
    }
  };
  std::exception_ptr error;
  std::thread t([&] {
    try {
      drive(b, 5);
    } catch (...) {
      error = std::current_exception();
    }
  });
  drive(a, 0);
  t.join();
  if (error) std::rethrow_exception(error);
  destroy_process_group(a);
}

// Sub-groups: every rank calls new_group; members compute within the group,
// non-members get a non-member group on which collectives do nothing.
void scenario_subgroups() {
  const int rank = get_rank(), world = get_world_size();
  COLLIE_CHECK_EQ(world, 4);
  Group even = new_group({2, 0});  // sorted like torch: group ranks 0 -> 0, 1 -> 2
  Group upper = new_group({1, 2, 3});
  const bool in_even = rank % 2 == 0, in_upper = rank >= 1;
  COLLIE_CHECK_EQ(even.is_member(), in_even);
  COLLIE_CHECK_EQ(upper.is_member(), in_upper);
  COLLIE_CHECK_EQ(get_rank(even), in_even ? rank / 2 : -1);
  COLLIE_CHECK_EQ(get_world_size(even), in_even ? 2 : -1);
  COLLIE_CHECK_EQ(get_rank(upper), in_upper ? rank - 1 : -1);

  auto v = rank_input<float>(rank, 10);
  auto work = all_reduce(view(v.data(), 10), ReduceOp::kSum, even);
  COLLIE_CHECK(work->is_success());
  expect_equal(
      v,
      [&](size_t i) {
        return in_even ? input_value(0, i) + input_value(2, i) : input_value(rank, i);
      },
      "sub-group all_reduce");

  // src 3 is a default-group rank; group rank 2 of `upper`.
  auto b = rank_input<int32_t>(rank, 9);
  broadcast(view(b.data(), 9), 3, upper);
  expect_equal(
      b, [&](size_t i) { return input_value(in_upper ? 3 : rank, i); }, "sub-group broadcast");
  if (in_upper) {
    try {
      broadcast(view(b.data(), 9), 0, upper);
      throw Error("broadcast from a src outside the group did not throw");
    } catch (const InvalidArgument&) {
    }
  }
  barrier();
}

// Rank world-1 dies right after init; the others must notice it from the
// socket quickly, and the group must then refuse further calls.
void scenario_peer_dies() {
  const int rank = get_rank(), world = get_world_size();
  if (rank == world - 1) {
    std::fflush(stdout);
    _exit(0);
  }
  auto start = Clock::now();
  std::vector<float> v(1 << 16, 1.0f);
  auto work = all_reduce(view(v.data(), v.size()), ReduceOp::kSum, {}, true);
  try {
    work->wait();
    throw Error("all_reduce with a dead peer succeeded");
  } catch (const NetworkError& e) {
    std::printf("first error: NetworkError: %s\n", e.what());
  } catch (const BackendError& e) {
    // A surviving peer may learn of the death from another survivor.
    std::printf("first error: BackendError: %s\n", e.what());
  }
  COLLIE_CHECK(Clock::now() - start < 20s, "noticing the dead peer took too long");
  auto later = barrier(Group{}, true);
  COLLIE_CHECK(later->is_completed(), "a call on a broken group was queued instead of refused");
  try {
    later->wait();
    throw Error("barrier on a broken group succeeded");
  } catch (const BackendError& e) {
    std::printf("later error: %s\n", e.what());
  }
}

// Two threads of each rank call blocking all_reduces of one shape on the
// default group, each with its own values. Unchecked, the ranks pair one
// thread's call with the other's and the sums mix silently, call after
// call; the group must instead break with an error naming both calls, and
// every thread of every rank must stop with an error. (A call that finished
// on this rank before any rank saw two calls meet may hold a mixed sum: each
// rank sees only its own threads.) Each thread prints how it ended.
void scenario_one_group_two_threads() {
  const int rank = get_rank(), world = get_world_size();
  auto drive = [&](int salt) -> std::string {
    int mixed = 0;
    for (int k = 0; k < 20000; ++k) {
      auto v = rank_input<float>(rank + salt, 256);
      try {
        all_reduce(view(v.data(), v.size()), ReduceOp::kSum);
      } catch (const BackendError& e) {
        return str_cat("BackendError after ", k, " calls (", mixed, " mixed): ", e.what());
      } catch (const NetworkError& e) {
        return str_cat("NetworkError after ", k, " calls (", mixed, " mixed): ", e.what());
      }
      for (size_t i = 0; i < v.size(); ++i) {
        double want = 0;
        for (int r = 0; r < world; ++r) want += input_value(r + salt, i);
        if (v[i] != want) {
          ++mixed;
          break;
        }
      }
    }
    return str_cat("no error in 20000 calls (", mixed, " mixed)");
  };
  std::string other;
  std::thread t([&] { other = drive(5); });
  const std::string mine = drive(0);
  t.join();
  std::printf("thread a: %s\nthread b: %s\n", mine.c_str(), other.c_str());
}

// Rank 1 never calls the collective (it waits on a side store until rank 0
// is done): rank 0's all_reduce must time out at its own short deadline with
// a message naming the collective, and break the group.
void scenario_peer_hangs(const std::string& side_path) {
  const int rank = get_rank();
  FileStore side(side_path, 2, {.timeout = std::chrono::seconds(60)});
  if (rank == 1) {
    side.wait({"rank0_done"});
    return;
  }
  auto start = Clock::now();
  std::vector<float> v(1000, 1.0f);
  try {
    get_default_group()->all_reduce(view(v.data(), v.size()), {.timeout = 500ms})->wait();
    throw Error("all_reduce with a hung peer succeeded");
  } catch (const TimeoutError& e) {
    COLLIE_CHECK(Clock::now() - start < 15s, "the 500 ms timeout fired late");
    std::printf(
        "timeout error after %lld ms: %s\n",
        static_cast<long long>(
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()),
        e.what());
  }
  auto later = all_reduce(view(v.data(), v.size()), ReduceOp::kSum, {}, true);
  COLLIE_CHECK(later->is_completed() && !later->is_success(),
               "a broken group accepted a collective");
  side.set("rank0_done", "1");
}

void scenario_print() {
  const int rank = get_rank();
  setup_for_distributed(is_main_process());
  print("plain line from rank", rank, "of", get_world_size(), 2.5, true);
  print(force, "forced line from rank", rank);
}

const std::map<std::string, std::function<void()>>& scenarios() {
  static const std::map<std::string, std::function<void()>> m{
      {"collectives", scenario_collectives},
      {"inflight", scenario_inflight},
      {"two_groups", scenario_two_groups},
      {"subgroups", scenario_subgroups},
      {"peer_dies", scenario_peer_dies},
      {"print", scenario_print},
      {"one_group_two_threads", scenario_one_group_two_threads}};
  return m;
}

}  // namespace

// args: how (file | store | env), scenario, rank, world, where (a path or "").
// "env" takes everything from the environment the parent set (env:// or
// TORCHELASTIC_USE_AGENT_STORE), like a program under collie-run.
COLLIE_TEST_CHILD(dist_rank) {
  const std::string& how = args.at(0);
  const std::string& scenario = args.at(1);
  InitOptions options;
  options.backend = "cpu";
  options.timeout =
      std::chrono::seconds(scenario == "peer_dies" || scenario == "peer_hangs" ? 20 : 120);
  if (how != "env") {
    options.rank = std::stoi(args.at(2));
    options.world_size = std::stoi(args.at(3));
  }
  if (how == "file") options.init_method = "file://" + args.at(4);
  if (how == "store") options.store = std::make_shared<FileStore>(args.at(4), options.world_size);
  init_process_group(options);
  COLLIE_CHECK(is_dist_avail_and_initialized());
  const int rank = get_rank();
  if (scenario == "peer_hangs") {
    scenario_peer_hangs(args.at(4) + ".side");
  } else {
    scenarios().at(scenario)();
  }
  if (scenario != "peer_dies" && scenario != "peer_hangs" && scenario != "one_group_two_threads")
    barrier();
  destroy_process_group();
  COLLIE_CHECK(!is_initialized());
  std::printf("ok rank %d\n", rank);
  return 0;
}
