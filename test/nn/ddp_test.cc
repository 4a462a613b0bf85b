// DistributedDataParallel over real processes and the cpu backend: N
// ranks training on shards of a global batch end with the parameters of one
// process training on the whole batch; buckets are c10d's; the first
// bucket's all_reduce starts while backward is still running; no_sync
// accumulation equals one large batch; mismatched models are refused.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <functional>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/nn/ddp.h"
#include "collie/nn/loss.h"
#include "collie/nn/recovery.h"
#include "collie/nn/sequential.h"
#include "collie/nn/sgd.h"
#include "collie/nn/state_dict.h"
#include "collie/runtime/api/distributed.h"
#include "collie/test/support/child.h"
#include "collie/test/support/nn_examples.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::nn;
using Catch::Contains;
using test::SpawnOptions;
using test::Subprocess;

namespace {

const std::vector<int64_t> kSizes{20, 32, 16, 5};
constexpr int64_t kGlobalBatch = 12;  // divisible by 1, 2, 3, 4
constexpr int kSteps = 5;
constexpr int kMicroBatches = 3;  // for the no_sync scenario

// Examples [begin, begin + count) of an endless deterministic dataset.
void make_examples(int64_t begin, int64_t count, Tensor& x, std::vector<int64_t>& labels) {
  test::make_examples(begin, count, kSizes.front(), kSizes.back(), x, labels);
}

Sequential make_model(uint64_t seed, std::vector<int64_t> sizes = kSizes) {
  return make_mlp<float>({.sizes = std::move(sizes), .seed = seed, .flatten = false});
}

Sgd make_optimizer(Module& m) {
  return Sgd(m.parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
}

// One training step's gradient on examples [begin, begin + count), scaled.
void accumulate(const std::function<const Tensor&(const Tensor&)>& forward,
                const std::function<void(const Tensor&)>& backward, int64_t begin, int64_t count,
                float scale) {
  Tensor x, grad;
  std::vector<int64_t> labels;
  make_examples(begin, count, x, labels);
  cross_entropy(forward(x), labels, &grad);
  grad.vector() *= scale;
  backward(grad);
}

// The reference: one process, whole global batches (or `micro` of them
// at once), no DDP.
Sequential train_reference(int micro) {
  Sequential model = make_model(100);
  Sgd opt = make_optimizer(model);
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    const int64_t count = kGlobalBatch * micro;
    accumulate([&](const Tensor& x) -> const Tensor& { return model.forward(x); },
               [&](const Tensor& g) { model.backward(g); }, step* count, count, 1.0f);
    opt.step();
  }
  return model;
}

std::vector<Subprocess> spawn_ranks(int world,
                                    const std::function<std::vector<std::string>(int)>& args) {
  std::vector<Subprocess> procs;
  for (int r = 0; r < world; ++r) {
    SpawnOptions options;
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                             "TORCHELASTIC_USE_AGENT_STORE"})
      options.env.emplace(name, std::nullopt);
    procs.push_back(Subprocess::spawn(test::child_argv("ddp_rank", args(r)), options));
  }
  return procs;
}

// Waits for every rank; fails with every rank's output unless all exit 0.
std::vector<std::string> wait_ranks(std::vector<Subprocess>& procs) {
  Deadline deadline(std::chrono::seconds(120));
  std::string report;
  bool ok = true;
  std::vector<std::string> outs;
  for (size_t r = 0; r < procs.size(); ++r) {
    auto status = procs[r].wait(deadline.remaining());
    ok = ok && status.ok();
    outs.push_back(procs[r].out());
    report += str_cat("--- rank ", r, ": ", status.describe(), "\n", procs[r].out(), procs[r].err(),
                      "\n");
  }
  INFO(report);
  REQUIRE(ok);
  return outs;
}

std::vector<std::string> run_ranks(int world, const std::string& scenario,
                                   const test::TempDir& dir) {
  auto procs = spawn_ranks(world, [&](int r) {
    return std::vector<std::string>{scenario, std::to_string(r), std::to_string(world),
                                    dir.file("rdzv"), dir.file(str_cat("rank", r, ".pth"))};
  });
  return wait_ranks(procs);
}

