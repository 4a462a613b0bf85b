// TrainModel: the model blip_train trains and its optimizer, on the CPU (the
// Eigen Sequential and nn::AdamW) or on a GPU (nn::cuda::CudaMlp and its
// device AdamW), behind one interface, so that train_one_epoch reads like
// BLIP's whatever --device says. The host Sequential and AdamW stay the
// reference copy for evaluation and checkpoints: sync_to_host() brings the
// GPU's parameters and optimizer state back into them.
//
// The CUDA implementation (train_model_cuda.cc) is compiled only when collie
// is built with CUDA; otherwise train_model_no_cuda.cc refuses --device cuda
// with the reason.
#pragma once

#include <memory>
#include <string>

#include "collie/nn/adamw.h"
#include "collie/nn/ddp_model.h"
#include "collie/nn/sequential.h"

namespace collie::samples {

class TrainModel {
 public:
  virtual ~TrainModel() = default;

  // What DistributedDataParallel wraps; its device decides where the
  // gradient buckets live (and so which backend can reduce them).
  virtual nn::DdpModel& ddp_model() = 0;
  // One step without DDP: forward (host logits), then backward from
  // d(loss)/d(logits) of that forward.
  virtual const nn::Tensor& forward(const nn::Tensor& input) = 0;
  virtual void backward(const nn::Tensor& grad_logits) = 0;
  virtual void zero_grad() = 0;
  // The optimizer step at the host optimizer's current learning rate.
  virtual void step() = 0;
  // Parameters and optimizer state into the host model and optimizer
  // (nothing to do on the CPU).
  virtual void sync_to_host() = 0;
};

// The CPU: `model` and `optimizer` themselves. Both must outlive the result.
std::unique_ptr<TrainModel> make_cpu_train_model(nn::Sequential& model, nn::AdamW& optimizer);

// Empty when --device cuda can run here, else why not ("collie was built
// without CUDA", "no CUDA device is visible").
std::string cuda_unavailable_reason();
// CUDA device `device`, starting from `model`'s parameters and `optimizer`'s
// state (after a resume, too); `options` are the optimizer's. Both must
// outlive the result. Throws BackendError when CUDA is not available.
std::unique_ptr<TrainModel> make_cuda_train_model(nn::Sequential& model, nn::AdamW& optimizer,
                                                  const nn::AdamWOptions& options, int device);

}  // namespace collie::samples
