// Optimizer: updates a model's float32 parameters from their gradients.
// One parameter group with one learning rate, which is what BLIP's loops
// touch (cosine_lr_schedule sets every group's lr to the same value).
#pragma once

#include <string>
#include <vector>

#include "collie/nn/parameter.h"
#include "collie/nn/state_dict.h"

namespace collie::nn {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Parameter*> params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual void step() = 0;
  void zero_grad();

  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  const std::vector<Parameter*>& params() const { return params_; }

  // The per-parameter state (momentum buffers, Adam moments, step counts)
  // and the learning rate, under "<prefix>..." keys; load checks every
  // buffer's size against the parameter it belongs to.
  virtual void save_state(StateDict& out, const std::string& prefix = "optimizer.") const = 0;
  virtual void load_state(const StateDict& in, const std::string& prefix = "optimizer.") = 0;

 protected:
  std::vector<Parameter*> params_;
  double lr_;
};

// BLIP's cosine_lr_schedule: lr = (init_lr - min_lr) * 0.5 * (1 + cos(pi *
// epoch / max_epoch)) + min_lr, set on the optimizer.
void cosine_lr_schedule(Optimizer& optimizer, int64_t epoch, int64_t max_epoch, double init_lr,
                        double min_lr);

}  // namespace collie::nn
