#include "collie/nn/cuda/cuda_sgd.h"

#include <cuda_runtime.h>

#include "collie/nn/cuda/optimizer_kernels.h"
#include "collie/runtime/cuda/cuda_device.h"

namespace collie::nn::cuda {

CudaSgd::CudaSgd(CudaMlp& model, SgdOptions options) : model_(model), options_(options) {
  for (const ParameterInfo& info : model_.parameter_info()) {
    offsets_.push_back(num_params_);
    num_params_ += info.numel();
  }
}

void CudaSgd::step() {
  const SgdOptions& o = options_;
  collie::cuda::set_device(model_.device());
  if (o.momentum != 0.0) momentum_.reserve(num_params_);
  const bool first = !momentum_ready_;
  const auto stream = static_cast<cudaStream_t>(model_.stream());
  for (size_t i = 0; i < offsets_.size(); ++i) {
    const TensorView p = model_.parameter(i);
    const TensorView g = model_.gradient(i);
    launch_sgd_update(p.as<float>(), g.as<const float>(),
                      momentum_.get() ? momentum_.get() + offsets_[i] : nullptr,
                      static_cast<int64_t>(p.count), static_cast<float>(o.lr),
                      static_cast<float>(o.weight_decay), static_cast<float>(o.momentum),
                      static_cast<float>(1.0 - o.dampening), o.nesterov, first, stream);
  }
  collie::cuda::check(cudaGetLastError(), "sgd_update launch");
  if (o.momentum != 0.0) momentum_ready_ = true;
}

}  // namespace collie::nn::cuda
