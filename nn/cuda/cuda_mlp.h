// CudaMlp: the same MLP as nn::Sequential (Flatten, Linear, ReLU layers) on
// one GPU. Parameters and gradients live in flat device buffers, so that a
// DDP step on NCCL is one all_reduce of gradients(). The products are cuBLAS
// SGEMMs on row-major batches (the column-major trick: a row-major [r, c]
// matrix is a column-major [c, r] one); bias, ReLU and softmax cross-entropy
// are small kernels. The optimizers that update it on the device are
// CudaSgd (nn/cuda/cuda_sgd.h) and CudaAdamW (nn/cuda/cuda_adamw.h).
//
// It starts from a CPU model's parameters (so initialisation is the CPU
// model's, torch's) and can copy them back; results match the CPU model to
// float32 tolerance (test/nn/cuda). No CUDA header is included here.
//
// DDP. CudaMlp is a DdpModel (nn/ddp_model.h), so DistributedDataParallel
// wraps it directly and reduces its gradients over the nccl backend. Each
// parameter's gradient is addressed through its own pointer, which DDP
// re-points into a slice of its device bucket; backward runs with the model's
// stream as the thread's current stream and, layer by layer from the last,
// fires the weight's and the bias's ready hooks right after queuing their
// gradient products and before the input-gradient product, so that a
// complete bucket's all_reduce is queued (on NCCL's stream, after an event on
// this one) while earlier layers are still computing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "collie/base/types.h"
#include "collie/nn/cuda/cuda_ops.h"
#include "collie/nn/ddp_model.h"
#include "collie/nn/sequential.h"

namespace collie::nn::cuda {

class CudaMlp final : public DdpModel {
 public:
  // Throws InvalidArgument for a layer other than Flatten, Linear (with
  // bias) and ReLU; BackendError when CUDA or cuBLAS fails.
  CudaMlp(Sequential& cpu_model, int device);
  ~CudaMlp() override;
  CudaMlp(const CudaMlp&) = delete;
  CudaMlp& operator=(const CudaMlp&) = delete;

  // Copies the host batch [B, ...] to the device, runs forward, writes the
  // logits [B, classes] to `logits` on the host.
  void forward(const Tensor& input, Tensor& logits) override;
  // Backward of the last forward (same input) from d(loss)/d(logits) on the
  // host [B, classes]: uploads it and queues the backward; gradients
  // accumulate. Returns once everything is queued (the host does not wait).
  void backward(const Tensor& input, const Tensor& logits, const Tensor& grad_logits) override;
  // Forward, mean softmax cross-entropy and backward; gradients accumulate
  // (zero_grad() between steps). Returns the loss.
  float forward_backward(const Tensor& input, std::span<const int64_t> labels);
  void zero_grad();

  // Device views for collectives: all parameters / all gradients, flat, in
  // named_parameters() order. gradients() throws Error while DDP holds the
  // gradients in its buckets (they are not one flat array then).
  TensorView parameters();
  TensorView gradients();
  // Parameter i's gradient where it lives now (its own slice of the flat
  // array, or a slice of a DDP bucket).
  TensorView gradient(size_t i);
  // Host copies for checks and checkpoints.
  std::vector<float> gradients_to_host() const;
  void copy_parameters_to(Sequential& cpu_model) const;
  int device() const { return device_; }
  // The stream every kernel, copy and DDP operation of this model is queued
  // on (a cudaStream_t).
  void* stream() const;

  // DdpModel.
  DeviceOps& ops() override { return *ops_; }
  std::vector<ParameterInfo> parameter_info() override;
  TensorView parameter(size_t i) override;
  void use_grad_storage(size_t i, float* storage) override;
  void use_own_grad_storage(size_t i) noexcept override;
  void set_grad_ready_hook(size_t i, Hook hook) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int device_;
  std::unique_ptr<CudaOps> ops_;
};

}  // namespace collie::nn::cuda
