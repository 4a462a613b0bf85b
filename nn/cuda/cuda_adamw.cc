#include "collie/nn/cuda/cuda_adamw.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "collie/base/str_cat.h"
#include "collie/nn/cuda/optimizer_kernels.h"
#include "collie/runtime/cuda/cuda_device.h"

namespace collie::nn::cuda {

CudaAdamW::CudaAdamW(CudaMlp& model, AdamWOptions options)
    : model_(model), options_(options), infos_(model.parameter_info()) {
  for (const ParameterInfo& info : infos_) {
    offsets_.push_back(num_params_);
    num_params_ += info.numel();
  }
}

void CudaAdamW::ensure_state() {
  if (!steps_.empty()) return;
  const auto stream = static_cast<cudaStream_t>(model_.stream());
  exp_avg_.reserve(num_params_);
  exp_avg_sq_.reserve(num_params_);
  collie::cuda::check(cudaMemsetAsync(exp_avg_.get(), 0, num_params_ * sizeof(float), stream),
                      "cudaMemsetAsync");
  collie::cuda::check(cudaMemsetAsync(exp_avg_sq_.get(), 0, num_params_ * sizeof(float), stream),
                      "cudaMemsetAsync");
  steps_.assign(infos_.size(), 0);
}

void CudaAdamW::step() {
  const AdamWOptions& o = options_;
  const double lr = o.lr;
  collie::cuda::set_device(model_.device());
  ensure_state();
  const auto stream = static_cast<cudaStream_t>(model_.stream());
  // The host scalars exactly as AdamW::step computes them (in double).
  const float decay = static_cast<float>(1.0 - lr * o.weight_decay);
  for (size_t i = 0; i < infos_.size(); ++i) {
    const int64_t t = ++steps_[i];
    const double bias_correction1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
    const double bias_correction2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
    const size_t off = offsets_[i];
    const TensorView p = model_.parameter(i);
    const TensorView g = model_.gradient(i);
    launch_adamw_update(
        p.as<float>(), g.as<const float>(), exp_avg_.get() + off, exp_avg_sq_.get() + off,
        static_cast<int64_t>(p.count), decay, static_cast<float>(o.beta1),
        static_cast<float>(o.beta2), static_cast<float>(lr / bias_correction1),
        static_cast<float>(std::sqrt(bias_correction2)), static_cast<float>(o.eps), stream);
  }
  collie::cuda::check(cudaGetLastError(), "adamw_update launch");
}

void CudaAdamW::save_state(StateDict& out, const std::string& prefix) const {
  collie::cuda::set_device(model_.device());
  std::vector<float> avg(num_params_, 0.0f), avg_sq(num_params_, 0.0f);
  collie::cuda::check(cudaStreamSynchronize(static_cast<cudaStream_t>(model_.stream())),
                      "cudaStreamSynchronize");
  if (!steps_.empty()) {
    collie::cuda::check(
        cudaMemcpy(avg.data(), exp_avg_.get(), num_params_ * sizeof(float), cudaMemcpyDeviceToHost),
        "cudaMemcpy (exp_avg)");
    collie::cuda::check(cudaMemcpy(avg_sq.data(), exp_avg_sq_.get(), num_params_ * sizeof(float),
                                   cudaMemcpyDeviceToHost),
                        "cudaMemcpy (exp_avg_sq)");
  }
  out.set_double(prefix + "lr", options_.lr);
  for (size_t k = 0; k < infos_.size(); ++k) {
    const std::string base = str_cat(prefix, "state.", k, ".");
    const size_t off = offsets_[k], n = infos_[k].numel();
    out.set_int(base + "step", steps_.empty() ? 0 : steps_[k]);
    out.set_floats(base + "exp_avg", infos_[k].shape, std::span<const float>(avg.data() + off, n));
    out.set_floats(base + "exp_avg_sq", infos_[k].shape,
                   std::span<const float>(avg_sq.data() + off, n));
  }
}

void CudaAdamW::load_state(const StateDict& in, const std::string& prefix) {
  collie::cuda::set_device(model_.device());
  // Read everything before touching the device state: a bad file changes nothing.
  const double lr = in.get_double(prefix + "lr");
  std::vector<int64_t> steps;
  std::vector<float> avg(num_params_), avg_sq(num_params_);
  for (size_t k = 0; k < infos_.size(); ++k) {
    const std::string base = str_cat(prefix, "state.", k, ".");
    steps.push_back(in.get_int(base + "step"));
    auto a = in.get_floats(base + "exp_avg", infos_[k].shape);
    auto b = in.get_floats(base + "exp_avg_sq", infos_[k].shape);
    std::copy(a.begin(), a.end(), avg.begin() + static_cast<std::ptrdiff_t>(offsets_[k]));
    std::copy(b.begin(), b.end(), avg_sq.begin() + static_cast<std::ptrdiff_t>(offsets_[k]));
  }
  ensure_state();
  collie::cuda::check(cudaStreamSynchronize(static_cast<cudaStream_t>(model_.stream())),
                      "cudaStreamSynchronize");
  collie::cuda::check(
      cudaMemcpy(exp_avg_.get(), avg.data(), avg.size() * sizeof(float), cudaMemcpyHostToDevice),
      "cudaMemcpy (exp_avg)");
  collie::cuda::check(cudaMemcpy(exp_avg_sq_.get(), avg_sq.data(), avg_sq.size() * sizeof(float),
                                 cudaMemcpyHostToDevice),
                      "cudaMemcpy (exp_avg_sq)");
  steps_ = std::move(steps);
  options_.lr = lr;
}

}  // namespace collie::nn::cuda
