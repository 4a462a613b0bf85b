// register_backend: an embedder plugs its own backend in by name, as torch's
// Backend.register_backend does. Here the embedder's backend
// "wrapped-socket" wraps the cpu backend and counts the calls that reach
// it; a 2-rank job that asks init_process_group (and new_group) for it by
// name runs its collectives through the wrapper, with the cpu backend's
// results. The registry's own rules (lower-cased names, the availability
// probe, refusing an unavailable backend before any rendezvous) are checked
// in this process.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/runtime/api/backend_registry.h"
#include "collie/runtime/api/distributed.h"
#include "collie/test/runtime/api/rank_runner.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

// Forwards every call to a socket group and counts it.
class CountingGroup final : public ProcessGroup {
 public:
  explicit CountingGroup(std::shared_ptr<ProcessGroup> inner)
      : ProcessGroup(inner->rank(), inner->size()), inner_(std::move(inner)) {}

  std::string backend_name() const override { return "wrapped-socket"; }
  std::shared_ptr<Work> all_reduce(TensorView tensor, const AllReduceOptions& options) override {
    ++all_reduces;
    return inner_->all_reduce(tensor, options);
  }
  std::shared_ptr<Work> broadcast(TensorView tensor, const BroadcastOptions& options) override {
    ++broadcasts;
    return inner_->broadcast(tensor, options);
  }
  std::shared_ptr<Work> barrier(const BarrierOptions& options) override {
    ++barriers;
    return inner_->barrier(options);
  }
  std::shared_ptr<Work> all_gather(TensorView output, TensorView input,
                                   const AllGatherOptions& options) override {
    ++all_gathers;
    return inner_->all_gather(output, input, options);
  }
  std::shared_ptr<Work> reduce_scatter(TensorView output, TensorView input,
                                       const ReduceScatterOptions& options) override {
    ++reduce_scatters;
    return inner_->reduce_scatter(output, input, options);
  }
  // The rest are forwarded uncounted (the test calls none of them).
  std::shared_ptr<Work> all_gather(std::span<const TensorView> outputs, TensorView input,
                                   const AllGatherOptions& options) override {
    return inner_->all_gather(outputs, input, options);
  }
  std::shared_ptr<Work> reduce_scatter(TensorView output, std::span<const TensorView> inputs,
                                       const ReduceScatterOptions& options) override {
    return inner_->reduce_scatter(output, inputs, options);
  }
  std::shared_ptr<Work> reduce(TensorView tensor, const ReduceOptions& options) override {
    return inner_->reduce(tensor, options);
  }
  std::shared_ptr<Work> gather(std::span<const TensorView> outputs, TensorView input,
                               const GatherOptions& options) override {
    return inner_->gather(outputs, input, options);
  }
  std::shared_ptr<Work> scatter(TensorView output, std::span<const TensorView> inputs,
                                const ScatterOptions& options) override {
    return inner_->scatter(output, inputs, options);
  }
  std::shared_ptr<Work> all_to_all(std::span<const TensorView> outputs,
                                   std::span<const TensorView> inputs,
                                   const AllToAllOptions& options) override {
    return inner_->all_to_all(outputs, inputs, options);
  }
  std::shared_ptr<Work> all_to_all_single(TensorView output, TensorView input,
                                          std::span<const size_t> output_split_sizes,
                                          std::span<const size_t> input_split_sizes,
                                          const AllToAllOptions& options) override {
    return inner_->all_to_all_single(output, input, output_split_sizes, input_split_sizes, options);
  }
  std::shared_ptr<Work> send(TensorView tensor, int dst, const P2POptions& options) override {
    return inner_->send(tensor, dst, options);
  }
  std::shared_ptr<Work> recv(TensorView tensor, int src, const P2POptions& options) override {
    return inner_->recv(tensor, src, options);
  }
  std::shared_ptr<Work> batch_isend_irecv(std::span<const P2POp> ops, Timeout timeout) override {
    return inner_->batch_isend_irecv(ops, timeout);
  }
  void monitored_barrier(const MonitoredBarrierOptions& options) override {
    inner_->monitored_barrier(options);
  }
  void shutdown(Timeout timeout) override {
    ++shutdowns;
    inner_->shutdown(timeout);
  }

  std::atomic<int> all_reduces{0}, broadcasts{0}, barriers{0}, all_gathers{0}, reduce_scatters{0},
      shutdowns{0};

 private:
  std::shared_ptr<ProcessGroup> inner_;
};

// The groups this process's "wrapped-socket" backend made, in order.
std::vector<std::shared_ptr<CountingGroup>>& made_groups() {
  static std::vector<std::shared_ptr<CountingGroup>> groups;
  return groups;
}

void register_wrapped_socket() {
  register_backend(
      "Wrapped-Socket",  // names are case-insensitive, as torch's
      BackendEntry{[](const BackendContext& context) -> std::shared_ptr<ProcessGroup> {
                     auto group = std::make_shared<CountingGroup>(create_backend("cpu", context));
                     made_groups().push_back(group);
                     return group;
                   },
                   [] { return std::string(); }});
}

