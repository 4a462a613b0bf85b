// Launchers of the optimizers' update kernels (nn/cuda/optimizer_kernels.cu),
// asynchronous on `stream`. A private header of nn/cuda: it includes
// cuda_runtime.h and is C++17, which is what nvcc compiles here.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace collie::nn::cuda {

// torch.optim.SGD's update (nn/sgd.h); `first` starts the momentum buffer.
void launch_sgd_update(float* w, const float* g, float* buf, int64_t n, float lr, float wd,
                       float momentum, float keep, bool nesterov, bool first, cudaStream_t stream);

// torch.optim.AdamW's update (nn/adamw.h), with the host-computed
// decay = 1 - lr * weight_decay, step_size = lr / (1 - beta1^t) and
// bc2_sqrt = sqrt(1 - beta2^t).
void launch_adamw_update(float* w, const float* g, float* m, float* v, int64_t n, float decay,
                         float beta1, float beta2, float step_size, float bc2_sqrt, float eps,
                         cudaStream_t stream);

}  // namespace collie::nn::cuda
