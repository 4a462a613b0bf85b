// One rank of the recovery benchmark (recovery_bench.py): trains the main
// job's MLP (784-256-128-10, SGD) with DDP on synthetic batches, and when a
// rank dies it does what a job that keeps training does: shrink the group to
// the survivors, wrap the model again, take rank 0's weights, and go on.
// At every step boundary the members admit a replacement, if one asked, and
// hand it the weights and the step. Every line it prints is for the driver:
//   ready rank=R pid=P                        once under way
//   first_step_ns=T step=K world=W            a replacement's first step
//   recovered_ns=T step=K world=W             a survivor's first step after a failure
//   done rank=R step=K world=W checksum=C     at the end
// T is CLOCK_MONOTONIC (the driver's time.monotonic_ns()).
//
//   collie-recovery-worker --init file:///tmp/x --rank 0 --world 4 --steps 400 [--join]
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "collie/base/error.h"
#include "collie/nn/ddp.h"
#include "collie/nn/loss.h"
#include "collie/nn/sequential.h"
#include "collie/nn/sgd.h"
#include "collie/runtime/api/distributed.h"

using namespace collie;

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The weights and the step, from rank 0 to everyone (a joiner, or
// survivors whose last step did not complete everywhere).
void sync_state(nn::Sequential& model, double* step) {
  auto group = get_default_group();
  for (auto* p : model.parameters()) group->broadcast(view(p->data(), p->numel()))->wait();
  group->broadcast(view(step, 1))->wait();
}

}  // namespace

int main(int argc, char** argv) try {
  std::string init;
  int rank = -1, world = -1;
  double steps = 400;
  bool join = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--init")
      init = next();
    else if (a == "--rank")
      rank = std::stoi(next());
    else if (a == "--world")
      world = std::stoi(next());
    else if (a == "--steps")
      steps = std::stod(next());
    else if (a == "--join")
      join = true;
    else
      throw InvalidArgument("collie-recovery-worker: unknown argument " + std::string(a));
  }
  init_process_group({.backend = "cpu",
                      .init_method = init,
                      .world_size = world,
                      .rank = rank,
                      .timeout = std::chrono::seconds(60),
                      .join = join});
  nn::Sequential model = nn::make_mlp<float>({.sizes = {784, 256, 128, 10}, .seed = 1});
  nn::Sgd optimizer(model.parameters(), {.lr = 0.05});
  auto ddp = std::make_unique<nn::DistributedDataParallel>(model, *get_default_group());
  double step = 0;
  if (join) sync_state(model, &step);
  std::printf("ready rank=%d pid=%d\n", get_rank(), static_cast<int>(getpid()));
  std::fflush(stdout);

  // A fixed synthetic batch per rank: the point is the recovery, not the data.
  const size_t batch = 64;
  nn::Tensor x({batch, 784}), grad;
  std::vector<int64_t> labels(batch);
  for (size_t i = 0; i < x.numel(); ++i) x[i] = static_cast<float>((i * 37 + rank) % 255) / 255.f;
  for (size_t i = 0; i < batch; ++i) labels[i] = static_cast<int64_t>((i + rank) % 10);

  const char* announce = join ? "first_step_ns" : nullptr;
  while (step < steps) {
    try {
      for (auto* p : model.parameters()) p->zero_grad();
      nn::cross_entropy(ddp->forward(x), labels, &grad);
      ddp->backward(grad);
      optimizer.step();
      step += 1;
      if (announce) {
        std::printf("%s=%lld step=%.0f world=%d\n", announce, static_cast<long long>(now_ns()),
                    step, get_world_size());
        std::fflush(stdout);
        announce = nullptr;
      }
      if (admit_joiners() > 0) {
        // The old wrapper lets go of the gradients before the new one takes them.
        ddp.reset();
        ddp = std::make_unique<nn::DistributedDataParallel>(model, *get_default_group());
        sync_state(model, &step);
      }
    } catch (const Error& e) {
      // A rank died: go on without it. Its step may have completed on some
      // survivors only, so everyone takes rank 0's weights and step.
      ddp.reset();
      shrink_group({}, {}, {.timeout = std::chrono::seconds(30)});
      ddp = std::make_unique<nn::DistributedDataParallel>(model, *get_default_group());
      sync_state(model, &step);
      announce = "recovered_ns";
    }
  }
  double checksum = 0;
  for (auto* p : model.parameters())
    for (size_t i = 0; i < p->numel(); ++i) checksum += p->data()[i];
  std::printf("done rank=%d step=%.0f world=%d checksum=%.6f\n", get_rank(), step, get_world_size(),
              checksum);
  std::fflush(stdout);
  destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "collie-recovery-worker: %s\n", e.what());
  return 1;
}
