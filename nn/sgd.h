// SGD with momentum, dampening, Nesterov and (coupled) weight decay, with
// torch.optim.SGD's formulas (1.13, per-parameter loop):
//   g = grad + weight_decay * p
//   buf = g on the first step, else momentum * buf + (1 - dampening) * g
//   g = nesterov ? g + momentum * buf : buf     (when momentum != 0)
//   p -= lr * g
#pragma once

#include "collie/nn/optimizer.h"

namespace collie::nn {

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class Sgd : public Optimizer {
 public:
  Sgd(std::vector<Parameter*> params, SgdOptions options);
  void step() override;
  void save_state(StateDict& out, const std::string& prefix = "optimizer.") const override;
  void load_state(const StateDict& in, const std::string& prefix = "optimizer.") override;

 private:
  SgdOptions options_;
  // Empty until the first step, as torch's momentum_buffer is None.
  std::vector<std::vector<float>> momentum_;
};

}  // namespace collie::nn
