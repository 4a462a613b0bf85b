// CudaMlp: the same MLP as nn::Sequential (Flatten, Linear, ReLU layers) on
// one GPU. Parameters, gradients and SGD momentum live in flat device
// buffers, so that a DDP step on NCCL is one all_reduce of gradients(). The
// products are cuBLAS SGEMMs on row-major batches (the column-major trick:
// a row-major [r, c] matrix is a column-major [c, r] one); bias, ReLU,
// softmax cross-entropy and SGD are small kernels.
//
// It starts from a CPU model's parameters (so initialisation is the CPU
// model's, torch's) and can copy them back; results match the CPU model to
// float32 tolerance (test/nn_gpu). No CUDA header is included here.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "nn/sequential.h"
#include "nn/sgd.h"
#include "runtime/base/types.h"

namespace collie::nn::cuda {

class CudaMlp {
 public:
  // Throws InvalidArgument for a layer other than Flatten, Linear (with
  // bias) and ReLU; BackendError when CUDA or cuBLAS fails.
  CudaMlp(Sequential& cpu_model, int device);
  ~CudaMlp();
  CudaMlp(const CudaMlp&) = delete;
  CudaMlp& operator=(const CudaMlp&) = delete;

  // Copies the host batch [B, ...] to the device, runs forward, writes the
  // logits [B, classes] to `logits` on the host.
  void forward(const Tensor& input, Tensor& logits);
  // Forward, mean softmax cross-entropy and backward; gradients accumulate
  // (zero_grad() between steps). Returns the loss.
  float forward_backward(const Tensor& input, std::span<const int64_t> labels);
  void zero_grad();
  // torch.optim.SGD's update (see nn/sgd.h) on the device.
  void sgd_step(const SgdOptions& options);

  // Device views for collectives: all parameters / all gradients, flat, in
  // named_parameters() order.
  TensorView parameters();
  TensorView gradients();
  // Host copies for checks and checkpoints.
  std::vector<float> gradients_to_host() const;
  void copy_parameters_to(Sequential& cpu_model) const;
  int device() const { return device_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int device_;
};

}  // namespace collie::nn::cuda
