// CudaMlp against the Eigen MLP: the same initial parameters and batches give
// the same logits, loss, gradients and, after SGD steps, parameters, to
// float32 tolerance (cuBLAS sums in another order). Exits 77 without a GPU.
#include <catch2/catch.hpp>

#include "collie/nn/adamw.h"
#include "collie/nn/cuda/cuda_adamw.h"
#include "collie/nn/cuda/cuda_mlp.h"
#include "collie/nn/cuda/cuda_sgd.h"
#include "collie/nn/loss.h"
#include "collie/nn/sequential.h"
#include "collie/nn/state_dict.h"
#include "collie/runtime/cuda/cuda_device.h"
#include "collie/test/support/catch_session.h"
#include "collie/test/support/skip.h"

using namespace collie;
using namespace collie::nn;

namespace {

void make_batch(uint64_t seed, int64_t batch, Tensor& x, std::vector<int64_t>& labels) {
  x.resize({batch, 1, 28, 28});
  Generator g(seed);
  for (size_t i = 0; i < x.numel(); ++i) x[i] = g.uniform(-1.0f, 1.0f);
  labels.resize(batch);
  for (int64_t i = 0; i < batch; ++i) labels[i] = (seed + i) % 10;
}

void check_close(std::span<const float> got, std::span<const float> want, const char* what) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != Approx(want[i]).epsilon(1e-4).margin(1e-5)) ++bad;
  INFO(what << ": " << bad << " of " << got.size() << " elements differ");
  CHECK(bad == 0);
}

// Every parameter's gradient of `model`, concatenated in order.
std::vector<float> host_gradients(Sequential& model) {
  std::vector<float> grads;
  for (auto* p : model.parameters()) grads.insert(grads.end(), p->grad(), p->grad() + p->numel());
  return grads;
}

// The parameters `gpu` holds equal `cpu`'s (an MLP made with `options`);
// returns them, copied into a host model.
Sequential check_same_parameters(const nn::cuda::CudaMlp& gpu, Sequential& cpu,
                                 const MlpOptions& options) {
  Sequential back = make_mlp<float>({.sizes = options.sizes, .seed = 99});
  gpu.copy_parameters_to(back);
  for (size_t k = 0; k < cpu.parameters().size(); ++k)
    check_close(back.parameters()[k]->value().span(), cpu.parameters()[k]->value().span(),
                "parameters");
  return back;
}

}  // namespace

TEST_CASE("CudaMlp forward, backward and SGD match the Eigen MLP") {
  const MlpOptions options{.sizes = {784, 256, 128, 10}, .seed = 3};
  Sequential cpu = make_mlp<float>(options);
  nn::cuda::CudaMlp gpu(cpu, 0);
  const SgdOptions sgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4};
  Sgd cpu_opt(cpu.parameters(), sgd);
  nn::cuda::CudaSgd gpu_opt(gpu, sgd);
  for (int step = 0; step < 4; ++step) {
    Tensor x, grad, logits;
    std::vector<int64_t> labels;
    make_batch(step, 48 + step, x, labels);  // batch sizes change: buffers grow
    gpu.forward(x, logits);
    check_close(logits.span(), cpu.forward(x).span(), "logits");
    cpu.zero_grad();
    gpu.zero_grad();
    const float cpu_loss = cross_entropy(cpu.forward(x), labels, &grad);
    cpu.backward(grad);
    const float gpu_loss = gpu.forward_backward(x, labels);
    CHECK(gpu_loss == Approx(cpu_loss).epsilon(1e-5));
    check_close(gpu.gradients_to_host(), host_gradients(cpu), "gradients");
    cpu_opt.step();
    gpu_opt.step();
  }
  check_same_parameters(gpu, cpu, options);
  CHECK(gpu.gradients().device == Device::cuda(0));
}

TEST_CASE(
    "CudaMlp backward from the logits' gradient and AdamW match the Eigen MLP and nn::AdamW") {
  // The path DDP and blip_train --device cuda take: forward to host logits,
  // the loss on the host, backward from its gradient, AdamW on the device.
  const MlpOptions options{.sizes = {784, 64, 10}, .seed = 5};
  Sequential cpu = make_mlp<float>(options);
  nn::cuda::CudaMlp gpu(cpu, 0);
  const AdamWOptions adam{.lr = 1e-3, .weight_decay = 0.05};
  AdamW cpu_opt(cpu.parameters(), adam);
  nn::cuda::CudaAdamW gpu_opt(gpu, adam);
  for (int step = 0; step < 3; ++step) {
    Tensor x, grad, gpu_logits, gpu_grad;
    std::vector<int64_t> labels;
    make_batch(10 + step, 32, x, labels);
    cpu.zero_grad();
    gpu.zero_grad();
    cross_entropy(cpu.forward(x), labels, &grad);
    cpu.backward(grad);
    gpu.forward(x, gpu_logits);
    cross_entropy(gpu_logits, labels, &gpu_grad);
    gpu.backward(x, gpu_logits, gpu_grad);
    check_close(gpu.gradients_to_host(), host_gradients(cpu), "gradients");
    cpu_opt.step();
    gpu_opt.step();
  }
  Sequential back = check_same_parameters(gpu, cpu, options);
  // The device state under AdamW's keys loads into a host AdamW (and back).
  StateDict from_gpu, from_cpu;
  gpu_opt.save_state(from_gpu, "optimizer.");
  cpu_opt.save_state(from_cpu, "optimizer.");
  AdamW restored(back.parameters(), adam);
  restored.load_state(from_gpu, "optimizer.");
  for (size_t k = 0; k < cpu.parameters().size(); ++k) {
    CHECK(restored.step_count(k) == 3);
    const std::string key = "optimizer.state." + std::to_string(k) + ".exp_avg";
    const Shape& shape = cpu.parameters()[k]->shape();
    check_close(from_gpu.get_floats(key, shape), from_cpu.get_floats(key, shape), "exp_avg");
  }
  gpu_opt.load_state(from_cpu, "optimizer.");
  CHECK(gpu_opt.lr() == cpu_opt.lr());
}

TEST_CASE("CudaMlp refuses layers it does not implement") {
  Sequential with_dropout = make_mlp<float>({.sizes = {4, 3, 2}, .dropout = 0.5});
  CHECK_THROWS_AS(nn::cuda::CudaMlp(with_dropout, 0), InvalidArgument);
}

int main(int argc, char** argv) {
  if (collie::cuda::device_count() == 0)
    collie::test::skip_gpu_test("no CUDA device: " + collie::cuda::no_device_reason());
  return collie::test::run_catch_session(argc, argv);
}
