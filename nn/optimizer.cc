#include "collie/nn/optimizer.h"

#include <cmath>
#include <numbers>

#include "collie/base/check.h"

namespace collie::nn {

Optimizer::Optimizer(std::vector<Parameter*> params, double lr)
    : params_(std::move(params)), lr_(lr) {
  COLLIE_ARG_CHECK(lr >= 0.0, "invalid learning rate ", lr);
  for (auto* p : params_) COLLIE_ARG_CHECK(p != nullptr, "null parameter given to an optimizer");
}

void Optimizer::zero_grad() {
  for (auto* p : params_) p->zero_grad();
}

void cosine_lr_schedule(Optimizer& optimizer, int64_t epoch, int64_t max_epoch, double init_lr,
                        double min_lr) {
  COLLIE_ARG_CHECK_GT(max_epoch, 0, "cosine_lr_schedule: max_epoch");
  const double ratio = static_cast<double>(epoch) / static_cast<double>(max_epoch);
  optimizer.set_lr((init_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * ratio)) + min_lr);
}

}  // namespace collie::nn
