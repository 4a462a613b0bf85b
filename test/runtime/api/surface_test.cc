// The torch.distributed surface of issue 13 through the public API, N real
// processes over loopback (file:// rendezvous): point-to-point with
// default-group ranks (also on a sub-group, where ranks translate),
// reduce / gather / scatter / all_to_all_single / list forms, the object
// collectives over std::string, monitored_barrier naming the missing ranks,
// and one backend per device type (backend strings, a cuda buffer refused
// with the reason when no GPU serves it).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <numeric>

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/file_store.h"
#include "collie/rendezvous/hash_store.h"
#include "collie/runtime/api/backend_registry.h"
#include "collie/runtime/api/distributed.h"
#include "collie/test/runtime/api/rank_runner.h"
#include "collie/test/support/skip.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

void scenario_p2p() {
  const int rank = get_rank(), world = get_world_size();
  // Blocking send/recv around a ring, even ranks sending first.
  const int right = (rank + 1) % world, left = (rank + world - 1) % world;
  std::vector<int64_t> out(100, rank), in(100, -1);
  if (rank % 2 == 0) {
    collie::send(view(out.data(), out.size()), right, {}, 3);
    COLLIE_CHECK(collie::recv(view(in.data(), in.size()), left, {}, 3) == left, "recv's source");
  } else {
    COLLIE_CHECK(collie::recv(view(in.data(), in.size()), left, {}, 3) == left, "recv's source");
    collie::send(view(out.data(), out.size()), right, {}, 3);
  }
  COLLIE_CHECK(in == std::vector<int64_t>(100, left), "ring send/recv");
  // isend/irecv and batch_isend_irecv, both directions at once.
  std::vector<float> a(1000, static_cast<float>(rank)), b(1000, -1.0f), c(1000, -1.0f);
  auto sent = isend(view(a.data(), a.size()), right);
  auto got = irecv(view(b.data(), b.size()), left);
  sent->wait();
  got->wait();
  COLLIE_CHECK(got->source_rank() == left, "irecv's source_rank ", got->source_rank());
  COLLIE_CHECK(b == std::vector<float>(1000, static_cast<float>(left)), "isend/irecv");
  std::vector<P2POp> ops{{P2POpType::kIsend, view(a.data(), a.size()), left, 1},
                         {P2POpType::kIrecv, view(c.data(), c.size()), right, 1}};
  for (auto& w : batch_isend_irecv(ops)) w->wait();
  COLLIE_CHECK(c == std::vector<float>(1000, static_cast<float>(right)), "batch_isend_irecv");
  // Any source on a sub-group of the ranks in reverse order: peers and the
  // reported source are default-group ranks.
  std::vector<int> members(world);
  std::iota(members.rbegin(), members.rend(), 0);
  Group g = new_group(members);
  if (rank == world - 1) {  // group rank 0
    for (int k = 1; k < world; ++k) {
      int32_t v = -1;
      const int from = collie::recv(view(&v, 1), kAnySource, g);
      COLLIE_CHECK(v == from * 10, "any-source value ", v, " from ", from);
    }
  } else {
    int32_t v = rank * 10;
    collie::send(view(&v, 1), world - 1, g);
  }
  barrier();
}

