#include "collie/nn/sgd.h"

#include "collie/base/check.h"
#include "collie/base/str_cat.h"

namespace collie::nn {

Sgd::Sgd(std::vector<Parameter*> params, SgdOptions options)
    : Optimizer(std::move(params), options.lr), options_(options), momentum_(params_.size()) {
  COLLIE_ARG_CHECK(options.momentum >= 0.0, "invalid momentum ", options.momentum);
  COLLIE_ARG_CHECK(options.weight_decay >= 0.0, "invalid weight_decay ", options.weight_decay);
  COLLIE_ARG_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
                   "Nesterov momentum requires a momentum and zero dampening");
}

void Sgd::step() {
  const float lr = static_cast<float>(lr_);
  const float wd = static_cast<float>(options_.weight_decay);
  const float mom = static_cast<float>(options_.momentum);
  const float keep = static_cast<float>(1.0 - options_.dampening);
  for (size_t k = 0; k < params_.size(); ++k) {
    Parameter& p = *params_[k];
    float* w = p.data();
    const float* grad = p.grad();
    std::vector<float>& buf = momentum_[k];
    const bool first = buf.empty();
    if (mom != 0.0f && first) buf.resize(p.numel());
    for (size_t i = 0; i < p.numel(); ++i) {
      float g = grad[i];
      if (wd != 0.0f) g = g + wd * w[i];
      if (mom != 0.0f) {
        buf[i] = first ? g : buf[i] * mom + keep * g;
        g = options_.nesterov ? g + mom * buf[i] : buf[i];
      }
      w[i] = w[i] - lr * g;
    }
  }
}

void Sgd::save_state(StateDict& out, const std::string& prefix) const {
  out.set_double(prefix + "lr", lr_);
  for (size_t k = 0; k < params_.size(); ++k)
    if (!momentum_[k].empty())
      out.set_floats(str_cat(prefix, "state.", k, ".momentum_buffer"), params_[k]->shape(),
                     momentum_[k]);
}

void Sgd::load_state(const StateDict& in, const std::string& prefix) {
  lr_ = in.get_double(prefix + "lr");
  for (size_t k = 0; k < params_.size(); ++k) {
    const std::string key = str_cat(prefix, "state.", k, ".momentum_buffer");
    if (in.contains(key))
      momentum_[k] = in.get_floats(key, params_[k]->shape());
    else
      momentum_[k].clear();
  }
}

}  // namespace collie::nn
