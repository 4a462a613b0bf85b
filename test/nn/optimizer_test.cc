// Optimizers against torch 1.13: the same parameters and gradient sequence
// go through collie's and torch's SGD/AdamW, and the parameters after every
// step must agree to float32 rounding. Plus the cosine schedule and the
// optimizer state round trip.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <numbers>

#include "collie/base/str_cat.h"
#include "collie/nn/adamw.h"
#include "collie/nn/sgd.h"
#include "collie/test/nn/torch_helper.h"

using namespace collie;
using namespace collie::nn;

namespace {

constexpr int kSteps = 5;
constexpr int kNumel = 12;

// Deterministic values both languages compute with the same libm calls.
float initial_value(int i) { return static_cast<float>(0.1 * i - 0.5); }
float gradient(int i, int t) { return static_cast<float>(std::sin(0.37 * i + 1.3 * t)); }

struct Config {
  std::string name;
  std::string torch_ctor;  // Python expression building the optimizer over [p]
  std::function<std::unique_ptr<Optimizer>(std::vector<Parameter*>)> make;
};

std::vector<Config> configs() {
  return {
      {"sgd", "torch.optim.SGD([p], lr=0.1)",
       [](auto ps) { return std::make_unique<Sgd>(ps, SgdOptions{.lr = 0.1}); }},
      {"sgd momentum+wd", "torch.optim.SGD([p], lr=0.05, momentum=0.9, weight_decay=0.01)",
       [](auto ps) {
         return std::make_unique<Sgd>(
             ps, SgdOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01});
       }},
      {"sgd dampening", "torch.optim.SGD([p], lr=0.05, momentum=0.8, dampening=0.3)",
       [](auto ps) {
         return std::make_unique<Sgd>(ps,
                                      SgdOptions{.lr = 0.05, .momentum = 0.8, .dampening = 0.3});
       }},
      {"sgd nesterov",
       "torch.optim.SGD([p], lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.001)",
       [](auto ps) {
         return std::make_unique<Sgd>(
             ps, SgdOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.001, .nesterov = true});
       }},
      {"adamw defaults", "torch.optim.AdamW([p])",
       [](auto ps) { return std::make_unique<AdamW>(ps); }},
      {"adamw custom",
       "torch.optim.AdamW([p], lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05)",
       [](auto ps) {
         return std::make_unique<AdamW>(
             ps, AdamWOptions{
                     .lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.05});
       }},
  };
}

}  // namespace

TEST_CASE("SGD and AdamW follow torch 1.13 step by step") {
  std::string script = str_cat(R"(
import math, torch
def run(make):
    p = torch.nn.Parameter(torch.tensor([0.1 * i - 0.5 for i in range()",
                               kNumel, R"()], dtype=torch.float32))
    opt = make(p)
    for t in range()",
                               kSteps, R"():
        p.grad = torch.tensor([math.sin(0.37 * i + 1.3 * t) for i in range()",
                               kNumel, R"()], dtype=torch.float32)
        opt.step()
        print(' '.join(repr(v) for v in p.detach().tolist()))
)");
  for (const auto& c : configs()) script += str_cat("run(lambda p: ", c.torch_ctor, ")\n");
  auto out = test::run_torch(script);
  auto rows = test::parse_float_rows(out);
  REQUIRE(rows.size() == configs().size() * kSteps);
  size_t row = 0;
  for (const auto& c : configs()) {
    Parameter p("p", {kNumel});
    for (int i = 0; i < kNumel; ++i) p.data()[i] = initial_value(i);
    auto opt = c.make({&p});
    for (int t = 0; t < kSteps; ++t, ++row) {
      for (int i = 0; i < kNumel; ++i) p.grad()[i] = gradient(i, t);
      opt->step();
      for (int i = 0; i < kNumel; ++i) {
        INFO(c.name << " step " << t << " element " << i);
        CHECK(p.data()[i] == Approx(rows[row][i]).epsilon(2e-6).margin(1e-7));
      }
    }
  }
}

TEST_CASE("cosine_lr_schedule is BLIP's formula") {
  Parameter p("p", {1});
  Sgd opt({&p}, {.lr = 1.0});
  cosine_lr_schedule(opt, 0, 10, 3e-4, 1e-6);
  CHECK(opt.lr() == Approx(3e-4));
  cosine_lr_schedule(opt, 5, 10, 3e-4, 1e-6);
  CHECK(opt.lr() == Approx((3e-4 - 1e-6) * 0.5 + 1e-6));
  cosine_lr_schedule(opt, 10, 10, 3e-4, 1e-6);
  CHECK(opt.lr() == Approx(1e-6));
  cosine_lr_schedule(opt, 3, 10, 0.1, 0.0);
  CHECK(opt.lr() == Approx(0.1 * 0.5 * (1 + std::cos(std::numbers::pi * 0.3))));
  CHECK_THROWS_AS(cosine_lr_schedule(opt, 1, 0, 0.1, 0.0), InvalidArgument);
}

TEST_CASE("optimizer state round-trips: a resumed optimizer continues identically") {
  for (const auto& c : configs()) {
    INFO(c.name);
    Parameter a("p", {kNumel}), b("p", {kNumel});
    for (int i = 0; i < kNumel; ++i) a.data()[i] = b.data()[i] = initial_value(i);
    auto opt_a = c.make({&a});
    for (int t = 0; t < 3; ++t) {
      for (int i = 0; i < kNumel; ++i) a.grad()[i] = gradient(i, t);
      opt_a->step();
    }
    StateDict state;
    opt_a->save_state(state);
    auto restored = parse_state_dict(serialize_state_dict(state));
    std::copy_n(a.data(), kNumel, b.data());
    auto opt_b = c.make({&b});
    opt_b->load_state(restored);
    for (int t = 3; t < 6; ++t) {
      for (int i = 0; i < kNumel; ++i) a.grad()[i] = b.grad()[i] = gradient(i, t);
      opt_a->step();
      opt_b->step();
    }
    for (int i = 0; i < kNumel; ++i) CHECK(a.data()[i] == b.data()[i]);
  }
  // A state for another shape is refused with the key named.
  Parameter small("p", {3});
  AdamW opt({&small});
  StateDict state;
  Parameter big("p", {kNumel});
  AdamW other({&big});
  other.save_state(state);
  CHECK_THROWS_WITH(opt.load_state(state), Catch::Contains("optimizer.state.0.exp_avg"));
}