// One rank: args {rank, world, rendezvous file}. Prints the wrapper's counts.
COLLIE_TEST_CHILD(wrapped_socket_rank) {
  register_wrapped_socket();
  const int rank = std::stoi(args.at(0)), world = std::stoi(args.at(1));
  init_process_group({.backend = "wrapped-socket",
                      .init_method = "file://" + args.at(2),
                      .world_size = world,
                      .rank = rank,
                      .timeout = std::chrono::seconds(60)});
  COLLIE_CHECK_EQ(get_backend(), "wrapped-socket");
  COLLIE_CHECK_EQ(made_groups().size(), 1u, "groups made by init_process_group");
  // The default group holds a backend per device type; host buffers go to
  // the wrapper, which the counts below show.
  CountingGroup& group = *made_groups()[0];
  // Counted from here: init_process_group may use the group itself.
  const int reduces0 = group.all_reduces, broadcasts0 = group.broadcasts,
            barriers0 = group.barriers, gathers0 = group.all_gathers;

  std::vector<float> x{1.0f + rank, 10.0f * (rank + 1)};
  all_reduce(view(x.data(), x.size()));
  COLLIE_CHECK(x[0] == 3.0f && x[1] == 30.0f, "all_reduce gave ", x[0], ", ", x[1]);
  std::vector<int64_t> b{rank == 1 ? 42 : -1};
  broadcast(view(b.data(), 1), 1);
  COLLIE_CHECK_EQ(b[0], 42, "broadcast from rank 1");
  std::vector<int32_t> mine{rank}, all(2, -1);
  all_gather(view(all.data(), 2), view(mine.data(), 1));
  COLLIE_CHECK(all[0] == 0 && all[1] == 1, "all_gather gave ", all[0], ", ", all[1]);
  barrier();
  std::printf("default group: all_reduce=%d broadcast=%d all_gather=%d barrier=%d\n",
              group.all_reduces - reduces0, group.broadcasts - broadcasts0,
              group.all_gathers - gathers0, group.barriers - barriers0);

  // new_group asks the registry too, by the name it is given.
  Group sub = new_group({0, 1}, kUnsetTimeout, "WRAPPED-SOCKET");
  COLLIE_CHECK_EQ(made_groups().size(), 2u, "groups made after new_group");
  COLLIE_CHECK_EQ(get_backend(sub), "wrapped-socket");
  std::vector<double> y{0.5 * (rank + 1)};
  all_reduce(view(y.data(), 1), ReduceOp::kMax, sub);
  COLLIE_CHECK(y[0] == 1.0, "all_reduce max in the sub-group gave ", y[0]);
  std::printf("sub-group: all_reduce=%d\n", made_groups()[1]->all_reduces.load());

  // The default group takes the sub-group with it.
  destroy_process_group();
  for (const auto& g : made_groups())
    COLLIE_CHECK(g->shutdowns > 0, "destroy_process_group did not shut a wrapper down");
  return 0;
}

}  // namespace

TEST_CASE("register_backend: init_process_group and new_group run a registered backend by name",
          "[registry]") {
  TempDir dir;
  auto outputs = run_ranks(2, [&](int rank) {
    return RankLaunch{
        child_argv("wrapped_socket_rank", {std::to_string(rank), "2", dir.file("rdzv")})};
  });
  for (const std::string& out : outputs) {
    INFO(out);
    CHECK_THAT(out, Contains("default group: all_reduce=1 broadcast=1 all_gather=1 barrier=1\n"));
    CHECK_THAT(out, Contains("sub-group: all_reduce=1\n"));
  }
}

TEST_CASE("register_backend: names are lower-cased and the availability probe is honoured",
          "[registry]") {
  register_wrapped_socket();
  const auto names = registered_backends();
  CHECK(std::find(names.begin(), names.end(), "wrapped-socket") != names.end());
  CHECK(std::find(names.begin(), names.end(), "cpu") != names.end());
  CHECK(is_backend_available("socket"));  // the cpu backend's old name
  CHECK(is_backend_available("WRAPPED-socket"));
  CHECK(parse_backend_spec("Wrapped-Socket").cpu == "wrapped-socket");

  // A backend that cannot run here is refused, with its reason, before any
  // rendezvous (nothing listens at the init method's address).
  bool created = false;
  register_backend("needs-hardware", BackendEntry{[&](const BackendContext&) {
                                                    created = true;
                                                    return std::shared_ptr<ProcessGroup>();
                                                  },
                                                  [] { return std::string("no frobnicator"); }});
  CHECK_FALSE(is_backend_available("needs-hardware"));
  CHECK(backend_unavailable_reason("needs-hardware") == "no frobnicator");
  const InitOptions options{.backend = "needs-hardware",
                            .init_method = "tcp://127.0.0.1:1",
                            .world_size = 2,
                            .rank = 1,
                            .timeout = std::chrono::seconds(5)};
  CHECK_THROWS_AS(init_process_group(options), BackendError);
  CHECK_THROWS_WITH(init_process_group(options),
                    Contains("backend \"needs-hardware\" cannot run here: no frobnicator"));
  CHECK_FALSE(created);
  CHECK_FALSE(is_initialized());

  // Registering a name again replaces the entry.
  register_backend("needs-hardware", BackendEntry{nullptr, [] { return std::string(); }});
  CHECK(is_backend_available("needs-hardware"));
  CHECK_THAT(backend_unavailable_reason("no-such-backend"),
             Contains("no backend named \"no-such-backend\"") && Contains("wrapped-socket"));
}