void check_close_to(Sequential& reference, const std::string& path) {
  auto dict = load_state_dict(path);
  for (auto& [name, p] : reference.named_parameters()) {
    auto got = dict.get_floats(name, p->shape());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO(path << " " << name << "[" << i << "]");
      CHECK(got[i] == Approx(p->data()[i]).epsilon(1e-5).margin(1e-6));
    }
  }
}

}  // namespace

// args: scenario, rank, world, rendezvous file, output file.
COLLIE_TEST_CHILD(ddp_rank) {
  const std::string scenario = args.at(0);
  const int rank = std::stoi(args.at(1)), world = std::stoi(args.at(2));
  init_process_group({.backend = "cpu",
                      .init_method = "file://" + args.at(3),
                      .world_size = world,
                      .rank = rank,
                      .timeout = std::chrono::seconds(60)});
  ProcessGroup& group = *get_default_group();
  int rc = 0;
  if (scenario == "mismatch") {
    // Rank 1's first layer is one unit wider.
    auto sizes = kSizes;
    if (rank == 1) sizes[1] += 1;
    Sequential model = make_model(rank, sizes);
    try {
      DistributedDataParallel ddp(model, group);
      std::printf("no error\n");
      rc = 1;
    } catch (const InvalidArgument& e) {
      std::printf("%s\n", e.what());
    }
  } else if (scenario == "shrink") {
    // Two steps on `world` ranks; then the last rank leaves and the others
    // shrink the group, move DDP to it and go on. New rank 0 plays a
    // survivor whose step in flight never completed (its state is behind
    // and wrong): the agreement makes the lowest rank with the most steps
    // (new rank 1) the leader, whose state everyone takes.
    Sequential model = make_model(100 + rank);
    Sgd opt = make_optimizer(model);
    DistributedDataParallel ddp(model, group);
    std::shared_ptr<ProcessGroup> holder = get_default_group();  // alive while DDP uses it
    int my_rank = rank, my_world = world;
    for (int step = 0; step < kSteps; ++step) {
      if (step == 2) {
        if (rank == world - 1) {
          std::fflush(stdout);
          std::_Exit(0);  // gone, without a word
        }
        shrink_group({world - 1}, {}, {.timeout = std::chrono::seconds(30)});
        std::shared_ptr<ProcessGroup> next = get_default_group();
        ddp.set_process_group(*next);
        holder = next;
        COLLIE_CHECK(&ddp.group() == next.get(), "DDP is not on the new group");
        my_rank = next->rank();
        my_world = next->size();
        int64_t progress = step;
        if (my_rank == 0) {
          progress = step - 1;
          for (auto& [name, p] : model.named_parameters()) p->data()[0] += 1.0f;
        }
        const Agreement a = agree_on_progress(*next, progress);
        COLLIE_CHECK(a.progress == step && a.leader == 1, "agreement: progress ", a.progress,
                     " leader ", a.leader);
        broadcast_training_state(*next, a.leader, model, opt);
      }
      // The same global batch as ever, over however many ranks there are.
      const int64_t shard = kGlobalBatch / my_world;
      opt.zero_grad();
      accumulate([&](const Tensor& x) -> const Tensor& { return ddp.forward(x); },
                 [&](const Tensor& g) { ddp.backward(g); }, step* kGlobalBatch + my_rank * shard,
                 shard, 1.0f);
      opt.step();
    }
    StateDict dict;
    save_module_state(model, dict);
    save_state_dict(dict, args.at(4));
  } else {
    // Different seeds on purpose: DDP's broadcast makes rank 0's weights win.
    Sequential model = make_model(100 + rank);
    Sgd opt = make_optimizer(model);
    DdpOptions options;
    if (scenario == "buckets") options = {.bucket_cap_mb = 2e-3, .first_bucket_cap_mb = 1e-3};
    DistributedDataParallel ddp(model, group, options);
    const int64_t shard = kGlobalBatch / world;
    const int micro = scenario == "no_sync" ? kMicroBatches : 1;
    for (int step = 0; step < kSteps; ++step) {
      opt.zero_grad();
      const int64_t step_begin = step * kGlobalBatch * micro;
      for (int m = 0; m < micro; ++m) {
        // The last micro-batch synchronises; the others accumulate locally.
        std::optional<DistributedDataParallel::NoSyncGuard> guard;
        if (m + 1 < micro) guard.emplace(ddp.no_sync());
        // Micro-batch m of the big batch, split across ranks.
        accumulate([&](const Tensor& x) -> const Tensor& { return ddp.forward(x); },
                   [&](const Tensor& g) { ddp.backward(g); },
                   step_begin + m * kGlobalBatch + rank * shard, shard,
                   1.0f / static_cast<float>(micro));
      }
      if (scenario == "buckets") {
        auto& buckets = ddp.reducer().buckets();
        COLLIE_CHECK_EQ(buckets.size(), 2u);
        // The first bucket went out while backward was still computing.
        COLLIE_CHECK(buckets[0].launched_at < ddp.last_backward_compute_end(),
                     "first bucket launched after backward");
        COLLIE_CHECK(buckets[1].launched_at >= buckets[0].launched_at);
      }
      opt.step();
    }
    StateDict dict;
    save_module_state(model, dict);
    save_state_dict(dict, args.at(4));
  }
  destroy_process_group();
  return rc;
}

