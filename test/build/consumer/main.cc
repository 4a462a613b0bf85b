// Uses installed collie headers and libraries from another project: a store,
// a process group of one, and nn/ (Eigen through collie's package config):
// an MLP trained a few steps with DistributedDataParallel. It has a
// base/logging.h of its own, first on its include path: collie's headers,
// all under collie/, do not collide with it.
#include <cstdio>
#include <memory>
#include <vector>

#include "base/logging.h"  // the consumer's own

#include <collie/nn/ddp.h>
#include <collie/nn/generator.h>
#include <collie/nn/loss.h>
#include <collie/nn/sequential.h>
#include <collie/nn/sgd.h>
#include <collie/rendezvous/hash_store.h>
#include <collie/runtime/api/build_info.h>
#include <collie/runtime/api/distributed.h>

int main() {
  LOG("start");
  std::printf("%s\n", collie::build_info().c_str());
  auto store = std::make_shared<collie::HashStore>();
  store->set("hello", "world");
  store->add("counter", 2);
  const int64_t counter = store->add("counter", 3);
  std::printf("store ok: value=%s counter=%lld\n", collie::to_string(store->get("hello")).c_str(),
              static_cast<long long>(counter));

  collie::init_process_group({.backend = "cpu", .world_size = 1, .rank = 0, .store = store});
  auto model = collie::nn::make_mlp<float>({.sizes = {8, 16, 3}, .seed = 1});
  collie::nn::DistributedDataParallel ddp(model, *collie::get_default_group());
  collie::nn::Sgd sgd(model.parameters(), {.lr = 0.5});
  collie::nn::Tensor x({12, 8}), grad;
  std::vector<int64_t> labels(12);
  collie::nn::Generator g(7);
  for (size_t i = 0; i < x.numel(); ++i) x[i] = g.uniform(-1.0f, 1.0f);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 3);
  float first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    sgd.zero_grad();
    const auto& logits = ddp.forward(x);
    last = collie::nn::cross_entropy(logits, labels, &grad);
    if (step == 0) first = last;
    ddp.backward(grad);
    sgd.step();
  }
  collie::destroy_process_group();
  std::printf("nn ok: loss %.3f -> %.3f %s\n", first, last, last < first ? "decreased" : "DID NOT");
  return last < first ? 0 : 1;
}
