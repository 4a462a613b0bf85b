#include "collie/nn/adamw.h"

#include <cmath>

#include "collie/base/check.h"
#include "collie/base/str_cat.h"

namespace collie::nn {

AdamW::AdamW(std::vector<Parameter*> params, AdamWOptions options)
    : Optimizer(std::move(params), options.lr),
      options_(options),
      steps_(params_.size(), 0),
      exp_avg_(params_.size()),
      exp_avg_sq_(params_.size()) {
  COLLIE_ARG_CHECK(options.eps >= 0.0, "invalid epsilon ", options.eps);
  COLLIE_ARG_CHECK(options.beta1 >= 0.0 && options.beta1 < 1.0, "invalid beta1 ", options.beta1);
  COLLIE_ARG_CHECK(options.beta2 >= 0.0 && options.beta2 < 1.0, "invalid beta2 ", options.beta2);
  COLLIE_ARG_CHECK(options.weight_decay >= 0.0, "invalid weight_decay ", options.weight_decay);
  for (size_t k = 0; k < params_.size(); ++k) {
    exp_avg_[k].assign(params_[k]->numel(), 0.0f);
    exp_avg_sq_[k].assign(params_[k]->numel(), 0.0f);
  }
}

void AdamW::step() {
  const float b1 = static_cast<float>(options_.beta1), b2 = static_cast<float>(options_.beta2);
  const float decay = static_cast<float>(1.0 - lr_ * options_.weight_decay);
  const float eps = static_cast<float>(options_.eps);
  for (size_t k = 0; k < params_.size(); ++k) {
    Parameter& p = *params_[k];
    const int64_t t = ++steps_[k];
    const double bias_correction1 = 1.0 - std::pow(options_.beta1, static_cast<double>(t));
    const double bias_correction2 = 1.0 - std::pow(options_.beta2, static_cast<double>(t));
    const float step_size = static_cast<float>(lr_ / bias_correction1);
    const float bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
    float* w = p.data();
    const float* g = p.grad();
    float* m = exp_avg_[k].data();
    float* v = exp_avg_sq_[k].data();
    for (size_t i = 0; i < p.numel(); ++i) {
      w[i] *= decay;
      m[i] = m[i] * b1 + (1.0f - b1) * g[i];
      v[i] = v[i] * b2 + (1.0f - b2) * g[i] * g[i];
      const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
      w[i] -= step_size * (m[i] / denom);
    }
  }
}

void AdamW::save_state(StateDict& out, const std::string& prefix) const {
  out.set_double(prefix + "lr", lr_);
  for (size_t k = 0; k < params_.size(); ++k) {
    const std::string base = str_cat(prefix, "state.", k, ".");
    out.set_int(base + "step", steps_[k]);
    out.set_floats(base + "exp_avg", params_[k]->shape(), exp_avg_[k]);
    out.set_floats(base + "exp_avg_sq", params_[k]->shape(), exp_avg_sq_[k]);
  }
}

void AdamW::load_state(const StateDict& in, const std::string& prefix) {
  lr_ = in.get_double(prefix + "lr");
  for (size_t k = 0; k < params_.size(); ++k) {
    const std::string base = str_cat(prefix, "state.", k, ".");
    steps_[k] = in.get_int(base + "step");
    exp_avg_[k] = in.get_floats(base + "exp_avg", params_[k]->shape());
    exp_avg_sq_[k] = in.get_floats(base + "exp_avg_sq", params_[k]->shape());
  }
}

}  // namespace collie::nn