TEST_CASE("bucket assignment follows c10d: reverse order, first bucket capped small", "[ddp]") {
  // 4-byte units for readability: sizes in bytes.
  std::vector<size_t> bytes{400, 40, 800, 80, 200, 20};
  std::vector<size_t> reverse{5, 4, 3, 2, 1, 0};
  CHECK(compute_bucket_assignment(bytes, reverse, {100, 900}) ==
        std::vector<std::vector<size_t>>{{5, 4}, {3, 2, 1}, {0}});
  CHECK(compute_bucket_assignment(bytes, reverse, {10000, 10000}) ==
        std::vector<std::vector<size_t>>{{5, 4, 3, 2, 1, 0}});
  // A bucket closes as soon as it reaches its cap, so one big tensor is alone.
  CHECK(compute_bucket_assignment(bytes, reverse, {1, 1}) ==
        std::vector<std::vector<size_t>>{{5}, {4}, {3}, {2}, {1}, {0}});
  CHECK(compute_bucket_assignment({}, {}, {1}).empty());
}

TEST_CASE("DDP's default buckets for an MLP, with gradients living inside them", "[ddp]") {
  test::TempDir dir;
  init_process_group(
      {.backend = "cpu", .init_method = "file://" + dir.file("rdzv"), .world_size = 1, .rank = 0});
  {
    // Reverse order: 6.bias, 6.weight, 4.bias, 4.weight (1 MiB) close the
    // first bucket at 1,071,144 bytes; the rest fit in one 25 MiB bucket.
    Sequential model = make_mlp<float>({.sizes = {256, 512, 512, 512, 10}, .flatten = false});
    DistributedDataParallel ddp(model, *get_default_group());
    auto& buckets = ddp.reducer().buckets();
    REQUIRE(buckets.size() == 2);
    auto names = model.named_parameters();
    auto names_of = [&](const Reducer::Bucket& b) {
      std::vector<std::string> out;
      for (size_t p : b.params) out.push_back(names[p].first);
      return out;
    };
    CHECK(names_of(buckets[0]) ==
          std::vector<std::string>{"6.bias", "6.weight", "4.bias", "4.weight"});
    CHECK(names_of(buckets[1]) ==
          std::vector<std::string>{"2.bias", "2.weight", "0.bias", "0.weight"});
    for (auto& b : buckets)
      for (size_t k = 0; k < b.params.size(); ++k)
        CHECK(names[b.params[k]].second->grad() == b.data.data() + b.offsets[k]);
    // Smaller caps: [6.*, 4.*] reach 0.25 MiB, [2.*] and [0.*] each reach 0.5 MiB.
    Sequential small = make_mlp<float>({.sizes = {256, 512, 512, 512, 10}, .flatten = false});
    DistributedDataParallel ddp_small(small, *get_default_group(),
                                      {.bucket_cap_mb = 0.5, .first_bucket_cap_mb = 0.25});
    CHECK(ddp_small.reducer().buckets().size() == 3);
  }
  // Once DDP is gone the gradients are the parameters' own again.
  destroy_process_group();
}