void scenario_collectives() {
  const int rank = get_rank(), world = get_world_size();
  const int root = world - 1;
  std::vector<double> t(7, rank + 1.0);
  reduce(view(t.data(), t.size()), root, ReduceOp::kSum);
  const double sum = world * (world + 1) / 2.0;
  COLLIE_CHECK(t == std::vector<double>(7, rank == root ? sum : rank + 1.0), "reduce");
  // gather / scatter with list buffers on the root only
  std::vector<std::vector<int32_t>> slots(rank == root ? world : 0, std::vector<int32_t>(3, -1));
  std::vector<TensorView> views;
  for (auto& s : slots) views.push_back(view(s.data(), s.size()));
  std::vector<int32_t> mine(3, rank * 7);
  gather(view(mine.data(), 3), views, root);
  for (int p = 0; p < static_cast<int>(slots.size()); ++p)
    COLLIE_CHECK(slots[p] == std::vector<int32_t>(3, p * 7), "gather slot ", p);
  for (int p = 0; p < static_cast<int>(slots.size()); ++p) slots[p].assign(3, p * 100);
  std::vector<int32_t> part(3, -1);
  scatter(view(part.data(), 3), views, root);
  COLLIE_CHECK(part == std::vector<int32_t>(3, rank * 100), "scatter");
  // all_to_all_single with split sizes: rank r sends p + 1 elements to rank
  // p, so it receives r + 1 from everyone.
  std::vector<size_t> in_splits, out_splits;
  std::vector<int32_t> input, output(static_cast<size_t>(world) * (rank + 1), -1);
  for (int p = 0; p < world; ++p) {
    in_splits.push_back(static_cast<size_t>(p) + 1);
    out_splits.push_back(static_cast<size_t>(rank) + 1);
    for (int k = 0; k <= p; ++k) input.push_back(rank * 1000 + p);
  }
  all_to_all_single(view(output.data(), output.size()), view(input.data(), input.size()),
                    out_splits, in_splits);
  for (int p = 0; p < world; ++p)
    for (int k = 0; k <= rank; ++k)
      COLLIE_CHECK(output[static_cast<size_t>(p) * (rank + 1) + k] == p * 1000 + rank,
                   "all_to_all_single from ", p);
  // equal splits
  std::vector<float> eq_in(static_cast<size_t>(world) * 2), eq_out(eq_in.size(), -1.0f);
  for (size_t i = 0; i < eq_in.size(); ++i) eq_in[i] = static_cast<float>(rank * 100 + i / 2);
  all_to_all_single(view(eq_out.data(), eq_out.size()), view(eq_in.data(), eq_in.size()));
  for (size_t i = 0; i < eq_out.size(); ++i)
    COLLIE_CHECK(eq_out[i] == static_cast<float>(static_cast<int>(i / 2) * 100 + rank),
                 "all_to_all_single equal parts");
  // list forms
  std::vector<std::vector<float>> outs(world, std::vector<float>(4, -1.0f));
  std::vector<TensorView> out_views;
  for (auto& o : outs) out_views.push_back(view(o.data(), o.size()));
  std::vector<float> x(4, static_cast<float>(rank));
  all_gather(out_views, view(x.data(), x.size()));
  for (int p = 0; p < world; ++p)
    COLLIE_CHECK(outs[p] == std::vector<float>(4, static_cast<float>(p)), "list all_gather");
  std::vector<float> rs(4, -1.0f);
  reduce_scatter(view(rs.data(), rs.size()), out_views, ReduceOp::kMax);
  COLLIE_CHECK(rs == std::vector<float>(4, static_cast<float>(rank)), "list reduce_scatter");
  // bitwise ops on integers (BXOR over ranks 0..world-1)
  std::vector<int32_t> bits(5, 1 << rank);
  all_reduce(view(bits.data(), bits.size()), ReduceOp::kBxor);
  COLLIE_CHECK(bits == std::vector<int32_t>(5, (1 << world) - 1), "all_reduce bxor");
}

void scenario_objects() {
  const int rank = get_rank(), world = get_world_size();
  auto object_of = [](int r) { return std::string(static_cast<size_t>(r) * 37, 'a' + r); };
  std::string b = rank == 1 % world ? std::string("hello \0 world", 13) : "stale";
  broadcast_object(b, 1 % world);
  COLLIE_CHECK(b == std::string("hello \0 world", 13), "broadcast_object: ", b);
  const auto all = all_gather_object(object_of(rank));
  COLLIE_CHECK(static_cast<int>(all.size()) == world, "all_gather_object size");
  for (int p = 0; p < world; ++p) COLLIE_CHECK(all[p] == object_of(p), "all_gather_object ", p);
  const int dst = world - 1;
  const auto gathered = gather_object(object_of(rank), dst);
  COLLIE_CHECK(gathered.size() == (rank == dst ? static_cast<size_t>(world) : 0),
               "gather_object size");
  for (size_t p = 0; p < gathered.size(); ++p)
    COLLIE_CHECK(gathered[p] == object_of(static_cast<int>(p)), "gather_object ", p);
  std::vector<std::string> parts;
  if (rank == 0)
    for (int p = 0; p < world; ++p) parts.push_back(str_cat("part for ", p, std::string(p, '!')));
  const std::string mine = scatter_object(parts, 0);
  COLLIE_CHECK(mine == str_cat("part for ", rank, std::string(rank, '!')), "scatter_object");
}

