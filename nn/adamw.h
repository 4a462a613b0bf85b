// AdamW (decoupled weight decay) with torch.optim.AdamW's defaults and
// formulas (1.13, per-parameter loop, amsgrad off):
//   t += 1;  p *= 1 - lr * weight_decay
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
//   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// The bias corrections are computed in double, as torch's Python code does.
#pragma once

#include <cstdint>

#include "collie/nn/optimizer.h"

namespace collie::nn {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Parameter*> params, AdamWOptions options = {});
  void step() override;
  void save_state(StateDict& out, const std::string& prefix = "optimizer.") const override;
  void load_state(const StateDict& in, const std::string& prefix = "optimizer.") override;
  int64_t step_count(size_t param) const { return steps_.at(param); }

 private:
  AdamWOptions options_;
  std::vector<int64_t> steps_;
  std::vector<std::vector<float>> exp_avg_, exp_avg_sq_;
};

}  // namespace collie::nn
