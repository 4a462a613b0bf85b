// CudaAdamW: torch.optim.AdamW's update (nn/adamw.h) on a CudaMlp's
// parameters, on the device, queued on the model's stream: the same float
// operations as nn::AdamW, with the bias corrections computed on the host
// in double. The moments are flat device arrays in the model's parameter
// order; the update is one launch per parameter (under DDP the gradients are
// slices of buckets, in another order). save_state/load_state use
// nn::AdamW's keys, so a checkpoint written from the GPU loads into the CPU
// optimizer and back. No CUDA header is included here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collie/nn/adamw.h"
#include "collie/nn/cuda/cuda_mlp.h"
#include "collie/nn/cuda/device_array.h"
#include "collie/nn/state_dict.h"

namespace collie::nn::cuda {

class CudaAdamW {
 public:
  // `model` must outlive the optimizer.
  CudaAdamW(CudaMlp& model, AdamWOptions options = {});
  CudaAdamW(const CudaAdamW&) = delete;
  CudaAdamW& operator=(const CudaAdamW&) = delete;

  // Queues one update at lr() of every parameter from its gradient; the
  // host does not wait. Throws BackendError when CUDA fails.
  void step();

  double lr() const { return options_.lr; }
  // A schedule (cosine_lr_schedule on the host optimizer) sets it per epoch.
  void set_lr(double lr) { options_.lr = lr; }

  // "<prefix>lr", "<prefix>state.<k>.step", ".exp_avg", ".exp_avg_sq": the
  // keys of nn::AdamW::save_state. Saving waits for the model's stream.
  void save_state(StateDict& out, const std::string& prefix = "optimizer.") const;
  // Reads every key (and the lr) before touching the device: a bad state
  // changes nothing. Throws as StateDict's getters do.
  void load_state(const StateDict& in, const std::string& prefix = "optimizer.");

 private:
  // Zeroed moments and step 0 before the first step or load.
  void ensure_state();

  CudaMlp& model_;
  AdamWOptions options_;  // options_.lr is lr()
  std::vector<ParameterInfo> infos_;
  std::vector<size_t> offsets_;  // parameter i's offset in the moments
  size_t num_params_ = 0;
  DeviceArray<float> exp_avg_, exp_avg_sq_;
  std::vector<int64_t> steps_;  // empty until the first step or load
};

}  // namespace collie::nn::cuda