void scenario_per_device() {
  // On a machine without a GPU "auto" serves host buffers only, and a cuda
  // buffer is refused with the reason, before anything is sent.
  COLLIE_CHECK(get_backend() == "cpu", "backend ", get_backend());
  float x = 1;
  TensorView on_gpu{&x, 1, DataType::kFloat32, Device::cuda(0)};
  try {
    all_reduce(on_gpu);
    throw Error("a cuda buffer was accepted without a cuda backend");
  } catch (const BackendError& e) {
    const std::string m = e.what();
    COLLIE_CHECK(m.find("cuda:0") != std::string::npos && m.find("\"auto\"") != std::string::npos,
                 "message: ", m);
    std::printf("refused: %s\n", m.c_str());
  }
  std::vector<float> v(3, 1.0f);
  all_reduce(view(v.data(), v.size()));
  COLLIE_CHECK(v[0] == static_cast<float>(get_world_size()), "host all_reduce on auto");
}

// Ranks listed in `absent` skip the barrier (they wait on a side store until
// rank 0 is done); every other rank calls monitored_barrier with a short
// timeout.
void scenario_monitored(const std::string& side_path, const std::string& absent, bool all) {
  const int rank = get_rank(), world = get_world_size();
  FileStore side(side_path, world, {.timeout = 60s});
  monitored_barrier({}, 10s, all);  // everyone: passes
  const bool skip = absent.find(std::to_string(rank)) != std::string::npos;
  if (skip) {
    side.wait({"done"});
    return;
  }
  try {
    monitored_barrier({}, 1500ms, all);
    throw Error("monitored_barrier passed with ranks missing");
  } catch (const TimeoutError& e) {
    std::printf("RESULT %s\n", e.what());
  }
  if (rank == 0) side.set("done", "1");
}

}  // namespace

// args: scenario, rank, world, rendezvous file, backend [, absent ranks, all]
COLLIE_TEST_CHILD(api_surface_rank) {
  const std::string scenario = args.at(0);
  InitOptions options;
  options.rank = std::stoi(args.at(1));
  options.world_size = std::stoi(args.at(2));
  options.init_method = "file://" + args.at(3);
  options.backend = args.at(4);
  options.timeout = 60s;
  init_process_group(options);
  if (scenario == "p2p") scenario_p2p();
  if (scenario == "collectives") scenario_collectives();
  if (scenario == "objects") scenario_objects();
  if (scenario == "per_device") scenario_per_device();
  if (scenario == "monitored") {
    scenario_monitored(args.at(3) + ".side", args.at(5), args.at(6) == "all");
    std::fflush(stdout);
    _exit(0);  // the absent ranks never joined the barrier: no orderly shutdown
  }
  barrier();
  destroy_process_group();
  std::printf("ok\n");
  return 0;
}

namespace {

std::vector<std::string> run_api(int world, const std::string& scenario,
                                 const std::string& backend = "cpu",
                                 std::vector<std::string> extra = {}) {
  TempDir dir;
  return run_ranks(world, [&](int rank) {
    std::vector<std::string> a{scenario, std::to_string(rank), std::to_string(world),
                               dir.file("rdzv"), backend};
    a.insert(a.end(), extra.begin(), extra.end());
    return RankLaunch{child_argv("api_surface_rank", a)};
  });
}

}  // namespace

TEST_CASE("api: send/recv, isend/irecv, batch_isend_irecv, any source on a sub-group",
          "[api][surface]") {
  for (int world : {2, 3}) {
    INFO("world " << world);
    run_api(world, "p2p");
  }
}

