#include "collie/nn/ddp_model.h"

#include "collie/base/check.h"

namespace collie::nn {

ModuleModel::ModuleModel(Module& module) : module_(module), params_(module.named_parameters()) {
  for (auto& [name, p] : params_) COLLIE_ARG_CHECK(p != nullptr, "DDP: null parameter ", name);
}

std::vector<ParameterInfo> ModuleModel::parameter_info() {
  std::vector<ParameterInfo> out;
  for (auto& [name, p] : params_) out.push_back({name, p->shape()});
  return out;
}

TensorView ModuleModel::parameter(size_t i) {
  Parameter& p = *params_.at(i).second;
  return view(p.data(), p.numel());
}

void ModuleModel::use_grad_storage(size_t i, float* storage) {
  params_.at(i).second->use_grad_storage(storage);
}

void ModuleModel::use_own_grad_storage(size_t i) noexcept {
  if (i < params_.size()) params_[i].second->use_own_grad_storage();
}

void ModuleModel::set_grad_ready_hook(size_t i, Hook hook) {
  params_.at(i).second->set_grad_ready_hook(std::move(hook));
}

void ModuleModel::forward(const Tensor& input, Tensor& output) { module_.forward(input, output); }

void ModuleModel::backward(const Tensor& input, const Tensor& output, const Tensor& grad_output) {
  module_.backward(input, output, grad_output, nullptr);
}

}  // namespace collie::nn
