// CudaSgd: torch.optim.SGD's update (nn/sgd.h: momentum, dampening,
// Nesterov, coupled weight decay) on a CudaMlp's parameters, on the device,
// queued on the model's stream. The momentum buffer is one flat device
// array in the model's parameter order. The update is one launch per
// parameter, because under DDP each gradient is a slice of a bucket
// (CudaMlp::gradient(i)) and the buckets hold them in another order. No CUDA
// header is included here.
#pragma once

#include <vector>

#include "collie/nn/cuda/cuda_mlp.h"
#include "collie/nn/cuda/device_array.h"
#include "collie/nn/sgd.h"

namespace collie::nn::cuda {

class CudaSgd {
 public:
  // `model` must outlive the optimizer.
  CudaSgd(CudaMlp& model, SgdOptions options);
  CudaSgd(const CudaSgd&) = delete;
  CudaSgd& operator=(const CudaSgd&) = delete;

  // Queues one update of every parameter from its gradient; the host does
  // not wait. Throws BackendError when CUDA fails.
  void step();

  double lr() const { return options_.lr; }
  void set_lr(double lr) { options_.lr = lr; }

 private:
  CudaMlp& model_;
  SgdOptions options_;
  std::vector<size_t> offsets_;  // parameter i's offset in momentum_
  size_t num_params_ = 0;
  DeviceArray<float> momentum_;
  // False until the first step with momentum, as torch's momentum_buffer is
  // None: that step starts the buffer from the gradient.
  bool momentum_ready_ = false;
};

}  // namespace collie::nn::cuda