TEST_CASE("api: reduce, gather, scatter, all_to_all_single, list forms, bxor", "[api][surface]") {
  for (int world : {1, 3}) {
    INFO("world " << world);
    run_api(world, "collectives");
  }
}

TEST_CASE("api: the object collectives over byte strings", "[api][surface]") {
  for (int world : {1, 3}) {
    INFO("world " << world);
    run_api(world, "objects");
  }
}

TEST_CASE("api: backend auto without a GPU serves host buffers and refuses cuda ones, saying why",
          "[api][surface]") {
  if (is_backend_available("nccl")) skip_gpu_test("a GPU is visible: auto serves cuda too");
  auto out = run_api(2, "per_device", "auto");
  CHECK_THAT(out[0], Contains("no backend serves cuda:0"));
}

TEST_CASE("backend strings: one backend per device type in torch's syntax", "[api][surface]") {
  auto both = parse_backend_spec("cpu:cpu,cuda:nccl");
  CHECK(both.cpu == "cpu");
  CHECK(both.cuda == "nccl");
  auto cpu = parse_backend_spec("CPU");
  CHECK(cpu.cpu == "cpu");
  CHECK(cpu.cuda.empty());
  CHECK_THAT(cpu.cuda_why, Contains("cpu buffers only"));
  // "socket", the cpu backend's old name, is read as "cpu".
  CHECK(parse_backend_spec("socket").cpu == "cpu");
  CHECK(parse_backend_spec("cpu:socket,cuda:nccl").cpu == "cpu");
  auto nccl = parse_backend_spec("nccl");
  CHECK(nccl.cuda == "nccl");
  CHECK(nccl.cpu.empty());
  auto automatic = parse_backend_spec("auto");
  CHECK(automatic.cpu == "cpu");
  CHECK(automatic.cuda == (is_backend_available("nccl") ? "nccl" : ""));
  if (!is_backend_available("nccl")) CHECK_THAT(automatic.cuda_why, Contains("no usable NCCL"));
  CHECK_THROWS_AS(parse_backend_spec("gpu:nccl"), InvalidArgument);
  CHECK_THROWS_WITH(parse_backend_spec("gpu:nccl"), Contains("unknown device type \"gpu\""));
  CHECK_THROWS_WITH(parse_backend_spec("cpu:nccl"), Contains("nccl cannot serve cpu"));
  CHECK_THROWS_WITH(parse_backend_spec("cpu:cpu,cpu:socket"), Contains("cpu is given twice"));
  CHECK_THROWS_WITH(parse_backend_spec("cpu:pigeon"), Contains("unknown backend \"pigeon\""));
  CHECK_THROWS_WITH(parse_backend_spec("gloo"), Contains("unknown backend \"gloo\""));
  CHECK_THROWS_AS(parse_backend_spec(""), InvalidArgument);
  // Where NCCL cannot run, naming it fails before any rendezvous.
  if (!is_backend_available("nccl")) {
    CHECK_THROWS_AS(init_process_group({.backend = "cpu:cpu,cuda:nccl",
                                        .world_size = 1,
                                        .rank = 0,
                                        .store = std::make_shared<HashStore>()}),
                    BackendError);
    CHECK_FALSE(is_initialized());
  }
}

TEST_CASE("monitored_barrier: rank 0 names the first missing rank, or all with wait_all_ranks",
          "[api][surface][failure]") {
  {
    auto out = run_api(4, "monitored", "cpu", {"23", "all"});
    CHECK_THAT(out[0], Contains("RESULT") && Contains("ranks 2, 3 did not arrive"));
    CHECK_THAT(out[1], Contains("RESULT") && Contains("rank 0 reports") && Contains("ranks 2, 3"));
  }
  {
    auto out = run_api(4, "monitored", "cpu", {"23", "first"});
    CHECK_THAT(out[0], Contains("RESULT") && Contains("rank 2 did not arrive") &&
                           Contains("wait_all_ranks names every one"));
  }
}