TEST_CASE("DDP on N ranks equals one process on the whole batch", "[ddp]") {
  Sequential reference = train_reference(1);
  for (int world : {2, 3, 4}) {
    INFO("world " << world);
    test::TempDir dir;
    run_ranks(world, "train", dir);
    for (int r = 0; r < world; ++r) check_close_to(reference, dir.file(str_cat("rank", r, ".pth")));
    // Replicas are identical bit for bit, not just close.
    auto zero = load_state_dict(dir.file("rank0.pth"));
    for (int r = 1; r < world; ++r) {
      auto other = load_state_dict(dir.file(str_cat("rank", r, ".pth")));
      for (auto& [name, p] : reference.named_parameters())
        CHECK(other.get_floats(name, p->shape()) == zero.get_floats(name, p->shape()));
    }
  }
}

TEST_CASE("DDP with several buckets launches the first before backward ends, same result",
          "[ddp]") {
  Sequential reference = train_reference(1);
  test::TempDir dir;
  run_ranks(2, "buckets", dir);
  for (int r = 0; r < 2; ++r) check_close_to(reference, dir.file(str_cat("rank", r, ".pth")));
}

TEST_CASE("no_sync accumulation equals one large batch", "[ddp]") {
  Sequential reference = train_reference(kMicroBatches);
  test::TempDir dir;
  run_ranks(2, "no_sync", dir);
  for (int r = 0; r < 2; ++r) check_close_to(reference, dir.file(str_cat("rank", r, ".pth")));
}

TEST_CASE(
    "DDP moves to the survivors' group after a rank leaves, and the furthest survivor's state wins",
    "[ddp]") {
  // 4 ranks for two steps, then 3 (shards of 3, then of 4, of the same
  // global batches): the one-process reference all the same.
  Sequential reference = train_reference(1);
  test::TempDir dir;
  run_ranks(4, "shrink", dir);
  CHECK_FALSE(std::filesystem::exists(dir.file("rank3.pth")));
  for (int r = 0; r < 3; ++r) check_close_to(reference, dir.file(str_cat("rank", r, ".pth")));
  auto zero = load_state_dict(dir.file("rank0.pth"));
  for (int r = 1; r < 3; ++r) {
    auto other = load_state_dict(dir.file(str_cat("rank", r, ".pth")));
    for (auto& [name, p] : reference.named_parameters())
      CHECK(other.get_floats(name, p->shape()) == zero.get_floats(name, p->shape()));
  }
}

TEST_CASE("DDP refuses replicas whose parameter shapes differ, naming both ranks", "[ddp]") {
  test::TempDir dir;
  auto outs = run_ranks(3, "mismatch", dir);
  for (const auto& out : outs)
    CHECK_THAT(
        out,
        Contains("parameter 0 ('0.weight') has shape [32, 20] on rank 0 but [33, 20] on rank 1"));
}

namespace {

// A Linear whose bias never gets a gradient: what an unused parameter looks
// like to the reducer.
class ForgetfulLinear : public Module {
 public:
  ForgetfulLinear() : inner_(3, 2, generator_) {}
  std::string describe() const override { return "ForgetfulLinear"; }
  void forward(const Tensor& in, Tensor& out) override { inner_.forward(in, out); }
  void backward(const Tensor&, const Tensor&, const Tensor&, Tensor*) override {
    inner_.weight().mark_grad_ready();
  }
  std::vector<std::pair<std::string, Parameter*>> named_parameters() override {
    return inner_.named_parameters();
  }

 private:
  Generator generator_;
  Linear inner_;
};

}  // namespace

TEST_CASE("DDP names a parameter that got no gradient, and recovers for the next step", "[ddp]") {
  test::TempDir dir;
  init_process_group(
      {.backend = "cpu", .init_method = "file://" + dir.file("rdzv"), .world_size = 1, .rank = 0});
  {
    ForgetfulLinear model;
    DistributedDataParallel ddp(model, *get_default_group(), {.first_bucket_cap_mb = 1e-6});
    REQUIRE(ddp.reducer().buckets().size() == 2);  // bias, then weight
    Tensor x({4, 3}), g({4, 2});
    ddp.forward(x);
    CHECK_THROWS_WITH(ddp.backward(g),
                      Contains("without gradients for 1 parameter(s): bias (index 1)"));
    // An evaluation forward without backward does not wedge the next step.
    model.eval();
    ddp.forward(x);
    model.train();
    ddp.forward(x);
    CHECK_THROWS_AS(ddp.backward(g), Error);
  }
  destroy_process_group();
}
